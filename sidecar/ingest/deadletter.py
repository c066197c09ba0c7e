"""Dead letters: what could not be scored, why, and how many, by reason.

A dead-letter record carries the **original record bytes and headers** unchanged, plus headers
naming the reason and the source (topic, partition, offset). A rejected span inside an otherwise
good record produces one dead-letter record per span, again with the original record bytes, and
``x-dead-letter-trace-id`` / ``x-dead-letter-span-id`` naming the span: replaying the record
through a fixed sidecar reproduces exactly the failure.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from sidecar.core import names
from sidecar.core.deadletters import DeadLetterReason

__all__ = [
    "DeadLetter",
    "DeadLetterCounter",
    "DeadLetterReason",
    "RecordOrigin",
    "dead_letter_headers",
    "lone_span_request",
]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: DeadLetterReason
    detail: str = ""
    trace_id: str | None = None  # set for span-level dead letters
    span_id: str | None = None


@dataclass(frozen=True, slots=True)
class RecordOrigin:
    """Where a Kafka record came from, and what it carried."""

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


def dead_letter_headers(letter: DeadLetter, source: RecordOrigin, encoding: str) -> list[tuple[str, bytes]]:
    """The original headers followed by the dead-letter headers (header values are UTF-8)."""
    added = [
        (names.DL_REASON, letter.reason.value),
        (names.DL_SOURCE_TOPIC, source.topic),
        (names.DL_SOURCE_PARTITION, str(source.partition)),
        (names.DL_SOURCE_OFFSET, str(source.offset)),
        (names.DL_ENCODING, encoding),
    ]
    if letter.detail:
        added.append((names.DL_DETAIL, letter.detail))
    if letter.trace_id is not None:
        added.append((names.DL_TRACE_ID, letter.trace_id))
    if letter.span_id is not None:
        added.append((names.DL_SPAN_ID, letter.span_id))
    return [*source.headers, *((k, v.encode("utf-8", errors="replace")) for k, v in added)]


class DeadLetterCounter:
    """Dead letters counted by reason. Thread-safe, so a metrics scrape thread can read it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, letters: Sequence[DeadLetter]) -> None:
        with self._lock:
            for letter in letters:
                self._counts[letter.reason.value] = self._counts.get(letter.reason.value, 0) + 1

    def count(self, reason: DeadLetterReason | str) -> int:
        with self._lock:
            return self._counts.get(str(reason), 0)

    def counts(self) -> Mapping[str, int]:
        """A snapshot: reason value → count, every reason listed (zero included)."""
        with self._lock:
            return {r.value: self._counts.get(r.value, 0) for r in DeadLetterReason}

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


def lone_span_request(span: Span, service: str | None) -> bytes:
    """An export request (OTLP protobuf) holding one span and its resource's service name: the dead letter of
    a span set aside from an assembled trace, whose records hold other traces' spans too."""
    resource = Resource()
    if service is not None:
        resource.attributes.append(KeyValue(key=names.SERVICE_NAME, value=AnyValue(string_value=service)))
    scope = ScopeSpans()
    scope.spans.append(span)
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope])])
    data: bytes = request.SerializeToString()
    return data
