"""The internal topic of conversations (``scope: session``, docs/sessions.md): turns in, and stage 2's markers and
tombstones, all on the partition of their conversation.

``SessionTurnPublisher`` is checkpointed like a sink but takes no ``ScoredRun``: the runtime hands it records
(``publish``) and the checkpoint flushes it with the sinks before it commits source offsets, so a trace's
records are committed only once the broker acknowledged (``acks=all``) its turns: the topic is the turns'
checkpoint. Its partition is ``murmur2(conversation id) % partitions``, as any Kafka client would put a record
keyed by the conversation id: every turn of a conversation meets in one partition, hence one owner in stage
2. It reports as the exporter ``session_turns`` (``exporter_up``, its pending records, flush failures).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from exporters.delivery import DeliveryQueue, DeliveryRules, Wording
from exporters.kafka_batches import ProducerBatches
from exporters.partitioner import KeyPartitioner
from sidecar.core.observers import ServiceObserver

__all__ = ["DROP_REASONS", "NAME", "SessionTurnPublisher", "TopicRecord"]

log = logging.getLogger(__name__)

NAME: Final = "session_turns"
DROP_REASONS: Final = ("rejected",)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A turn, a window's marker, or a tombstone (``value`` ``None``), on its conversation's partition."""

    key: bytes
    value: bytes | None
    partition_key: bytes  # the conversation id
    headers: list[tuple[str, bytes]]  # empty; a list for aiokafka's record builder
    timestamp_ms: int | None = None  # a turn's: its agent span's end (stage 2 closes windows on event time)


def _describe(record: TopicRecord) -> str:
    what = "tombstone" if record.value is None else f"record ({len(record.value)} bytes)"
    return f"session topic {what} {record.key.decode(errors='replace')[:200]}"


class SessionTurnPublisher:
    """A ``Flushable`` producing to the internal topic, on the delivery loop shared with every sink."""

    name = NAME

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
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self._options: dict[str, Any] = {
            "acks": "all",
            "linger_ms": linger_ms,
            "max_batch_size": 512 * 1024,
            "partitioner": KeyPartitioner(),
            **(producer_options or {}),
        }
        self._batches: ProducerBatches[TopicRecord] = ProducerBatches(
            topic, self._options["partitioner"], self._options.get("max_request_size", 1024 * 1024)
        )
        self._queue: DeliveryQueue[TopicRecord] = DeliveryQueue(
            NAME,
            self._batches,
            DeliveryRules(batch_size=max_pending, max_pending=max_pending, retry_between_flushes=False),
            wording=Wording("session topic records", "delivered"),
            describe=_describe,
            log=log,
            observer=observer,
        )

    @property
    def outstanding(self) -> int:
        return self._queue.outstanding

    @property
    def sent(self) -> int:
        return self._queue.confirmed

    async def start(self) -> None:
        if await self._batches.connect(self.bootstrap_servers, self._options):
            self._queue.start()

    async def publish(
        self, conversation_id: str, key: bytes, value: bytes | None, timestamp_ms: int | None = None
    ) -> None:
        """Queue a record for ``conversation_id``'s partition; waits only while ``max_pending`` are unconfirmed."""
        await self._queue.put(TopicRecord(key, value, conversation_id.encode(), [], timestamp_ms))

    async def flush(self, timeout_s: float) -> bool:
        return await self._queue.flush(timeout_s)

    async def close(self, timeout_s: float = 5.0) -> None:
        await self._batches.close(self._queue, timeout_s, "session topic producer")
