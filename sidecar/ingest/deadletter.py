"""Dead letters: what could not be scored, why, and how many, by reason.

A dead-letter record carries the **original record bytes and headers**, plus headers naming the reason and the
source (topic, partition, offset). The spans of an otherwise good record rejected for one reason make one dead
letter (:func:`one_per_reason`), ``x-dead-letter-trace-id`` / ``x-dead-letter-span-id`` naming the first and
``x-dead-letter-span-count`` saying how many: replaying the record through a fixed sidecar reproduces exactly the
failure. A record's bytes travel once: a second reason's letter carries no value and names the letter that does
(``x-dead-letter-value-with``). Every letter fits what the producer may send (``kafka.max_request_size``,
:func:`letter_record`): a value too large keeps its first bytes, and ``x-dead-letter-truncated`` gives its size
(docs/limits.md). So the letters of one record never weigh much more than the record, whatever it holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from sidecar.core import names
from sidecar.core.deadletters import DeadLetterReason

__all__ = [
    "DEFAULT_MAX_REQUEST_SIZE",
    "DeadLetter",
    "DeadLetterCounter",
    "DeadLetterReason",
    "LetterRecord",
    "RecordOrigin",
    "letter_record",
    "one_per_reason",
    "spans_request",
]

# aiokafka's (and Kafka's) default max_request_size: the most one record sent by the producer may weigh.
DEFAULT_MAX_REQUEST_SIZE: Final = 1024 * 1024
_DETAIL_CHARS: Final = 1000
# A record's own key and headers keep at most this share of a letter: the rest is for its value.
_KEY_AND_HEADERS_SHARE: Final = 4


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: DeadLetterReason
    detail: str = ""
    trace_id: str | None = None  # set for span-level dead letters: the first span's
    span_id: str | None = None
    spans: int = 1  # span-level: how many spans set aside for this reason the letter stands for


@dataclass(frozen=True, slots=True)
class RecordOrigin:
    """Where a Kafka record came from, and what it carried."""

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


def one_per_reason(letters: Iterable[DeadLetter]) -> tuple[DeadLetter, ...]:
    """One letter per reason, in the order reasons first appear: the first span's ids and detail, every span
    counted (``spans``). 5,000 malformed spans of a record make one letter, not 5,000 copies of the record."""
    merged: dict[DeadLetterReason, DeadLetter] = {}
    for letter in letters:
        first = merged.get(letter.reason)
        merged[letter.reason] = letter if first is None else replace(first, spans=first.spans + letter.spans)
    return tuple(merged.values())


@dataclass(frozen=True, slots=True)
class LetterRecord:
    """A dead letter as the producer sends it."""

    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    truncated: bool  # the value keeps only its first bytes (x-dead-letter-truncated: the original's size)


def letter_record(
    letter: DeadLetter,
    source: RecordOrigin,
    encoding: str,
    *,
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
    value_with: DeadLetterReason | None = None,
) -> LetterRecord:
    """``letter`` about ``source`` as a record the producer accepts (at most ``max_request_size`` by aiokafka's
    estimate): the record's headers and then the dead-letter headers; its value, or none when another letter
    carries it (``value_with``: that letter's reason). What does not fit is cut, and said: the value keeps its first
    bytes (``x-dead-letter-truncated``: the original's size); a record's own key and headers heavier than a quarter
    of the request are left out (``x-dead-letter-key-dropped``, ``x-dead-letter-headers-dropped``)."""
    added = [
        (names.DL_REASON, letter.reason.value),
        (names.DL_SOURCE_TOPIC, source.topic),
        (names.DL_SOURCE_PARTITION, str(source.partition)),
        (names.DL_SOURCE_OFFSET, str(source.offset)),
        (names.DL_ENCODING, encoding),
    ]
    if letter.detail:
        added.append((names.DL_DETAIL, letter.detail[:_DETAIL_CHARS]))
    if letter.trace_id is not None:
        added.append((names.DL_TRACE_ID, letter.trace_id))
    if letter.span_id is not None:
        added.append((names.DL_SPAN_ID, letter.span_id))
    if letter.spans > 1 or letter.span_id is not None:
        added.append((names.DL_SPAN_COUNT, str(letter.spans)))
    if value_with is not None:
        added.append((names.DL_VALUE_WITH, value_with.value))
    ours = [(k, v.encode("utf-8", errors="replace")) for k, v in added]
    key = source.key
    headers = [*source.headers, *ours]
    share = max_request_size // _KEY_AND_HEADERS_SHARE
    if _size(key, b"", headers) > share and source.headers:
        headers = [*ours, (names.DL_HEADERS_DROPPED, str(len(source.headers)).encode())]
    if _size(key, b"", headers) > share and key is not None:
        headers.append((names.DL_KEY_DROPPED, str(len(key)).encode()))
        key = None
    value = b"" if value_with is not None else source.value
    if _size(key, value, headers) <= max_request_size:
        return LetterRecord(key, value, headers, truncated=False)
    headers.append((names.DL_TRUNCATED, str(len(value)).encode()))
    # The value's length is a varint: 5 bytes at most, counted once empty.
    room = max(0, max_request_size - _size(key, b"", headers) - 5)
    return LetterRecord(key, value[:room], headers, truncated=True)


def _size(key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> int:
    """What aiokafka counts against max_request_size for one record (its upper bound estimate)."""
    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
    return size


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


def spans_request(spans: Iterable[tuple[Span, str | None]]) -> bytes:
    """An export request (OTLP protobuf) holding the given spans, each with its resource's service name: the
    dead letter of spans set aside from an assembled trace, whose records hold other traces' spans too."""
    by_service: dict[str | None, ScopeSpans] = {}
    for span, service in spans:
        scope = by_service.get(service)
        if scope is None:
            scope = by_service[service] = ScopeSpans()
        scope.spans.append(span)
    request = ExportTraceServiceRequest()
    for service, scope in by_service.items():
        resource = Resource()
        if service is not None:
            resource.attributes.append(KeyValue(key=names.SERVICE_NAME, value=AnyValue(string_value=service)))
        request.resource_spans.append(ResourceSpans(resource=resource, scope_spans=[scope]))
    data: bytes = request.SerializeToString()
    return data
