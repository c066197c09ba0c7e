"""The internal topic of conversations (``scope: session``, docs/sessions.md): turns in, and stage 2's markers and
tombstones, all on the partition of their conversation.

``SessionTurnPublisher`` is a :class:`~exporters.topic_publisher.TopicPublisher`: checkpointed like a sink, so a
trace's records are committed only once the broker acknowledged (``acks=all``) its turns: the topic is the turns'
checkpoint. Its partition is ``murmur2(conversation id) % partitions``, as any Kafka client would put a record
keyed by the conversation id: every turn of a conversation meets in one partition, hence one owner in stage
2. It reports as the exporter ``session_turns`` (``exporter_up``, its pending records, flush failures).
"""

from __future__ import annotations

from typing import Any, Final

from exporters.topic_publisher import DROP_REASONS, TopicPublisher, TopicRecord
from sidecar.core.observers import ServiceObserver

__all__ = ["DROP_REASONS", "NAME", "SessionTurnPublisher", "TopicRecord"]

NAME: Final = "session_turns"


class SessionTurnPublisher(TopicPublisher):
    """The conversations' internal topic's producer."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        producer_options: dict[str, Any] | None = None,
        *,
        linger_ms: int = 5,
        max_pending: int = 10_000,
        observer: ServiceObserver | None = None,
    ) -> None:
        super().__init__(
            NAME, bootstrap_servers, topic, producer_options,
            what="session topic", linger_ms=linger_ms, max_pending=max_pending, observer=observer,
        )  # fmt: skip

    async def publish(
        self, conversation_id: str, key: bytes, value: bytes | None, timestamp_ms: int | None = None
    ) -> None:
        """Queue a record for ``conversation_id``'s partition; waits only while ``max_pending`` are unconfirmed."""
        await self.put(TopicRecord(key, value, conversation_id.encode(), [], timestamp_ms))
