"""The two helpers every command that reads a topic on its own shares (backfill's plan, preview, the demo's
count, the conversations' start-up check), against the real broker: a consumer that is assigned partitions and
joins no group, started with one line when the broker is not there (sidecar.runtime.clients
.start_assigned_consumer); and the partitions of topics (sidecar.runtime.sources.topic_partitions)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from sidecar.runtime.clients import start_assigned_consumer
from sidecar.runtime.sources import topic_partitions
from sidecar.runtime.startup import EXIT_UNREACHABLE, StartupFailure
from tests.support.sidecar_process import free_port

NewTopic = Callable[..., Awaitable[str]]


async def test_an_assigned_consumer_reads_without_joining_a_group_or_committing(
    kafka_bootstrap: str, new_topic: NewTopic, unique_name: Callable[[str], str]
) -> None:
    topic = await new_topic("assigned", partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"one", partition=1)
    finally:
        await producer.stop()
    group = unique_name("group")
    options = {"client_id": "sidecar-test-assigned", "fetch_max_wait_ms": 50, "enable_auto_commit": True}
    consumer = await start_assigned_consumer(kafka_bootstrap, options, timeout_s=30, purpose="a test", group_id=group)
    try:
        tp = TopicPartition(topic, 1)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        batches = await consumer.getmany(tp, timeout_ms=5000)
        assert [r.value for r in batches[tp]] == [b"one"]
    finally:
        await consumer.stop()  # auto-commit would commit here
    again = await start_assigned_consumer(kafka_bootstrap, {}, timeout_s=30, purpose="a test", group_id=group)
    try:
        assert await again.committed(tp) is None  # auto-commit stays off whatever the options say
    finally:
        await again.stop()


async def test_a_broker_that_is_not_there_ends_in_one_line_naming_what_wanted_it() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(StartupFailure) as failure:
        await start_assigned_consumer(bootstrap, {}, timeout_s=30, purpose="the backfill")
    assert time.monotonic() - started < 30  # a refused connection fails at once, not at the timeout
    assert failure.value.exit_code == EXIT_UNREACHABLE
    line = str(failure.value)
    assert "\n" not in line
    assert line.startswith(f"the Kafka broker at {bootstrap} is not reachable for the backfill (")
    assert line.endswith("check kafka.bootstrap_servers and that the broker is up and reachable from here")


async def test_a_start_that_does_not_finish_in_time_ends_in_one_line(kafka_bootstrap: str) -> None:
    with pytest.raises(StartupFailure) as failure:
        await start_assigned_consumer(kafka_bootstrap, {}, timeout_s=1e-6, purpose="preview")
    assert failure.value.exit_code == EXIT_UNREACHABLE
    assert f"the Kafka broker at {kafka_bootstrap} is not reachable for preview (no answer within 1e-06 s)" in str(
        failure.value
    )


async def test_the_partitions_of_topics_in_order_and_none_for_a_topic_that_does_not_exist(
    kafka_bootstrap: str, new_topic: NewTopic, unique_name: Callable[[str], str]
) -> None:
    three, one = await new_topic("three", partitions=3), await new_topic("one", partitions=1)
    consumer = await start_assigned_consumer(kafka_bootstrap, {}, timeout_s=30, purpose="a test")
    try:
        missing = unique_name("missing")
        assert topic_partitions(consumer, [one, missing, three]) == [
            TopicPartition(one, 0),
            TopicPartition(three, 0),
            TopicPartition(three, 1),
            TopicPartition(three, 2),
        ]
        assert topic_partitions(consumer, [missing]) == []
        assert missing not in await consumer.topics()  # asking for it did not create it
    finally:
        await consumer.stop()
