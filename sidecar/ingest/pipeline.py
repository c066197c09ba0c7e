"""The pure ingest step for one record: size check → decode → select → map. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from sidecar.conventions.selection import Selection
from sidecar.conventions.spans import SkipCounts, spans_to_runs
from sidecar.conventions.trace_runs import TraceSpan, group_by_trace
from sidecar.conventions.versions import DEFAULT_VERSIONS, VersionAttributes
from sidecar.core.runs import ScorerRunRequest
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason
from sidecar.ingest.decode import Encoding, TraceDecodeError, decode_traces

__all__ = ["IngestConfig", "MultiProcessedRecord", "ProcessedRecord", "process_record", "process_record_multi"]


class IngestConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = "otlp_spans"
    encoding: Encoding = "otlp_proto"
    dead_letter_topic: str = "otlp_spans.dead_letter"
    max_record_bytes: int = Field(default=1024 * 1024, gt=0)
    selection: Selection = Selection()
    # Resource attributes of the scored span that each run keeps (the OTLP exporter copies them; judges
    # written in YAML read the keys their templates name).
    resource_attributes: frozenset[str] = frozenset()
    # The scored span's own attributes each run keeps: the keys judges written in YAML read (none by default:
    # a configuration without such a judge copies nothing).
    span_attributes: frozenset[str] = frozenset()
    # Where each run's version is read (docs/versions.md); its resource keys belong in resource_attributes.
    versions: VersionAttributes = DEFAULT_VERSIONS


@dataclass(frozen=True, slots=True)
class ProcessedRecord:
    runs: tuple[ScorerRunRequest, ...] = ()
    dead_letters: tuple[DeadLetter, ...] = ()
    skipped: SkipCounts = field(default_factory=SkipCounts)
    spans_seen: int = 0


def process_record(value: bytes | None, config: IngestConfig) -> ProcessedRecord:
    """Runs and dead letters for one record value. Raises nothing on bad input."""
    if value is None:  # a tombstone carries no traces
        return ProcessedRecord()
    if len(value) > config.max_record_bytes:
        detail = f"record is {len(value)} bytes > {config.max_record_bytes}"
        return ProcessedRecord(dead_letters=(DeadLetter(DeadLetterReason.RECORD_TOO_LARGE, detail),))
    try:
        traces = decode_traces(value, config.encoding)
    except TraceDecodeError as exc:
        return ProcessedRecord(dead_letters=(DeadLetter(DeadLetterReason.DECODE_ERROR, str(exc)[:300]),))
    result = spans_to_runs(
        traces,
        config.selection,
        resource_attributes=config.resource_attributes,
        span_attributes=config.span_attributes,
        versions=config.versions,
    )
    letters = tuple(
        DeadLetter(DeadLetterReason(r.reason), r.detail, trace_id=r.trace_id, span_id=r.span_id) for r in result.rejects
    )
    return ProcessedRecord(runs=result.runs, dead_letters=letters, skipped=result.skipped, spans_seen=result.spans_seen)


@dataclass(frozen=True, slots=True)
class MultiProcessedRecord:
    """One record processed for several scorers' selections: decoded once, mapped per selection."""

    runs: tuple[tuple[ScorerRunRequest, ...], ...] = ()  # one tuple per selection, in order
    dead_letters: tuple[DeadLetter, ...] = ()
    skipped: tuple[SkipCounts, ...] = ()
    spans_seen: int = 0
    # Every span of the record by trace id, when asked for (``scope: trace`` scorers assemble them later).
    traces: Mapping[bytes, list[TraceSpan]] = field(default_factory=dict)
    # The trace id of every span the record holds, when asked for (checking a record's key against them).
    trace_ids: frozenset[bytes] = frozenset()


def process_record_multi(
    value: bytes | None,
    config: IngestConfig,
    selections: tuple[Selection | None, ...],
    *,
    group_traces: bool = False,
    offset: int = -1,
    trace_ids: bool = False,
) -> MultiProcessedRecord:
    """Like :func:`process_record`, for several selections (``None``: a ``scope: trace`` scorer, which maps
    nothing here). A span rejected under several selections is dead-lettered once. ``group_traces``: also
    return the record's spans by trace id (``offset``: the record's, kept with each span). ``trace_ids``: also
    return the trace id of every span the record holds."""
    empty = tuple(() for _ in selections)
    no_skips = tuple(SkipCounts() for _ in selections)
    if value is None:
        return MultiProcessedRecord(runs=empty, skipped=no_skips)
    if len(value) > config.max_record_bytes:
        detail = f"record is {len(value)} bytes > {config.max_record_bytes}"
        letter = DeadLetter(DeadLetterReason.RECORD_TOO_LARGE, detail)
        return MultiProcessedRecord(runs=empty, dead_letters=(letter,), skipped=no_skips)
    try:
        traces = decode_traces(value, config.encoding)
    except TraceDecodeError as exc:
        letter = DeadLetter(DeadLetterReason.DECODE_ERROR, str(exc)[:300])
        return MultiProcessedRecord(runs=empty, dead_letters=(letter,), skipped=no_skips)
    runs: list[tuple[ScorerRunRequest, ...]] = []
    skipped: list[SkipCounts] = []
    letters: dict[tuple[str, str, str], DeadLetter] = {}
    spans_seen = 0
    for selection in selections:
        if selection is None:
            runs.append(())
            skipped.append(SkipCounts())
            continue
        result = spans_to_runs(
            traces,
            selection,
            resource_attributes=config.resource_attributes,
            span_attributes=config.span_attributes,
            versions=config.versions,
        )
        runs.append(result.runs)
        skipped.append(result.skipped)
        spans_seen = max(spans_seen, result.spans_seen)
        for r in result.rejects:
            letters.setdefault(
                (r.trace_id, r.span_id, r.reason),
                DeadLetter(DeadLetterReason(r.reason), r.detail, trace_id=r.trace_id, span_id=r.span_id),
            )
    grouped: Mapping[bytes, list[TraceSpan]] = {}
    if group_traces:
        # A protobuf record holding one trace is buffered as it came (trace_buffer.BufferedRecord).
        record = value if config.encoding == "otlp_proto" else None
        grouped = group_by_trace(traces, resource_attributes=config.resource_attributes, offset=offset, record=record)
        spans_seen = max(spans_seen, sum(len(spans) for spans in grouped.values()))
    ids: frozenset[bytes] = frozenset()
    if trace_ids:
        ids = (
            frozenset(grouped)
            if group_traces
            else frozenset(
                span.trace_id for rs in traces.resource_spans for scope in rs.scope_spans for span in scope.spans
            )
        )
    return MultiProcessedRecord(
        runs=tuple(runs),
        dead_letters=tuple(letters.values()),
        skipped=tuple(skipped),
        spans_seen=spans_seen,
        traces=grouped,
        trace_ids=ids,
    )
