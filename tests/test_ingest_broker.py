"""The embedded broker launcher: starts Tansu on a free loopback port, creates topics, stops cleanly."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer

from sidecar.embedded import BrokerStartError, EmbeddedBroker, create_topics
from sidecar.embedded.broker import ENV_BINARY


def test_sync_start_and_stop() -> None:
    with EmbeddedBroker() as broker:
        assert broker.running and broker.port > 0
        assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
    assert not broker.running


async def test_session_broker_creates_topics_with_partitions(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("explicit")
    await create_topics(kafka_bootstrap, {name: 3})
    await create_topics(kafka_bootstrap, [name])  # existing topics are kept, not an error

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        assert await consumer.topics() >= {name}
        assert consumer.partitions_for_topic(name) == {0, 1, 2}
    finally:
        await consumer.stop()


def test_binary_override_must_be_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BINARY, "/nonexistent/tansu")
    with pytest.raises(BrokerStartError, match=ENV_BINARY):
        EmbeddedBroker().start()


def test_binary_that_exits_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BINARY, "/bin/false")
    with pytest.raises(BrokerStartError, match="exited"):
        EmbeddedBroker(startup_timeout_s=5).start()
