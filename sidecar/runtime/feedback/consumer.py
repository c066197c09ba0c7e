"""The feedback stage's consumers: its group (``<group>-feedback``) over the feedback and score topics, with Kafka's
range assignor so that partition ``p`` of both goes to the same member, and a reader with no group that restores a
lane's state from the compacted state topic when the group assigns it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from sidecar.runtime.clients import ClientOptions, start_assigned_consumer
from sidecar.runtime.feedback.limits import FeedbackLimits
from sidecar.runtime.feedback.topics import check_topics
from sidecar.runtime.sources import GroupSubscription, read_ranges
from sidecar.runtime.tansu import read_log_ends

__all__ = ["JoinSubscription", "feedback_group", "read_partitions", "start_feedback_consumers"]

log = logging.getLogger(__name__)

# A restore that reads nothing for this long while short of its end gives up (the state topic is unreadable).
_RESTORE_STALL_S = 30.0


def feedback_group(group_id: str) -> str:
    return f"{group_id}-feedback"


async def start_feedback_consumers(
    options: ClientOptions, limits: FeedbackLimits
) -> tuple[AIOKafkaConsumer, AIOKafkaConsumer]:
    """The group's consumer and the state topic's reader, started, once every topic was checked
    (:class:`StartupFailure` when one is missing or unfit)."""
    if options.group_id is None:
        raise ValueError("feedback needs the consumer group of the service")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=options.bootstrap_servers,
        group_id=feedback_group(options.group_id),
        # Partition p of both topics to one member: the two halves of a pair meet there.
        partition_assignment_strategy=(RangePartitionAssignor,),
        **{**options.consumer, "enable_auto_commit": False, "auto_offset_reset": "earliest"},
    )
    await consumer.start()
    reader: AIOKafkaConsumer | None = None
    try:
        await check_topics(consumer, limits, {"bootstrap_servers": options.bootstrap_servers, **options.producer})
        reader = await start_assigned_consumer(
            options.bootstrap_servers,
            {**options.consumer, "auto_offset_reset": "earliest"},
            timeout_s=options.startup_timeout_s,
            purpose="the feedback join's state reader",
        )
    except BaseException:
        with contextlib.suppress(Exception):
            await consumer.stop()
        raise
    return consumer, reader


async def read_partitions(
    reader: AIOKafkaConsumer, partitions: Sequence[TopicPartition], each: Callable[[TopicPartition, object], None]
) -> int:
    """Every record of ``partitions`` from the first retained to the end they had when asked, handed to ``each`` in
    order per partition; how many were read."""
    if not partitions:
        return 0
    starts = await reader.beginning_offsets(list(partitions))
    ends = await read_log_ends(reader, partitions, starts)
    return await read_ranges(reader, {tp: (starts[tp], ends[tp]) for tp in partitions}, each, stall_s=_RESTORE_STALL_S)


class JoinSubscription(GroupSubscription):
    """The feedback and score topics, shared by the group; each assignment is told to ``on_assigned`` (which restores
    the lanes' state) before intake owns the partitions."""

    def __init__(self, topics: Sequence[str], on_assigned: Callable[[list[TopicPartition]], Awaitable[None]]) -> None:
        super().__init__(topics)
        self._on_assigned = on_assigned

    def describe(self) -> str:
        return f"topics {','.join(self.topics)} (co-partitioned: a feedback meets its score on one partition number)"

    async def attach(self, consumer: AIOKafkaConsumer, listener: ConsumerRebalanceListener) -> None:
        consumer.subscribe(list(self.topics), listener=_RestoreFirst(listener, self._on_assigned))


class _RestoreFirst(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self, listener: ConsumerRebalanceListener, on_assigned: Callable[[list[TopicPartition]], Awaitable[None]]
    ) -> None:
        self._listener = listener
        self._on_assigned = on_assigned

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._listener.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        await self._on_assigned(list(assigned))
        await self._listener.on_partitions_assigned(assigned)
