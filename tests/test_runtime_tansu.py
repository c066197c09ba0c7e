"""The one module of Tansu workarounds (sidecar.runtime.tansu), against the real broker: a partition's end read
from a fetch's high watermark even when its last batch holds several records (which Tansu's end_offsets() falls
short of), the time index's "none" in either broker's words, a topic's configuration asked for whole; and the
demo's count of score records, which rests on that end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndTimestamp
from hypothesis import given
from hypothesis import strategies as st

from sidecar.demo.command import records_on
from sidecar.embedded.broker import create_topics
from sidecar.runtime.tansu import log_end, read_log_ends, time_index_answer, topic_config

NewTopic = Callable[..., Awaitable[str]]


async def _produce_batches(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records on partition ``p``, sent together so that each partition's records share a batch."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, f"record {i}".encode(), partition=partition)
            for partition, count in counts.items()
            for i in range(count)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@pytest.fixture
async def consumer(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaConsumer]:
    started = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, fetch_max_wait_ms=50)
    await started.start()
    yield started
    await started.stop()


@given(st.integers(min_value=0, max_value=10**12), st.none() | st.integers(min_value=0, max_value=10**12))
def test_the_end_is_the_larger_of_the_end_offset_and_the_high_watermark(end_offset: int, highwater: int | None) -> None:
    end = log_end(end_offset, highwater)
    if highwater is None:
        assert end is None  # no fetch answered yet: the end is not known
    else:
        assert end == max(end_offset, highwater)


async def test_the_end_of_a_partition_whose_last_batch_holds_several_records(
    kafka_bootstrap: str, new_topic: NewTopic, consumer: AIOKafkaConsumer
) -> None:
    topic = await new_topic("ends", partitions=3)
    await _produce_batches(kafka_bootstrap, topic, {0: 7, 1: 1})  # partition 2 stays empty
    partitions = [TopicPartition(topic, p) for p in range(3)]
    hints = await consumer.end_offsets(partitions)
    assert hints[partitions[0]] <= 7  # Tansu: the last batch's first offset + 1 (Kafka: 7)
    assert await read_log_ends(consumer, partitions) == {partitions[0]: 7, partitions[1]: 1, partitions[2]: 0}
    # the first offsets, when the caller has them, are not asked again
    assert await read_log_ends(consumer, partitions, dict.fromkeys(partitions, 0)) == {
        partitions[0]: 7,
        partitions[1]: 1,
        partitions[2]: 0,
    }
    assert await read_log_ends(consumer, []) == {}


async def test_a_fetch_that_does_not_answer_in_time_keeps_the_end_offset_with_one_warning(
    kafka_bootstrap: str, new_topic: NewTopic, consumer: AIOKafkaConsumer, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await new_topic("late", partitions=1)
    await _produce_batches(kafka_bootstrap, topic, {0: 4})
    tp = TopicPartition(topic, 0)
    hints = await consumer.end_offsets([tp])
    with caplog.at_level(logging.WARNING, logger="sidecar.runtime.tansu"):
        assert await read_log_ends(consumer, [tp], timeout_s=0) == hints
    [line] = [r.getMessage() for r in caplog.records]
    assert f"the end of partitions {topic}-0 could not be read from a fetch within 0 s" in line


def test_the_time_index_says_none_in_either_brokers_words() -> None:
    assert time_index_answer(None) is None  # Kafka: no offset
    assert time_index_answer(OffsetAndTimestamp(0, -1)) is None  # Tansu: offset 0, timestamp -1
    found = OffsetAndTimestamp(12, 1_700_000_000_000)
    assert time_index_answer(found) is found
    assert time_index_answer(OffsetAndTimestamp(0, 0)) is not None  # a record written at time 0 is one


async def test_a_topic_setting_is_read_from_all_of_the_topic_s_configuration(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("compacted")
    await create_topics(kafka_bootstrap, {topic: 1}, configs={topic: {"cleanup.policy": "compact,delete"}})
    options = {"bootstrap_servers": kafka_bootstrap}
    assert await topic_config(options, topic, "cleanup.policy") == "compact,delete"
    assert await topic_config(options, topic, "no.such.key") is None
    assert await topic_config({"bootstrap_servers": "127.0.0.1:1", "request_timeout_ms": 1000}, topic, "x") is None


async def test_the_demo_counts_every_score_record_of_multi_record_batches(
    kafka_bootstrap: str, new_topic: NewTopic
) -> None:
    topic = await new_topic("agent_scores", partitions=3)
    # as demo --serve does: its consumer starts once the topics exist (it knows the partitions from its start)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        assert await records_on(consumer, topic) == 0
        await _produce_batches(kafka_bootstrap, topic, {0: 5, 1: 9, 2: 2})
        assert await records_on(consumer, topic) == 16  # end_offsets() alone: 3 on Tansu
        await _produce_batches(kafka_bootstrap, topic, {1: 3})
        assert await records_on(consumer, topic) == 19
    finally:
        await consumer.stop()
