"""The transport of every Kafka producer on the delivery loop (score records, conversation turns).

What the delivery queue hands over goes out in batches built per partition with aiokafka's batch API (per
record, one append to a batch instead of ``send()``'s validation, metadata wait, future and callback;
docs/delivery.md has the figures), and each batch is settled by its delivery callback, so batches of several
partitions are in flight at once. A record names its partition key: the record's key for score records, the
conversation id for a conversation's turns (every turn of a conversation on one partition). The producer's
start and bounded stop live here too, the same for both.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from exporters.delivery import CONFIRMED, DeliveryQueue, Entry, Outcome, Settle, failed, rejected
from exporters.partitioner import KeyPartitioner
from sidecar.core.kafka_errors import PERMANENT_ERRORS

__all__ = ["KafkaRecord", "ProducerBatches", "delivery_outcome"]

log = logging.getLogger("exporters.kafka_batches")


class KafkaRecord(Protocol):
    """One record on its way: its key, value (``None``: a tombstone), headers, what picks its partition, and its
    timestamp (``None``: the producer's clock)."""

    @property
    def key(self) -> bytes: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> list[tuple[str, bytes]]: ...

    @property
    def partition_key(self) -> bytes: ...

    @property
    def timestamp_ms(self) -> int | None: ...


R = TypeVar("R", bound=KafkaRecord)


def delivery_outcome(error: BaseException | None) -> Outcome:
    """What a delivery's error (or its absence) means for its batch."""
    if error is None:
        return CONFIRMED
    detail = f"{type(error).__name__}: {error}"
    # A batch the broker refuses for good: the error is about the records as sent (the size, the topic).
    return rejected(detail, each=True) if isinstance(error, PERMANENT_ERRORS) else failed(detail)


class ProducerBatches(Generic[R]):
    """A delivery queue's transport onto one topic through ``producer`` (set once it has started)."""

    def __init__(self, topic: str, partitioner: KeyPartitioner, max_request_size: int) -> None:
        self.topic = topic
        self.producer: AIOKafkaProducer | None = None
        self._partitioner = partitioner
        self._max_request_size = max_request_size

    async def connect(self, bootstrap_servers: str, options: dict[str, Any]) -> bool:
        """Start the producer (raises if the brokers cannot be reached at all); ``False`` if one already runs."""
        if self.producer is not None:
            return False
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, **options)
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        self.producer = producer
        return True

    async def close(self, queue: DeliveryQueue[R], timeout_s: float, name: str) -> None:
        """Stop ``queue`` (this transport's) and then the producer, named ``name`` in its log lines. Batches
        handed over from now on fail as "the producer is closed"; what is still outstanding is abandoned
        (flush first). Nothing to do when no producer runs."""
        producer, self.producer = self.producer, None
        if producer is None:
            return
        await queue.close()
        await stop_producer(producer, timeout_s, name)

    async def send(self, batch: Sequence[Entry[R]], settle: Settle[R]) -> None:
        producer = self.producer
        if producer is None:
            settle(batch, failed("the producer is closed"))
            return
        try:
            partitions = sorted(await producer.partitions_for(self.topic))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # metadata unavailable: kept for the next flush, like a failed send
            settle(
                batch,
                delivery_outcome(error) if isinstance(error, PERMANENT_ERRORS) else failed(str(error) or repr(error)),
            )
            return
        by_partition: dict[int, list[Entry[R]]] = {}
        for entry in batch:
            record = entry.value
            size = DefaultRecordBatchBuilder.estimate_size_in_bytes(record.key, record.value, record.headers)
            if size > self._max_request_size:
                too_large = MessageSizeTooLargeError(f"the record is {size} bytes when serialized")
                settle([entry], delivery_outcome(too_large))
                continue
            partition = self._partitioner(record.partition_key, partitions, partitions)
            by_partition.setdefault(partition, []).append(entry)
        for partition, entries in by_partition.items():
            await self._send_partition(producer, partition, entries, settle)

    async def _send_partition(
        self, producer: AIOKafkaProducer, partition: int, entries: list[Entry[R]], settle: Settle[R]
    ) -> None:
        batch: list[Entry[R]] = []
        builder = producer.create_batch()
        for entry in entries:
            record = entry.value
            stamp = record.timestamp_ms
            if builder.append(key=record.key, value=record.value, timestamp=stamp, headers=record.headers) is None:
                await self._send_batch(producer, builder, partition, batch, settle)
                batch, builder = [], producer.create_batch()
                # An empty batch takes any record up to max_request_size (checked above).
                builder.append(key=record.key, value=record.value, timestamp=stamp, headers=record.headers)
            batch.append(entry)
        if batch:
            await self._send_batch(producer, builder, partition, batch, settle)

    async def _send_batch(
        self, producer: AIOKafkaProducer, builder: Any, partition: int, batch: list[Entry[R]], settle: Settle[R]
    ) -> None:
        try:
            # Returns once the batch is queued; waits while this partition's previous batch is not sent yet.
            delivery = await producer.send_batch(builder, self.topic, partition=partition)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the producer is closed, or no room before request_timeout_ms
            settle(batch, delivery_outcome(error))
            return
        delivery.add_done_callback(functools.partial(_delivered, batch, settle))


def _delivered(batch: list[Entry[Any]], settle: Settle[Any], delivery: asyncio.Future[Any]) -> None:
    if delivery.cancelled():  # the producer was stopped: close() counts what it abandons
        return
    settle(batch, delivery_outcome(delivery.exception()))


async def stop_producer(producer: AIOKafkaProducer, timeout_s: float, name: str) -> None:
    """Stop ``producer``, waiting ``timeout_s`` at most.

    aiokafka's stop() waits until every batch is delivered or expires (request_timeout_ms), and cancelling it
    would leave its sender and connections running: past the timeout it finishes on its own, held here so that
    the task is not collected."""
    stopping = asyncio.ensure_future(producer.stop())
    stopping.add_done_callback(functools.partial(_stopped, name))
    await asyncio.wait({stopping}, timeout=timeout_s)
    if not stopping.done():
        _STOPPING.add(stopping)
        log.warning("%s still stopping after %.1fs; it finishes in the background", name, timeout_s)


_STOPPING: set[asyncio.Future[None]] = set()


def _stopped(name: str, stopping: asyncio.Future[None]) -> None:
    _STOPPING.discard(stopping)
    if not stopping.cancelled() and stopping.exception() is not None:
        log.warning("%s stopped with %r", name, stopping.exception())
