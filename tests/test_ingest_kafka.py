"""Records through a real Kafka-compatible broker and the service: every compression codec, poison records
dead-lettered with their origin, the partition moving on and committed."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from sidecar.core import names as n
from sidecar.ingest import IngestConfig
from tests.support.otel import otlp_json, otlp_proto
from tests.support.service import drain_through_service
from tests.support.traces import agent_trace, hex_ids, span_by_name

NewTopic = Callable[..., Awaitable[str]]
FAST_CONSUMER = {"fetch_max_wait_ms": 50}


def _agent(name: str, output: str = "") -> dict[str, str]:
    return {
        n.GEN_AI_OPERATION_NAME: "invoke_agent",
        n.GEN_AI_AGENT_NAME: name,
        n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"ask {name}"}]}]),
        n.GEN_AI_OUTPUT_MESSAGES: output
        or json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": f"{name} answers"}]}]),
    }


async def _read_all(bootstrap: str, topic: str, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **FAST_CONSUMER)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        records: list[ConsumerRecord[bytes, bytes]] = []
        for _ in range(100):
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
            if len(records) >= count:
                return records
        raise AssertionError(f"only {len(records)} of {count} dead letters")
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_compressed_batch_with_poison_records(
    kafka_bootstrap: str, new_topic: NewTopic, unique_name: Callable[[str], str], codec: str
) -> None:
    topic = await new_topic(f"spans-{codec}")
    dlq = await new_topic(f"dlq-{codec}")
    first = agent_trace(_agent("first"))
    last = agent_trace(_agent("last"))
    broken = agent_trace(_agent("broken", output="{not json"))
    trace_key = hex_ids(first[0])["trace_id"].encode()  # partition_traces_by_id keys
    records = [
        (trace_key, otlp_proto(first), []),
        (None, b"\x0a\xff\xff\xff garbage", [("origin", b"fuzzer")]),  # poison in the middle
        (None, otlp_proto(broken), []),  # decodes, but one span cannot be mapped
        (b"", otlp_proto(last), []),
    ]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, compression_type=codec, linger_ms=50)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k, headers=h, partition=0) for k, v, h in records]
        for fut in futures:
            await fut
    finally:
        await producer.stop()

    config = IngestConfig(topic=topic, dead_letter_topic=dlq)
    runs = await drain_through_service(kafka_bootstrap, config, unique_name("group"), expect_runs=2, expect_committed=4)

    # The partition moved past both bad records: every offset is committed, the good records scored.
    assert sorted(run.request.target.agent_name or "" for run in runs) == ["first", "last"]
    [first_run] = [run for run in runs if run.request.target.agent_name == "first"]
    assert first_run.request.target.trace_id == trace_key.decode()

    poison, unmappable = await _read_all(kafka_bootstrap, dlq, 2)
    assert poison.value == records[1][1] and unmappable.value == records[2][1]  # original bytes
    poison_headers = dict(poison.headers)
    assert poison_headers["origin"] == b"fuzzer"  # original headers kept
    assert poison_headers[n.DL_REASON] == b"decode_error" and poison_headers[n.DL_DETAIL]
    assert poison_headers[n.DL_SOURCE_TOPIC] == topic.encode()
    assert (poison_headers[n.DL_SOURCE_PARTITION], poison_headers[n.DL_SOURCE_OFFSET]) == (b"0", b"1")
    span_headers = dict(unmappable.headers)
    broken_span = hex_ids(span_by_name(broken, "invoke_agent travel-agent"))
    assert span_headers[n.DL_REASON] == b"unmappable" and span_headers[n.DL_SOURCE_OFFSET] == b"2"
    assert span_headers[n.DL_SPAN_ID] == broken_span["span_id"].encode()
    assert span_headers[n.DL_TRACE_ID] == broken_span["trace_id"].encode()


async def test_json_records_through_a_consumer_group(
    kafka_bootstrap: str, new_topic: NewTopic, unique_name: Callable[[str], str]
) -> None:
    topic = await new_topic("spans-json", partitions=2)
    spans = agent_trace(_agent("json-agent"))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, compression_type="zstd")
    await producer.start()
    try:
        await producer.send_and_wait(topic, otlp_json(spans), key=hex_ids(spans[0])["trace_id"].encode())
    finally:
        await producer.stop()

    config = IngestConfig(topic=topic, encoding="otlp_json", dead_letter_topic=await new_topic("dlq-json"))
    (run,) = await drain_through_service(
        kafka_bootstrap, config, unique_name("group"), expect_runs=1, expect_committed=1, partitions=2
    )

    request = run.request
    assert request.target.agent_name == "json-agent" and request.output[0].text == "json-agent answers"
