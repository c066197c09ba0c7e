"""The pure ingest step for one record: size check → decode → select → map. No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from sidecar.conventions.selection import Selection
from sidecar.conventions.spans import SkipCounts, spans_to_runs
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason
from sidecar.ingest.decode import Encoding, TraceDecodeError, decode_traces
from sidecar.runs import ScorerRunRequest

__all__ = ["IngestConfig", "ProcessedRecord", "process_record"]


class IngestConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = "otlp_spans"
    encoding: Encoding = "otlp_proto"
    dead_letter_topic: str = "otlp_spans.dead_letter"
    max_record_bytes: int = Field(default=1024 * 1024, gt=0)
    selection: Selection = Selection()


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
    result = spans_to_runs(traces, config.selection)
    letters = tuple(
        DeadLetter(DeadLetterReason(r.reason), r.detail, trace_id=r.trace_id, span_id=r.span_id) for r in result.rejects
    )
    return ProcessedRecord(runs=result.runs, dead_letters=letters, skipped=result.skipped, spans_seen=result.spans_seen)
