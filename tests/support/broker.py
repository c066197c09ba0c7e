"""Kafka fixtures: one embedded Tansu broker per session; topics and groups unique per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from sidecar.embedded.broker import EmbeddedBroker, create_topics

__all__ = ["kafka_bootstrap", "kafka_broker", "new_topic", "unique_name"]

NewTopic = Callable[..., Awaitable[str]]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def kafka_broker() -> AsyncIterator[EmbeddedBroker]:
    async with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def kafka_bootstrap(kafka_broker: EmbeddedBroker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """Names no other test uses: reusing a group id right after a stop stalls Tansu for seconds."""

    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make


@pytest.fixture
def new_topic(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> NewTopic:
    """``await new_topic("spans", partitions=2)`` creates a fresh topic and returns its name."""

    async def make(prefix: str = "topic", *, partitions: int = 1) -> str:
        name = unique_name(prefix)
        await create_topics(kafka_bootstrap, {name: partitions})
        return name

    return make
