"""Which records a window holds: per partition of the traces topic, the offsets of ``--from`` and ``--to`` from the
broker's time index, checked against what the topic still retains.

- **Start**: ``offsets_for_times(--from)``, the first record written at or after it; none → the partition's end;
  the partition's first record when its oldest is inside the window.
- **End** (exclusive): ``offsets_for_times(--to)``; none, or ``--to`` now → the partition's end found here, so a
  backfill to "now" stops at what existed when it started.
- **The partition's end** is read from the high watermark of a fetch of its last batch, not from
  ``end_offsets()`` alone, which the test broker (Tansu) answers short of the end (``sidecar.runtime.tansu``,
  docs/backfill.md).
- **Retention**: records before ``beginning_offsets()`` are deleted. When some were and the oldest record left
  was written after ``--from``, the deleted ones may have been in the window: the plan refuses it (exit 2),
  naming what was deleted and the earliest ``--from`` that scores only what remains.
- **A topic that does not exist** is found from the cluster's metadata, never by subscribing or sending (a
  broker that auto-creates topics would create it).

Which time the index holds is the broker's: Kafka's topics index the producer's record timestamp by default
(``message.timestamp.type=CreateTime``; ``LogAppendTime`` indexes the broker's write time), Tansu indexes the time
it wrote the batch, whatever the record says (with its S3 storage, in whole seconds, and answering the first batch
written strictly after the time asked).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from sidecar.backfill.window import Window, utc_text
from sidecar.runtime.sources import PartitionRange, topic_partitions
from sidecar.runtime.startup import EXIT_INVALID, StartupFailure
from sidecar.runtime.tansu import read_log_ends, time_index_answer

__all__ = ["PartitionWindow", "WindowPlan", "plan_window"]

log = logging.getLogger(__name__)

_LISTED = 4  # partitions named in one line; more are counted


@dataclass(frozen=True, slots=True)
class PartitionWindow:
    partition: TopicPartition
    start: int  # the first offset in the window
    end: int  # exclusive
    earliest: int  # the first offset the topic still holds
    log_end: int  # the partition's end when the plan was made

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class WindowPlan:
    topics: tuple[str, ...]
    window: Window
    partitions: tuple[PartitionWindow, ...]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    def ranges(self) -> dict[TopicPartition, PartitionRange]:
        return {p.partition: PartitionRange(p.start, p.end) for p in self.partitions}

    def describe(self) -> list[str]:
        lines = [
            f"  {p.partition.topic}-{p.partition.partition}: offsets {p.start}–{p.end - 1} ({p.records} records)"
            if p.records
            else f"  {p.partition.topic}-{p.partition.partition}: no records in the window"
            for p in self.partitions
        ]
        lines.append(f"  {self.records} records in {len(self.partitions)} partitions of {', '.join(self.topics)}")
        return lines


async def plan_window(
    consumer: AIOKafkaConsumer,
    topics: Sequence[str],
    window: Window,
    *,
    bootstrap: str,
    setting: str = "kafka.topics",
    verb: str = "score",
) -> WindowPlan:
    """The window's offsets in every partition of ``topics``, with ``consumer`` (no group: it is assigned and
    seeks). Raises :class:`StartupFailure` (exit 2) for a topic that does not exist or a window past retention;
    ``setting`` names where the topics are configured and ``verb`` what the command does with the records."""
    partitions = topic_partitions(consumer, topics)
    for topic in topics:
        if not any(tp.topic == topic for tp in partitions):
            raise StartupFailure(
                f"topic {topic} does not exist on the Kafka broker at {bootstrap}: check {setting} in the "
                "configuration, and that this is the broker the live service uses (nothing was created)",
                EXIT_INVALID,
            )
    earliest: dict[TopicPartition, int] = await consumer.beginning_offsets(partitions)
    ends = await read_log_ends(consumer, partitions, earliest)
    oldest = await _oldest_kept(consumer, partitions, earliest, ends)
    for topic in topics:
        _refuse_past_retention(
            topic,
            window,
            verb,
            [
                _Deleted(tp.partition, earliest[tp], oldest[tp])
                for tp in partitions
                if tp.topic == topic and earliest[tp] > 0
            ],
        )
    starts = await _offsets_at(consumer, partitions, window.start.unix_ms, ends)
    stops = ends if window.open_ended else await _offsets_at(consumer, partitions, window.end.unix_ms, ends)
    planned = []
    for tp in partitions:
        # A partition whose oldest record is inside the window starts at it, whichever way the broker compares
        # times (Tansu's S3 storage answers the first record written strictly after the time asked).
        kept = oldest[tp]
        start = earliest[tp] if kept is not None and kept >= window.start.unix_ms else max(starts[tp], earliest[tp])
        start = min(start, ends[tp])
        planned.append(PartitionWindow(tp, start, max(start, min(stops[tp], ends[tp])), earliest[tp], ends[tp]))
    return WindowPlan(tuple(topics), window, tuple(planned))


async def _offsets_at(
    consumer: AIOKafkaConsumer, partitions: Sequence[TopicPartition], unix_ms: int, ends: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """The first offset written at or after ``unix_ms`` per partition; the partition's end when there is none."""
    found = await consumer.offsets_for_times(dict.fromkeys(partitions, unix_ms))
    offsets = {}
    for tp in partitions:
        answer = time_index_answer(found.get(tp))
        offsets[tp] = answer.offset if answer is not None else ends[tp]
    return offsets


@dataclass(frozen=True, slots=True)
class _Deleted:
    partition: int
    first_kept: int  # records before this offset were deleted
    oldest_ms: int | None  # when the oldest record kept was written (None: none is kept)


async def _oldest_kept(
    consumer: AIOKafkaConsumer,
    partitions: Sequence[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int | None]:
    """When each partition's oldest record still held was written (the time index's answer for time 0); None
    for a partition that holds none."""
    found = await consumer.offsets_for_times(dict.fromkeys(partitions, 0))
    oldest: dict[TopicPartition, int | None] = {}
    for tp in partitions:
        answer = time_index_answer(found.get(tp))
        oldest[tp] = answer.timestamp if answer is not None and ends[tp] > earliest[tp] else None
    return oldest


def _refuse_past_retention(topic: str, window: Window, verb: str, deleted: list[_Deleted]) -> None:
    # A partition that lost records and whose oldest record left is younger than --from may have lost records
    # of the window. One that kept nothing says nothing of when its records were written: warned, not refused.
    lost = [d for d in deleted if d.oldest_ms is not None and d.oldest_ms > window.start.unix_ms]
    for empty in (d for d in deleted if d.oldest_ms is None):
        log.warning(
            "partition %d of %s holds no record any more (offsets 0–%d were deleted by retention): if the window "
            "reaches back to them, they are gone",
            empty.partition,
            topic,
            empty.first_kept - 1,
        )
    if not lost:
        return
    resume_ms = max(d.oldest_ms for d in lost if d.oldest_ms is not None)
    named = ", ".join(
        f"partition {d.partition} offsets 0–{d.first_kept - 1} deleted, its oldest record left written "
        f"{utc_text(d.oldest_ms or 0)}"
        for d in lost[:_LISTED]
    )
    more = f" and {len(lost) - _LISTED} more partitions" if len(lost) > _LISTED else ""
    whole = " (the whole window is gone)" if resume_ms >= window.end.unix_ms else ""
    raise StartupFailure(
        f"the window starts at {utc_text(window.start.unix_ms)}, before what topic {topic} still retains{whole}: "
        f"{named}{more}; records written before the oldest left were deleted by retention: to {verb} what remains, "
        f"run again with --from {utc_text(resume_ms)}",
        EXIT_INVALID,
    )
