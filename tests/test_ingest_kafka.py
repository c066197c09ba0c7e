"""Records through a real Kafka-compatible broker: every compression codec, poison records dead-lettered,
the partition moving on."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from sidecar.core import names as n
from sidecar.ingest import DeadLetterCounter, DeadLetterReason, IngestConfig
from sidecar.ingest.kafka import IngestedRecord, TraceIngestor, open_trace_ingestor
from tests.support.otel import otlp_json, otlp_proto
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


async def _poll_until(ingestor: TraceIngestor, count: int, *, rounds: int = 100) -> list[IngestedRecord]:
    got: list[IngestedRecord] = []
    for _ in range(rounds):
        got.extend(await ingestor.poll(timeout_ms=200))
        if len(got) >= count:
            return got
    raise AssertionError(f"only {len(got)} of {count} records arrived")


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
async def test_compressed_batch_with_poison_records(kafka_bootstrap: str, new_topic: NewTopic, codec: str) -> None:
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

    counter = DeadLetterCounter()
    config = IngestConfig(topic=topic, dead_letter_topic=dlq)
    async with open_trace_ingestor(
        kafka_bootstrap, config, group_id=None, counter=counter, consumer_options=FAST_CONSUMER
    ) as ingestor:
        ingestor.consumer.assign([TopicPartition(topic, 0)])
        got = await _poll_until(ingestor, 4)

    assert [r.offset for r in got] == [0, 1, 2, 3]  # the partition moved past both bad records
    assert [[run.target.agent_name for run in r.runs] for r in got] == [["first"], [], [], ["last"]]
    assert got[0].key == trace_key and got[0].runs[0].target.trace_id == trace_key.decode()
    assert [[d.reason for d in r.dead_letters] for r in got] == [
        [],
        [DeadLetterReason.DECODE_ERROR],
        [DeadLetterReason.UNMAPPABLE],
        [],
    ]
    assert counter.counts()["decode_error"] == 1 and counter.count(DeadLetterReason.UNMAPPABLE) == 1
    assert counter.total == 2

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
    options = {**FAST_CONSUMER, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
    async with open_trace_ingestor(
        kafka_bootstrap, config, group_id=unique_name("group"), consumer_options=options
    ) as ingestor:
        (record,) = await _poll_until(ingestor, 1)

    (run,) = record.runs
    assert run.target.agent_name == "json-agent" and run.output[0].text == "json-agent answers"
    assert record.dead_letters == () and record.spans_seen == 3
