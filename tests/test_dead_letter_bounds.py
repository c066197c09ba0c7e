"""Dead letters bounded (docs/limits.md): one per record and reason, the record's bytes carried once, each letter
cut to what the producer may send, a letter the broker refuses counted and its record let go."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.core import ScoredRun
from sidecar.core import names as n
from sidecar.core.observers import LimitName, ServiceObserver
from sidecar.ingest import DeadLetter, DeadLetterReason, IngestConfig, RecordOrigin, letter_record, one_per_reason
from sidecar.ingest.kafka import DeadLetterPublisher
from tests.support.otel import otlp_proto
from tests.support.service import drain_through_service
from tests.support.traces import agent_trace

NewTopic = Callable[..., Awaitable[str]]
FAST_CONSUMER = {"fetch_max_wait_ms": 50}


class Recorder(ServiceObserver):
    def __init__(self) -> None:
        self.refused: list[str] = []
        self.limits: list[LimitName] = []

    def dead_letter_refused(self, reason: str, n: int = 1) -> None:
        self.refused.extend([reason] * n)

    def limit_hit(self, limit: LimitName, n: int = 1) -> None:
        self.limits.extend([limit] * n)


def _agent(name: str, output: str = "") -> dict[str, str]:
    return {
        n.GEN_AI_OPERATION_NAME: "invoke_agent",
        n.GEN_AI_AGENT_NAME: name,
        n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        n.GEN_AI_OUTPUT_MESSAGES: output
        or json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": f"{name} answers"}]}]),
    }


def _record_with_bad_spans(malformed: int, unmappable: int) -> bytes:
    """One export: ``malformed`` agent spans with 3-byte span ids, ``unmappable`` whose messages do not parse."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(otlp_proto(agent_trace(_agent("good"))))
    spans = request.resource_spans[0].scope_spans[0].spans
    agent = next(s for s in spans if s.name.startswith("invoke_agent"))
    for i in range(malformed):
        bad = spans.add()
        bad.CopyFrom(agent)
        bad.span_id = i.to_bytes(3, "big")
    broken = ExportTraceServiceRequest()
    broken.ParseFromString(otlp_proto(agent_trace(_agent("broken", output="{not json"))))
    broken_agent = next(s for s in broken.resource_spans[0].scope_spans[0].spans if s.name.startswith("invoke_agent"))
    for i in range(unmappable):
        copy = spans.add()
        copy.CopyFrom(broken_agent)
        copy.span_id = (1000 + i).to_bytes(8, "big")
    return request.SerializeToString()


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        for value, headers in records:
            await (await producer.send(topic, value=value, headers=headers, partition=0))
    finally:
        await producer.stop()


async def _read(bootstrap: str, topic: str, at_least: int) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **FAST_CONSUMER)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        records: list[Any] = []
        for _ in range(15):
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
            if len(records) >= at_least:
                # Anything more than expected shows up in one more poll.
                for batch in (await consumer.getmany(timeout_ms=300)).values():
                    records.extend(batch)
                break
        return records
    finally:
        await consumer.stop()


async def _through_the_service(
    bootstrap: str, topic: str, dlq: str, observer: ServiceObserver, group: str, runs: int
) -> list[ScoredRun]:
    """The one record of ``topic`` through the service (its dead letters delivered to ``dlq``), until committed:
    the runs it made."""
    config = IngestConfig(topic=topic, dead_letter_topic=dlq)
    return await drain_through_service(
        bootstrap, config, group, expect_runs=runs, expect_committed=1, observer=observer
    )


def _weight(record: Any) -> int:
    return len(record.value or b"") + len(record.key or b"") + sum(len(k) + len(v) for k, v in record.headers)


async def test_many_bad_spans_of_a_record_make_one_letter_per_reason_carrying_the_record_once(
    kafka_bootstrap: str, new_topic: NewTopic, unique_name: Callable[[str], str]
) -> None:
    topic, dlq = await new_topic("spans"), await new_topic("dlq")
    value = _record_with_bad_spans(malformed=40, unmappable=3)
    await _produce(kafka_bootstrap, topic, [(value, [("origin", b"test")])])
    runs = await _through_the_service(kafka_bootstrap, topic, dlq, ServiceObserver(), unique_name("group"), 1)
    assert [run.request.target.agent_name for run in runs] == ["good"]  # the record's good span is still scored
    letters = await _read(kafka_bootstrap, dlq, 2)
    assert [dict(x.headers)[n.DL_REASON] for x in letters] == [b"invalid_span", b"unmappable"]
    first, second = (dict(x.headers) for x in letters)
    assert (first[n.DL_SPAN_COUNT], second[n.DL_SPAN_COUNT]) == (b"40", b"3")
    assert letters[0].value == value and first["origin"] == b"test"
    assert letters[1].value == b"" and second[n.DL_VALUE_WITH] == b"invalid_span"  # the bytes travel once
    assert sum(_weight(x) for x in letters) <= 2 * len(value)


async def test_a_letter_the_producer_refuses_is_counted_and_publish_returns(
    kafka_bootstrap: str, new_topic: NewTopic
) -> None:
    """A letter refused for good (here by the producer: its max_request_size is smaller than the publisher was
    told; a broker's max.message.bytes refuses the same way) is logged and counted as refused, and ``publish``
    returns instead of raising: the record's handler goes on, and the record is committed without its letter."""
    dlq = await new_topic("dlq")
    recorder = Recorder()
    publisher = DeadLetterPublisher(
        kafka_bootstrap,
        dlq,
        encoding="otlp_proto",
        producer_options={"max_request_size": 100_000},
        max_request_size=300_000,
        observer=recorder,
    )
    await publisher.start()
    try:
        source = RecordOrigin("spans", 0, 5, b"\x00" + b"g" * 200_000)
        delivered = await publisher.publish(source, [DeadLetter(DeadLetterReason.DECODE_ERROR, "not OTLP")])
        small = RecordOrigin("spans", 0, 6, b"\x00" + b"g" * 1000)
        after = await publisher.publish(small, [DeadLetter(DeadLetterReason.DECODE_ERROR, "not OTLP")])
    finally:
        await publisher.stop()
    assert delivered == () and recorder.refused == ["decode_error"]
    assert [letter.reason for letter in after] == [DeadLetterReason.DECODE_ERROR]  # the publisher works on
    assert publisher.counter.total == 1
    [letter] = await _read(kafka_bootstrap, dlq, 1)
    assert dict(letter.headers)[n.DL_SOURCE_OFFSET] == b"6"


async def test_a_record_just_under_the_bound_with_heavy_headers_gets_a_letter_that_fits(
    kafka_bootstrap: str, new_topic: NewTopic, unique_name: Callable[[str], str]
) -> None:
    topic, dlq = await new_topic("spans"), await new_topic("dlq")
    value = b"\x00" + b"x" * (1024 * 1024 - 100)
    headers = [(f"h{i}", b"v" * 1000) for i in range(20)]
    await _produce(kafka_bootstrap, topic, [(value, headers)])
    recorder = Recorder()
    await _through_the_service(kafka_bootstrap, topic, dlq, recorder, unique_name("group"), 0)
    [letter] = await _read(kafka_bootstrap, dlq, 1)
    letter_headers = dict(letter.headers)
    assert letter_headers[n.DL_REASON] == b"decode_error"
    assert letter_headers[n.DL_TRUNCATED] == str(len(value)).encode() and value.startswith(letter.value)
    assert len(letter.value) > len(value) - 30_000  # cut by the headers' weight, not more
    assert letter_headers["h0"] == b"v" * 1000  # the record's own headers kept: they fit
    assert recorder.limits == ["dead_letter_bytes"]


ORIGIN_HEADERS = st.lists(
    st.tuples(st.text(max_size=20), st.binary(max_size=5000)),
    max_size=60,
).map(tuple)


@settings(max_examples=200, deadline=None)
@given(
    value=st.integers(min_value=0, max_value=300_000),
    key=st.none() | st.binary(max_size=100_000),
    headers=ORIGIN_HEADERS,
    detail=st.text(max_size=3000),
    limit=st.integers(min_value=64 * 1024, max_value=400_000),
    carried=st.booleans(),
)
def test_a_letter_always_fits_the_request_and_keeps_the_first_bytes(
    value: int,
    key: bytes | None,
    headers: tuple[tuple[str, bytes], ...],
    detail: str,
    limit: int,
    carried: bool,
) -> None:
    data = bytes(range(256)) * (value // 256) + b"z" * (value % 256)
    source = RecordOrigin("spans", 3, 17, data, key=key, headers=headers)
    letter = DeadLetter(DeadLetterReason.INVALID_SPAN, detail, trace_id="ab" * 16, span_id="cd" * 8, spans=12)
    record = letter_record(
        letter, source, "otlp_proto", max_request_size=limit, value_with=None if carried else DeadLetterReason.TOO_LARGE
    )
    assert DefaultRecordBatchBuilder.estimate_size_in_bytes(record.key, record.value, record.headers) <= limit
    got = dict(record.headers)
    assert got[n.DL_REASON] == b"invalid_span" and got[n.DL_SOURCE_OFFSET] == b"17"
    assert got[n.DL_SPAN_COUNT] == b"12"
    if not carried:
        assert record.value == b"" and got[n.DL_VALUE_WITH] == b"too_large"
    elif record.truncated:
        assert got[n.DL_TRUNCATED] == str(len(data)).encode() and data.startswith(record.value)
    else:
        assert record.value == data and n.DL_TRUNCATED not in got


def test_one_letter_per_reason_counts_every_span_and_names_the_first() -> None:
    letters = [DeadLetter(DeadLetterReason.INVALID_SPAN, "ids", trace_id="t1", span_id=f"s{i}") for i in range(5)] + [
        DeadLetter(DeadLetterReason.TOO_LARGE, "big", trace_id="t2", span_id="x")
    ]
    merged = one_per_reason(letters)
    assert [(m.reason, m.span_id, m.spans) for m in merged] == [
        (DeadLetterReason.INVALID_SPAN, "s0", 5),
        (DeadLetterReason.TOO_LARGE, "x", 1),
    ]
