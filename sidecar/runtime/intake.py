"""Intake: records from the consumer to the record handler, paced, paused when the service is full.

It polls, feeds each record of an owned partition to the handler (yielding the loop between slices of CPU
work), pauses every partition while capacity is out (stop fetching rather than buffer without bound) and
resumes when there is room, follows the assignment through rebalances (the service decides what a revoke
does), reports consumer lag, and for a bounded source stops reading each partition at its end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from sidecar.core.observers import ServiceObserver
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.offsets import OffsetTracker
from sidecar.runtime.pacing import INGEST_SLICE_S
from sidecar.runtime.sources import RecordSource
from sidecar.runtime.stopping import cancel_and_wait

__all__ = ["Intake", "IntakeEnd"]

log = logging.getLogger(__name__)

# Intake notices a stop between two polls (``poll_timeout_ms``); one waiting on a sink with no room or on
# an unreachable broker (a dead letter) is cancelled after this long: its record was not done, so it is
# redelivered.
INTAKE_STOP_S = 1.0
_LISTED_PARTITIONS = 12  # more are counted, not listed

IntakeEnd = Literal["stopped", "exhausted", "abandoned"]
RecordHandlerFn = Callable[[TopicPartition, Any], Awaitable[None]]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, intake: Intake) -> None:
        self._intake = intake

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._intake._revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self._intake._assigned(list(assigned))


class Intake:
    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        source: RecordSource,
        handle: RecordHandlerFn,
        *,
        capacity: Capacity,
        observer: ServiceObserver,
        group_id: str | None,
        poll_timeout_ms: int,
        max_poll_records: int,
        pause_grace_s: float,
        on_revoked: Callable[[list[TopicPartition]], Awaitable[None]],
        runs_in_flight: Callable[[], int],
        metrics_url: str | None = None,
    ) -> None:
        self._consumer = consumer
        self._source = source
        self._handle = handle
        self._capacity = capacity
        self._observer = observer
        self._group_id = group_id
        self._poll_timeout_ms = poll_timeout_ms
        self._max_poll_records = max_poll_records
        self._pause_grace_s = pause_grace_s
        self._on_revoked = on_revoked
        self._runs_in_flight = runs_in_flight
        self._metrics_url = metrics_url
        self.owned: set[TopicPartition] = set()
        # Per partition, how many times it was revoked: a batch fetched before a revoke is not handled on after it,
        # even when the partition came back meanwhile (the consumer fetches it again from the last commit).
        self._generations: dict[TopicPartition, int] = {}
        self._newest: dict[TopicPartition, int] = {}  # per partition, the newest record timestamp handled (ms)
        self._unhandled: set[TopicPartition] = set()  # partitions of the batch being handled, not done yet
        self._finished: set[TopicPartition] = set()  # a bounded source's partitions read to their end
        self.ready = False  # polled at least once
        self._paused = False
        self._joined = False

    async def attach(self) -> None:
        await self._source.attach(self._consumer, _Listener(self))

    async def run_until(self, stop: asyncio.Event) -> IntakeEnd:
        """Read until ``stop`` (or the source is exhausted). Intake that does not notice the stop within
        ``INTAKE_STOP_S`` (waiting on a sink with no room, or on the broker for a dead letter) is cancelled:
        ``abandoned``. What ended intake, if it failed, is raised."""
        task = asyncio.create_task(self._consume(stop), name="intake")
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await asyncio.wait({task}, timeout=INTAKE_STOP_S)
        finally:
            stopped.cancel()
            abandoned = not task.done()
            if abandoned:
                await cancel_and_wait(task)
        if abandoned:
            return "abandoned"
        task.result()  # raises what ended intake, if it failed
        return "exhausted" if self._source.exhausted else "stopped"

    async def _consume(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        source = self._source
        room = self._capacity.room
        while not stop.is_set() and not source.exhausted:
            if not room.is_set():
                if not self._paused and await _within(room, self._pause_grace_s):
                    continue
                self._set_paused(True)
                await _first(stop.wait(), room.wait())
                continue
            self._set_paused(False)
            batches = await consumer.getmany(timeout_ms=self._poll_timeout_ms, max_records=self._max_poll_records)
            self.ready = True
            # Fetched (the consumer's position is past them) and not handled yet: behind, whatever the position says.
            self._unhandled.update(tp for tp, records in batches.items() if records)
            slice_started = time.perf_counter()
            for tp, records in batches.items():
                if tp not in self.owned:
                    self._unhandled.discard(tp)
                    continue  # revoked while the fetch was in flight: the new owner reads these
                generation = self._generations.get(tp, 0)
                for record in records:
                    if tp not in self.owned or self._generations.get(tp, 0) != generation:
                        # Revoked while this batch was being ingested: the rest is the new owner's, or, when the
                        # partition came back, read again from the last commit under the new assignment.
                        break
                    if source.bounded and not source.admits(tp, record.offset):
                        self._finish(tp)
                        break
                    await self._handle(tp, record)
                    if record.timestamp > self._newest.get(tp, -1):
                        self._newest[tp] = record.timestamp
                    if source.bounded and source.finished(tp, record.offset + 1):
                        self._finish(tp)
                        break
                    if time.perf_counter() - slice_started >= INGEST_SLICE_S:
                        # Ingest is CPU work: let judge replies and finished runs through between slices.
                        await asyncio.sleep(0)
                        slice_started = time.perf_counter()
                self._unhandled.discard(tp)
            # getmany returns buffered records without suspending: let the runs just created progress.
            await asyncio.sleep(0)

    def _finish(self, tp: TopicPartition) -> None:
        if tp not in self._finished:
            self._finished.add(tp)
            self._consumer.pause(tp)

    def _set_paused(self, paused: bool) -> None:
        # Backpressure: stop fetching (and prefetching) rather than buffer without bound.
        if paused == self._paused:
            return
        self._paused = paused
        consumer = self._consumer
        assignment = list(consumer.assignment())
        if paused:
            consumer.pause(*assignment)
            log.info("backpressure: paused %d partitions (%d runs in flight)", len(assignment), self._runs_in_flight())
        else:
            consumer.resume(*(tp for tp in assignment if tp not in self._finished))

    # -- assignment ----------------------------------------------------------------------------------------
    def _assigned(self, assigned: list[TopicPartition]) -> None:
        self.owned.update(assigned)
        self._log_assignment()
        if self._paused:
            self._consumer.pause(*assigned)

    async def _revoked(self, revoked: list[TopicPartition]) -> None:
        mine = [tp for tp in revoked if tp in self.owned]
        for tp in mine:
            self._generations[tp] = self._generations.get(tp, 0) + 1
        await self._on_revoked(mine)
        for tp in mine:
            self.owned.discard(tp)
            self._newest.pop(tp, None)
            self._observer.consumer_lag(tp.topic, tp.partition, None)

    def _log_assignment(self) -> None:
        # The first line says where the process stands (group, topics, partitions, metrics); later ones
        # follow the rebalances of a group whose members come and go.
        owned = _partitions(self.owned)
        if self._joined:
            log.info("consumer group %s rebalanced: %s", self._group_id, owned)
            return
        self._joined = True
        metrics = f"; metrics on {self._metrics_url}" if self._metrics_url else ""
        log.info("joined consumer group %s on %s: %s%s", self._group_id, self._source.describe(), owned, metrics)

    async def watermark_ms(self) -> int | None:
        """How far in record time intake has read every partition it owns: the newest record timestamp handled on
        the partition read furthest behind (one read to its high watermark counts as now); ``None`` while an
        owned partition has not answered a fetch yet. What comes later on these partitions is stamped after it,
        as far as its producers' clocks agree."""
        mark = time.time_ns() // 1_000_000
        consumer = self._consumer
        for tp in list(self.owned):
            highwater = consumer.highwater(tp)
            if highwater is None:
                return None
            try:
                position = await consumer.position(tp)
            except Exception:  # revoked meanwhile
                return None
            if position < highwater or tp in self._unhandled:
                mark = min(mark, self._newest.get(tp, 0))
        return mark

    def report_lag(self, offsets: OffsetTracker[TopicPartition]) -> None:
        """Records between the committed offset and the high watermark (a bounded source's range end, when
        lower: what is left of a backfill's window), per owned partition."""
        consumer = self._consumer
        for tp in self.owned:
            highwater = consumer.highwater(tp)
            end = self._source.end_of(tp)
            if end is not None:
                highwater = end if highwater is None else min(highwater, end)
            committed = offsets.committed(tp)
            if highwater is not None and committed is not None:
                self._observer.consumer_lag(tp.topic, tp.partition, highwater - committed)


def _partitions(owned: set[TopicPartition]) -> str:
    names = [f"{tp.topic}-{tp.partition}" for tp in sorted(owned, key=lambda tp: (tp.topic, tp.partition))]
    if not names:
        return "0 partitions assigned (more members in the group than partitions: this one idles)"
    listed = ", ".join(names[:_LISTED_PARTITIONS]) + (", …" if len(names) > _LISTED_PARTITIONS else "")
    return f"{len(names)} partitions assigned ({listed})"


async def _within(event: asyncio.Event, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def _first(*waits: Awaitable[Any]) -> None:
    futures = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()
