"""Semantic conventions: which spans are agent runs, and how their content maps to a scorer run.

Public API: :func:`spans_to_runs` with a :class:`Selection`; attribute names live in
:mod:`sidecar.core.names`.
"""

from sidecar.conventions.attributes import MappingError
from sidecar.conventions.mapping import SpanView, map_span
from sidecar.conventions.selection import AttributePredicate, NameFilter, Selection, SpanKind, sample_score
from sidecar.conventions.spans import (
    DEFAULT_SELECTION,
    MappingResult,
    RejectReason,
    SkipCounts,
    SpanReject,
    spans_to_runs,
)

__all__ = [
    "DEFAULT_SELECTION",
    "AttributePredicate",
    "MappingError",
    "MappingResult",
    "NameFilter",
    "RejectReason",
    "Selection",
    "SkipCounts",
    "SpanKind",
    "SpanReject",
    "SpanView",
    "map_span",
    "sample_score",
    "spans_to_runs",
]
