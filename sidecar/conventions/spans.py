"""Decoded OTLP traces → scorer runs: select cheaply, then map only what was selected."""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, TracesData

from sidecar.conventions.attributes import attributes_dict
from sidecar.conventions.mapping import SpanView, agent_name_of, map_span
from sidecar.conventions.selection import Selection, SpanKind, classify, sampled_in
from sidecar.conventions.versions import DEFAULT_VERSIONS, VersionAttributes
from sidecar.core import names
from sidecar.core.runs import ResourceValue, ScorerRunRequest

__all__ = [
    "DEFAULT_SELECTION",
    "MappingResult",
    "RejectReason",
    "SkipCounts",
    "SpanAdmission",
    "SpanReject",
    "admit",
    "kept_attributes",
    "kept_resource",
    "service_name_of",
    "span_view",
    "spans_to_runs",
]

DEFAULT_SELECTION = Selection()
RejectReason = Literal["invalid_span", "too_large", "unmappable"]
# What per-span mapping may raise on hostile content; anything else is a bug and propagates.
_MAPPING_ERRORS = (ValueError, TypeError, KeyError, RecursionError)
_DETAIL_LIMIT = 300


@dataclass(frozen=True, slots=True)
class SpanReject:
    """A selected span that cannot become a run; it goes to the dead-letter topic."""

    trace_id: str
    span_id: str
    reason: RejectReason
    detail: str


@dataclass(frozen=True, slots=True)
class SkipCounts:
    """Candidate spans (of a selected kind) that were deliberately not scored."""

    internal: int = 0  # the sidecar's own spans (loop guard)
    filtered: int = 0  # service, agent or attribute filters
    sampled_out: int = 0
    no_content: int = 0  # no messages at all, e.g. content capture switched off
    # Spans that look like LLM or agent spans (a GenAI attribute, a convention's kind key with a value no rule
    # knows) but that no rule selects: counted whatever the selection, so a convention the sidecar misses is seen.
    unrecognised: int = 0


@dataclass(frozen=True, slots=True)
class MappingResult:
    runs: tuple[ScorerRunRequest, ...] = ()
    rejects: tuple[SpanReject, ...] = ()
    skipped: SkipCounts = field(default_factory=SkipCounts)
    spans_seen: int = 0


def service_name_of(resource_attributes: Any) -> str | None:
    return _service_name(resource_attributes)


def _service_name(resource_attributes: Any) -> str | None:
    for kv in resource_attributes:
        if kv.key == names.SERVICE_NAME:
            # One string per service, not one per record: buffered traces keep it with every span.
            return sys.intern(str(kv.value.string_value))
    return None


def kept_resource(resource_attributes: Any, keep: Collection[str]) -> tuple[tuple[str, ResourceValue], ...]:
    """The resource attributes named in ``keep`` that hold a scalar (string, bool, int, double)."""
    kept: dict[str, ResourceValue] = {}
    for kv in resource_attributes:
        if kv.key in keep:
            kind = kv.value.WhichOneof("value")
            if kind in ("string_value", "bool_value", "int_value", "double_value"):
                kept[kv.key] = getattr(kv.value, kind)
    return tuple(kept.items())


def kept_attributes(attributes: Mapping[str, Any], keep: Collection[str]) -> tuple[tuple[str, Any], ...]:
    """The span attributes named in ``keep`` that the span has, by key in sorted order (a run's copy)."""
    return tuple((key, attributes[key]) for key in sorted(keep) if key in attributes)


def _events(span: Span) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    return tuple((e.name, attributes_dict(e.attributes)) for e in span.events if e.name in names.CONTENT_EVENT_NAMES)


def _sampled(flags: int) -> bool:
    # The low byte of Span.flags holds W3C trace flags when the exporter sets them (Go, Java, the
    # Collector). Python's encoder sets only the is-remote bits (0x100/0x200) and leaves it 0: a span
    # that was exported through OTLP without trace flags was sampled.
    trace_flags = flags & 0xFF
    return bool(trace_flags & 0x01) if trace_flags else True


def _view(
    span: Span,
    kind: SpanKind,
    service: str | None,
    attributes: Mapping[str, Any],
    resource: tuple[tuple[str, ResourceValue], ...] = (),
    keep: Collection[str] = (),
    versions: VersionAttributes = DEFAULT_VERSIONS,
) -> SpanView:
    parent = span.parent_span_id
    return SpanView(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=parent.hex() if len(parent) == 8 else None,
        name=span.name,
        kind=kind,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        sampled=_sampled(span.flags),
        service_name=service,
        attributes=attributes,
        events=_events(span) if span.events else (),
        resource_attributes=resource,
        kept_attributes=kept_attributes(attributes, keep) if keep else (),
        version=versions.version_of(attributes, resource),
    )


@dataclass(frozen=True, slots=True)
class SpanAdmission:
    """Whether a span of a selected kind is scored, and why not: ``ok`` (with its attributes), ``internal``,
    ``filtered``, ``sampled_out``, or ``reject`` (malformed ids, too large: a dead letter)."""

    verdict: Literal["ok", "internal", "filtered", "sampled_out", "reject"]
    attributes: Mapping[str, Any] | None = None
    reject: SpanReject | None = None


def admit(span: Span, *, own_span: bool, service: str | None, selection: Selection) -> SpanAdmission:
    """The selection's checks for one span whose kind it selects, cheapest first (shared by span and trace
    scope: both pick the same spans)."""
    if own_span or service == names.SIDECAR_SERVICE_NAME:
        return SpanAdmission("internal")
    if not selection.services.allows(service):
        return SpanAdmission("filtered")
    trace_id = span.trace_id
    if len(trace_id) != 16 or len(span.span_id) != 8 or not any(trace_id):
        reject = SpanReject(trace_id.hex(), span.span_id.hex(), "invalid_span", "trace or span id malformed")
        return SpanAdmission("reject", reject=reject)
    if not sampled_in(selection.sample_rate, trace_id):
        return SpanAdmission("sampled_out")
    size = span.ByteSize()
    if size > selection.max_input_bytes:
        detail = f"span is {size} bytes > {selection.max_input_bytes}"
        return SpanAdmission("reject", reject=SpanReject(trace_id.hex(), span.span_id.hex(), "too_large", detail))
    attributes = attributes_dict(span.attributes)
    agents = selection.agents
    if ((agents.include or agents.exclude) and not agents.allows(agent_name_of(attributes))) or not all(
        p.holds(attributes) for p in selection.where
    ):
        return SpanAdmission("filtered")
    return SpanAdmission("ok", attributes=attributes)


def span_view(
    span: Span,
    kind: SpanKind,
    service: str | None,
    attributes: Mapping[str, Any],
    resource: tuple[tuple[str, ResourceValue], ...] = (),
    keep: Collection[str] = (),
    versions: VersionAttributes = DEFAULT_VERSIONS,
) -> SpanView:
    return _view(span, kind, service, attributes, resource, keep, versions)


def spans_to_runs(
    traces: TracesData | ExportTraceServiceRequest,
    selection: Selection = DEFAULT_SELECTION,
    *,
    resource_attributes: Collection[str] = (),
    span_attributes: Collection[str] = (),
    versions: VersionAttributes = DEFAULT_VERSIONS,
) -> MappingResult:
    """Every selected span of ``traces`` as a scorer run, or as a reject with its reason.

    ``resource_attributes``: resource attribute names whose (scalar) values each run keeps
    (``SpanTarget.resource_attributes``); ``span_attributes``: the scored span's attribute names each run
    keeps (``SpanTarget.span_attributes``); ``versions``: where each run's version is read (a resource
    attribute among them is read only when kept). Never raises on span content: malformed content becomes a
    :class:`SpanReject`.
    """
    runs: list[ScorerRunRequest] = []
    rejects: list[SpanReject] = []
    skipped: dict[str, int] = {"internal": 0, "filtered": 0, "sampled_out": 0, "no_content": 0, "unrecognised": 0}
    seen = 0
    kinds = selection.kinds
    for resource_spans in traces.resource_spans:
        service = _service_name(resource_spans.resource.attributes)
        resource: tuple[tuple[str, ResourceValue], ...] | None = None  # read once per resource, when needed
        for scope_spans in resource_spans.scope_spans:
            spans = scope_spans.spans
            seen += len(spans)
            for span in spans:
                kind, own_span, unrecognised = classify(span.attributes)
                if kind is None or kind not in kinds:
                    skipped["unrecognised"] += unrecognised
                    continue
                admission = admit(span, own_span=own_span, service=service, selection=selection)
                if admission.verdict == "reject":
                    assert admission.reject is not None
                    rejects.append(admission.reject)
                    continue
                if admission.attributes is None:
                    skipped[admission.verdict] += 1
                    continue
                if resource is None:
                    resource = (
                        kept_resource(resource_spans.resource.attributes, resource_attributes)
                        if resource_attributes
                        else ()
                    )
                view = _view(span, kind, service, admission.attributes, resource, span_attributes, versions)
                try:
                    run = map_span(view)
                except _MAPPING_ERRORS as exc:
                    detail = f"{exc.__class__.__name__}: {exc}"[:_DETAIL_LIMIT]
                    rejects.append(SpanReject(view.trace_id, view.span_id, "unmappable", detail))
                    continue
                if run is None:
                    skipped["no_content"] += 1
                else:
                    runs.append(run)
    return MappingResult(runs=tuple(runs), rejects=tuple(rejects), skipped=SkipCounts(**skipped), spans_seen=seen)
