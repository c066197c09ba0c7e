"""A publisher of keyed records to one Kafka topic, checkpointed like a sink: the internal topics' producer
(the conversations' turns, the feedback join's state) and the feedback pairs'.

It takes records (``put``), not ``ScoredRun``\\ s: the runtime hands it what it writes, and the checkpoint flushes it
with the sinks before it commits source offsets, so a source offset is committed only once the broker acknowledged
(``acks=all``) what was written for it. A record names what picks its partition (``partition_key``): by default
``murmur2(partition_key) % partitions``, as any Kafka client would put a record with that key; a publisher may be
given another partitioner (:class:`PartitionNumber`: the partition written out, for a state topic whose partition
``p`` keeps the state of an input's partition ``p``). It reports as an exporter under its name (``exporter_up``, its
pending records, flush failures).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from exporters.delivery import DeliveryQueue, DeliveryRules, Wording
from exporters.kafka_batches import ProducerBatches
from exporters.partitioner import KeyPartitioner
from sidecar.core.observers import ServiceObserver

__all__ = ["DROP_REASONS", "PartitionNumber", "TopicPublisher", "TopicRecord"]

log = logging.getLogger(__name__)

DROP_REASONS: Final = ("rejected",)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A record (``value`` ``None``: a tombstone) and what places it."""

    key: bytes
    value: bytes | None
    partition_key: bytes
    headers: list[tuple[str, bytes]]  # a list for aiokafka's record builder
    timestamp_ms: int | None = None  # None: the producer's clock


class PartitionNumber(KeyPartitioner):
    """The partition a record's ``partition_key`` writes out (``b"3"``), for a topic that mirrors another's
    partitions; a number past the topic's partitions wraps (the start-up check makes sure it has enough)."""

    def __call__(self, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        number = int(key or b"0")
        return all_partitions[number % len(all_partitions)]


class TopicPublisher:
    """A ``Flushable`` producing to ``topic``, on the delivery loop shared with every sink."""

    def __init__(
        self,
        name: str,
        bootstrap_servers: str,
        topic: str,
        producer_options: dict[str, Any] | None = None,
        *,
        what: str,
        partitioner: KeyPartitioner | None = None,
        linger_ms: int = 5,
        max_pending: int = 10_000,
        observer: ServiceObserver | None = None,
    ) -> None:
        self.name = name
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self._what = what
        self._options: dict[str, Any] = {
            "acks": "all",
            "linger_ms": linger_ms,
            "max_batch_size": 512 * 1024,
            "partitioner": partitioner or KeyPartitioner(),
            **(producer_options or {}),
        }
        self._batches: ProducerBatches[TopicRecord] = ProducerBatches(
            topic, self._options["partitioner"], self._options.get("max_request_size", 1024 * 1024)
        )
        self._queue: DeliveryQueue[TopicRecord] = DeliveryQueue(
            name,
            self._batches,
            DeliveryRules(batch_size=max_pending, max_pending=max_pending, retry_between_flushes=False),
            wording=Wording(f"{what} records", "delivered"),
            describe=self._describe,
            log=log,
            observer=observer,
        )

    def _describe(self, record: TopicRecord) -> str:
        kind = "tombstone" if record.value is None else f"record ({len(record.value)} bytes)"
        return f"{self._what} {kind} {record.key.decode(errors='replace')[:200]}"

    @property
    def outstanding(self) -> int:
        return self._queue.outstanding

    @property
    def sent(self) -> int:
        return self._queue.confirmed

    async def start(self) -> None:
        if await self._batches.connect(self.bootstrap_servers, self._options):
            self._queue.start()

    async def put(self, record: TopicRecord) -> None:
        """Queue ``record``; waits only while ``max_pending`` records are unconfirmed."""
        await self._queue.put(record)

    async def write(self, key: bytes, value: bytes | None, partition_key: bytes) -> None:
        """Queue a record with no headers, stamped by the producer's clock."""
        await self.put(TopicRecord(key, value, partition_key, []))

    async def flush(self, timeout_s: float) -> bool:
        return await self._queue.flush(timeout_s)

    async def close(self, timeout_s: float = 5.0) -> None:
        await self._batches.close(self._queue, timeout_s, f"{self._what} producer")
