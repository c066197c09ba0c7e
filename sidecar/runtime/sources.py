"""Where intake's records come from: which partitions a consumer reads, from where, and whether it ends.

- :class:`GroupSubscription` (``run``): the consumer group shares the topics' partitions among its members
  and moves them on rebalances; it never ends.
- :class:`AssignedPartitions` (a past window for a backfill, a compacted topic read from the beginning): the
  partitions are assigned, not shared, each from a start offset (or from what this source's group committed
  before, so a crash resumes) and, when bounded, up to an end offset: once every partition reached its end
  the source is exhausted and the service drains, commits and stops.
- :class:`RestoringSubscription` (the conversations' internal topic): shared by a group like a subscription, but
  every partition assigned is read from its first retained record, and who reads it learns where its restore
  ends: the topic is the state of its reader, which commits nothing.

Commits work the same for all: the checkpoint commits what is done on the partitions intake owns, under the
consumer's group id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalOperation

__all__ = [
    "AssignedPartitions",
    "GroupSubscription",
    "PartitionRange",
    "RecordSource",
    "RestoringSubscription",
    "from_beginning",
    "read_ranges",
    "topic_partitions",
]

log = logging.getLogger(__name__)


class RecordSource(Protocol):
    """What intake reads. ``attach`` starts reading (subscribing, or assigning and seeking, then telling
    ``listener`` what was assigned); a bounded source says per record whether it is still inside its range."""

    bounded: bool

    def describe(self) -> str:
        """For log lines: ``topics otlp_spans`` or ``otlp_spans-0 [120, 480), ...``."""
        ...

    async def attach(self, consumer: AIOKafkaConsumer, listener: ConsumerRebalanceListener) -> None: ...

    def admits(self, tp: TopicPartition, offset: int) -> bool:
        """False for a record past the range (the partition is finished: intake pauses it)."""
        ...

    def finished(self, tp: TopicPartition, next_offset: int) -> bool:
        """Whether ``tp`` has nothing left in range once ``next_offset`` is the next record to read."""
        ...

    def end_of(self, tp: TopicPartition) -> int | None:
        """Where ``tp``'s range ends (exclusive), or None when it is read on as records arrive: consumer lag is
        counted up to it."""
        ...

    @property
    def exhausted(self) -> bool:
        """Every partition reached its end: nothing more will come."""
        ...


class GroupSubscription:
    """The topics, shared among the members of the consumer's group (``run``)."""

    bounded = False
    exhausted = False

    def __init__(self, topics: Sequence[str]) -> None:
        self.topics = tuple(topics)

    def describe(self) -> str:
        return f"topics {','.join(self.topics)}"

    async def attach(self, consumer: AIOKafkaConsumer, listener: ConsumerRebalanceListener) -> None:
        consumer.subscribe(list(self.topics), listener=listener)

    def admits(self, tp: TopicPartition, offset: int) -> bool:
        return True

    def finished(self, tp: TopicPartition, next_offset: int) -> bool:
        return False

    def end_of(self, tp: TopicPartition) -> int | None:
        return None


# Told each assignment's partitions with their (first retained, end) offsets; answers where to read each from.
Restore = Callable[[Mapping[TopicPartition, tuple[int, int]]], Mapping[TopicPartition, int]]


class RestoringSubscription(GroupSubscription):
    """The topics, shared among the group's members, each partition read from its beginning when it is assigned:
    ``on_assigned`` hears the partitions of each assignment with their first retained and end offsets, before
    intake owns them, and answers where to read each (its beginning, or where its reader stopped, when a
    rebalance gave back a partition whose state it kept)."""

    def __init__(self, topics: Sequence[str], on_assigned: Restore) -> None:
        super().__init__(topics)
        self._on_assigned = on_assigned

    def describe(self) -> str:
        return f"topics {','.join(self.topics)} (each partition from its beginning)"

    async def attach(self, consumer: AIOKafkaConsumer, listener: ConsumerRebalanceListener) -> None:
        consumer.subscribe(list(self.topics), listener=_FromBeginning(consumer, listener, self._on_assigned))


class _FromBeginning(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: AIOKafkaConsumer, listener: ConsumerRebalanceListener, on_assigned: Restore) -> None:
        self._consumer = consumer
        self._listener = listener
        self._on_assigned = on_assigned

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._listener.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        partitions = list(assigned)
        starts = await self._consumer.beginning_offsets(partitions) if partitions else {}
        ends = await self._consumer.end_offsets(partitions) if partitions else {}
        positions = self._on_assigned({tp: (starts[tp], ends[tp]) for tp in partitions})
        for tp in partitions:
            self._consumer.seek(tp, positions.get(tp, starts[tp]))
        await self._listener.on_partitions_assigned(assigned)


@dataclass(frozen=True, slots=True)
class PartitionRange:
    start: int
    end: int | None = None  # exclusive; None: unbounded (read on as records arrive)


Resolver = Callable[[AIOKafkaConsumer], Awaitable[Mapping[TopicPartition, PartitionRange]]]


class AssignedPartitions:
    """Partitions this consumer reads alone, each over a range found when it attaches (``resolve``: from the
    broker's time index for a window, from the beginning for a compacted topic). A partition resumes where the
    consumer's group committed, when that is past its start."""

    def __init__(self, resolve: Resolver, *, description: str) -> None:
        self._resolve = resolve
        self._description = description
        self.ranges: dict[TopicPartition, PartitionRange] = {}
        self.resumed: dict[TopicPartition, int] = {}  # partitions that started from an earlier commit
        self._left: set[TopicPartition] = set()
        self.bounded = True

    def describe(self) -> str:
        return self._description

    async def attach(self, consumer: AIOKafkaConsumer, listener: ConsumerRebalanceListener) -> None:
        self.ranges = dict(await self._resolve(consumer))
        self.bounded = any(r.end is not None for r in self.ranges.values())
        partitions = list(self.ranges)
        consumer.assign(partitions)
        self._left = set(partitions)
        for tp, span in self.ranges.items():
            position = span.start
            committed = await _committed(consumer, tp)
            if committed is not None and committed > position:
                position = committed
                self.resumed[tp] = committed
            consumer.seek(tp, position)
            if self.finished(tp, position):
                consumer.pause(tp)
        await listener.on_partitions_assigned(partitions)

    def admits(self, tp: TopicPartition, offset: int) -> bool:
        span = self.ranges.get(tp)
        if span is None or span.end is None or offset < span.end:
            return True
        self._left.discard(tp)
        return False

    def finished(self, tp: TopicPartition, next_offset: int) -> bool:
        span = self.ranges.get(tp)
        if span is None or span.end is None or next_offset < span.end:
            return False
        self._left.discard(tp)
        return True

    def end_of(self, tp: TopicPartition) -> int | None:
        span = self.ranges.get(tp)
        return span.end if span is not None else None

    @property
    def exhausted(self) -> bool:
        return self.bounded and not self._left


def from_beginning(topics: Sequence[str]) -> AssignedPartitions:
    """Every partition of ``topics`` from its first retained record, read on as records arrive (a compacted
    topic: the latest record of every key, then what comes)."""

    async def resolve(consumer: AIOKafkaConsumer) -> dict[TopicPartition, PartitionRange]:
        partitions = topic_partitions(consumer, topics)
        starts = await consumer.beginning_offsets(partitions) if partitions else {}
        return {tp: PartitionRange(starts[tp]) for tp in partitions}

    return AssignedPartitions(resolve, description=f"topics {','.join(topics)} from the beginning")


def topic_partitions(consumer: AIOKafkaConsumer, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of ``topics``, in order of topic and number; none for a topic the broker does not have.
    From the consumer's metadata of every topic, fetched when it started and every ``metadata_max_age_ms``
    (never asked for by name, which would create the topic on a broker that auto-creates topics). Note that
    ``consumer.topics()`` does not refresh it: a topic created after the consumer started is known only from
    its next refresh."""
    return [TopicPartition(topic, p) for topic in topics for p in sorted(consumer.partitions_for_topic(topic) or ())]


async def _committed(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    try:
        offset: int | None = await consumer.committed(tp)
    except IllegalOperation:  # a consumer without a group commits nothing, so resumes nothing
        return None
    return offset


async def read_ranges(
    consumer: AIOKafkaConsumer,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    each: Callable[[TopicPartition, Any], None],
    *,
    stall_s: float = 30.0,
) -> int:
    """Every record of each partition's ``[start, end)``, handed to ``each`` in order per partition; how many were
    read. ``consumer`` has no group (it is assigned the partitions and seeks; unassigned after). A partition is done
    once its position passes its end (a compacted topic leaves gaps); ``TimeoutError`` when nothing arrives for
    ``stall_s`` short of an end."""
    pending = {tp for tp, (start, end) in ranges.items() if end > start}
    consumer.assign(sorted(pending, key=lambda tp: (tp.topic, tp.partition)))
    for tp in pending:
        consumer.seek(tp, ranges[tp][0])
    records = 0
    progress = time.monotonic()
    while pending:
        batches = await consumer.getmany(*pending, timeout_ms=200)
        for tp, batch in batches.items():
            start, end = ranges[tp]
            for record in batch:
                if start <= record.offset < end:
                    each(tp, record)
                    records += 1
                    progress = time.monotonic()
        for tp in list(pending):
            if await consumer.position(tp) >= ranges[tp][1]:
                pending.discard(tp)
        if pending and time.monotonic() - progress > stall_s:
            listed = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(pending))
            raise TimeoutError(f"read nothing for {stall_s:g} s short of the end of {listed}")
    consumer.assign([])
    return records
