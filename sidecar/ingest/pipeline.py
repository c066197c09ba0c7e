"""The pure ingest step for one record: size check, then decode. No I/O.

A record is read once, whatever the configured scorers: what each scope makes of its spans is its stage's
business (``sidecar.runtime.stages``).
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from pydantic import BaseModel, ConfigDict, Field

from sidecar.conventions.versions import DEFAULT_VERSIONS, VersionAttributes
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason
from sidecar.ingest.decode import Encoding, TraceDecodeError, decode_traces

__all__ = ["IngestConfig", "ReadRecord", "read_record", "trace_ids_of"]


class IngestConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = "otlp_spans"
    encoding: Encoding = "otlp_proto"
    dead_letter_topic: str = "otlp_spans.dead_letter"
    max_record_bytes: int = Field(default=1024 * 1024, gt=0)
    # Resource attributes of the scored span that each run keeps (the OTLP exporter copies them; judges
    # written in YAML read the keys their templates name).
    resource_attributes: frozenset[str] = frozenset()
    # The scored span's own attributes each run keeps: the keys judges written in YAML read (none by default:
    # a configuration without such a judge copies nothing).
    span_attributes: frozenset[str] = frozenset()
    # Where each run's version is read (docs/versions.md); its resource keys belong in resource_attributes.
    versions: VersionAttributes = DEFAULT_VERSIONS
    # Topics of OTLP logs (the Collector's otlp_logs) whose content events are joined to their spans.
    log_topics: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """A record's traces (``None``: a tombstone, or a record that cannot be read, then ``letter`` says why)."""

    traces: TracesData | None = None
    letter: DeadLetter | None = None

    @property
    def spans(self) -> int:
        traces = self.traces
        if traces is None:
            return 0
        return sum(len(scope.spans) for resource in traces.resource_spans for scope in resource.scope_spans)


def read_record(value: bytes | None, config: IngestConfig) -> ReadRecord:
    """The record's traces, or the dead letter that says why it cannot be read. Raises nothing on bad input."""
    if value is None:  # a tombstone carries no traces
        return ReadRecord()
    if len(value) > config.max_record_bytes:
        detail = f"record is {len(value)} bytes > {config.max_record_bytes}"
        return ReadRecord(letter=DeadLetter(DeadLetterReason.RECORD_TOO_LARGE, detail))
    try:
        return ReadRecord(traces=decode_traces(value, config.encoding))
    except TraceDecodeError as exc:
        return ReadRecord(letter=DeadLetter(DeadLetterReason.DECODE_ERROR, str(exc)[:300]))


def trace_ids_of(traces: TracesData) -> frozenset[bytes]:
    """The trace id of every span the record holds (checking a record's key against them)."""
    return frozenset(span.trace_id for rs in traces.resource_spans for scope in rs.scope_spans for span in scope.spans)
