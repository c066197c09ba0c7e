"""Stage 2 of conversations: the internal topic's turns held by conversation until a window closes, then scored.

A second intake of the service reads the topic in its own consumer group (``<group>-sessions``) and hands every
record here (:meth:`Stage2.handle`). On each assignment a partition is read from its beginning
(``runtime.sources.RestoringSubscription``): the topic is this stage's store, so the open windows are rebuilt
from it and nothing is committed. A ticker closes windows on each partition's clock, evicts past ``max_bytes``,
starts the runs of closed windows on the shared dispatcher (same judges, gates and sinks) while runs may
start, and, once the checkpoint's flush confirmed a window's scores with every sink, writes its marker and its
tombstones (``runtime.sessions.topic``). A window scored but not yet tombstoned when the process dies is rebuilt
by the next owner and scored again under the same score ids (named by its first turn): at least once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from sidecar.conventions.session_turns import TurnSummary, turn_key
from sidecar.core.label_values import AGENT_NOT_READ
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.claims import Claim
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.pacing import ticks
from sidecar.runtime.sessions.limits import SessionLimits
from sidecar.runtime.sessions.topic import TurnTopic, marker_key, marker_value, parse_key, parse_marker
from sidecar.runtime.sessions.turns import conversation_runs
from sidecar.runtime.sessions.windows import SessionWindows, Window
from sidecar.runtime.tansu import log_end

__all__ = ["Stage2"]

log = logging.getLogger(__name__)

_TICK_S = 0.1
# A restoring partition whose position passed its end with no record handled for this long is restored (its
# last records were compacted away, or were our own tombstones: nothing more will come from the restore).
_RESTORE_STALL_S = 2.0
_WARNING_EVERY_S = 60.0
# From a turn handed to the internal topic's publisher to stage 2 reading it: the publish (acks=all) and a fetch
# (kafka.fetch_max_wait_ms, 500 ms by default).
_SETTLE_S = 0.5


@dataclass(slots=True)
class _Restore:
    floor: int  # the end offset the broker gave at the assignment
    # Where the restore ends: the high watermark of the partition's first fetch (at least ``floor``). Brokers
    # disagree on end offsets (sidecar.runtime.tansu), never on the high watermark.
    end: int | None = None
    started: float = field(default_factory=time.monotonic)
    records: int = 0
    progress: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class _Done:
    """A window whose runs ended: what its marker and tombstones need."""

    conversation: str
    turn_ids: tuple[str, ...]  # in conversation order: the first names the window


class Stage2:
    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        limits: SessionLimits,
        *,
        dispatcher: RunDispatcher,
        topic: TurnTopic,
        observer: ServiceObserver,
        max_in_flight_runs: int,
        grace_s: float = 0.0,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._scorers = tuple(scorers)
        self.limits = limits
        self.windows: SessionWindows[TopicPartition] = SessionWindows(limits)
        self._dispatcher = dispatcher
        self._topic = topic
        self._observer = observer
        self._max_in_flight_runs = max_in_flight_runs
        self._wall_ms = wall_ms
        # A turn's agent span ends before the Collector writes its record: a window waits that much more.
        self._grace_ms = int(grace_s * 1000)
        # How far stage 1 of this process has handed turns to the topic (record time of the traces, ms; None: not
        # known yet). The service sets it; alone (tests, a process without stage 1): the wall clock.
        self.stage1_read_to: Callable[[], Awaitable[int | None]] = self._wall_clock
        # Its samples, newest last: a turn handed over at a sample is read by stage 2 a publish and a fetch later,
        # so the clock uses the newest sample at least _SETTLE_S old.
        self._read_to: deque[tuple[float, int | None]] = deque()
        # Stage 2's own intake pauses only while closed windows wait for runs and the buffer is full: pausing
        # otherwise would stop the partitions' stream time, and no window could close to free memory.
        self.capacity = Capacity(observer, lambda: dispatcher.in_flight)
        self.capacity.bound(self._full)
        self._consumer: AIOKafkaConsumer | None = None
        self._next: dict[TopicPartition, int] = {}  # per partition, the offset after the last record handled
        self._restores: dict[TopicPartition, _Restore] = {}
        self._leaving: set[TopicPartition] = set()  # revoked by a rebalance that has not assigned yet
        self._scoring: dict[int, tuple[TopicPartition, Claim]] = {}
        self._scored: list[tuple[int, _Done]] = []  # runs ended, scores not yet confirmed by every sink
        self._done_count = 0
        self._confirmed: deque[_Done] = deque()
        self._tombstones: deque[tuple[str, bytes]] = deque()  # turns of windows scored before (from markers)
        # Markers whose turns' tombstones are written but not yet confirmed by a checkpoint: a failed tombstone is
        # sent again after later records, so a marker's own tombstone waits for the flush that confirms its turns'
        # (else a restore between the two could find turns without their marker and score them again).
        self._markers_written: list[tuple[str, bytes]] = []
        self._markers_restored: list[tuple[str, bytes]] = []  # found by a restore, their turns' tombstones unwritten
        self._last_warning = -_WARNING_EVERY_S
        self._unreadable = 0

    def attach(self, consumer: AIOKafkaConsumer) -> None:
        """The consumer stage 2's intake reads with (its positions and high watermarks give each partition's
        clock and lag)."""
        self._consumer = consumer

    def _full(self) -> bool:
        windows = self.windows
        return bool(windows.closed) and windows.bytes >= self.limits.max_bytes

    # -- assignment ----------------------------------------------------------------------------------------
    def assigned(self, partitions: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
        """An assignment: each partition (first retained offset, end offset then) and where to read it from. A
        partition this stage held before the rebalance keeps its windows and is read on from where it stopped (the
        group revokes every partition at each rebalance); another is restored from its beginning. The partitions
        revoked and not given back are dropped now: their new owner rebuilds their windows."""
        positions: dict[TopicPartition, int] = {}
        for tp, (start, end) in partitions.items():
            if tp in self._leaving and tp in self._next:
                self._leaving.discard(tp)
                positions[tp] = max(start, self._next[tp])
                continue
            self.windows.assign(tp)
            self._next[tp] = positions[tp] = start
            self._restores[tp] = _Restore(end)
            if end <= start:  # empty
                self._restored(tp)
        self._drop(self._leaving)
        self._leaving.clear()
        return positions

    async def revoked(self, revoked: list[TopicPartition]) -> None:
        """A rebalance began: the partitions may come back at its assignment (then nothing is lost), else they are
        dropped then."""
        self._leaving.update(revoked)

    def _drop(self, lost: set[TopicPartition]) -> None:
        """Their windows go to the new owner, which rebuilds them (runs of windows in flight are cancelled)."""
        for tp in lost:
            self.windows.drop(tp)
            self._next.pop(tp, None)
            self._restores.pop(tp, None)
        for key in [key for key, (tp, _) in self._scoring.items() if tp in lost]:
            self._scoring.pop(key)[1].drop()
        self.capacity.update()

    def _restored(self, tp: TopicPartition) -> None:
        restore = self._restores.pop(tp)
        sessions, turns = self.windows.restored(tp)
        seconds = time.monotonic() - restore.started
        self._observer.session_restored(tp.topic, tp.partition, seconds, restore.records)
        log.info(
            "sessions: %s-%d restored in %.1f s from %d records: %d open conversations (%d turns)",
            tp.topic, tp.partition, seconds, restore.records, sessions, turns,
        )  # fmt: skip

    # -- records -------------------------------------------------------------------------------------------
    async def handle(self, tp: TopicPartition, record: Any) -> None:
        offset: int = record.offset
        self._next[tp] = offset + 1
        self._read(tp, record.key, record.value, record.timestamp)
        restore = self._restores.get(tp)
        if restore is not None:
            restore.records += 1
            restore.progress = time.monotonic()
            if self._restore_end(tp, restore) <= offset + 1:
                self._restored(tp)
        self.capacity.update()

    def _restore_end(self, tp: TopicPartition, restore: _Restore) -> float:
        """Where ``tp``'s restore ends (infinity until its first fetch answered)."""
        if restore.end is None:
            end = log_end(restore.floor, self._highwater(tp))
            if end is None:
                return float("inf")
            restore.end = end
        return restore.end

    def _read(self, tp: TopicPartition, key: bytes | None, value: bytes | None, timestamp_ms: int) -> None:
        parsed = parse_key(key)
        if parsed is None:
            self._warn_unreadable(tp, "a key that is not a turn's nor a marker's")
            return
        conversation = parsed.conversation_id
        if parsed.kind == "marker":
            if value is not None:
                removed = self.windows.add_marker(tp, conversation, parse_marker(value))
                if removed:  # a window confirmed before whose tombstones did not all land: write them again
                    self._tombstones.extend((conversation, turn_key(conversation, t)) for t in removed)
                    self._markers_restored.append((conversation, key or b""))
            return
        if value is None:
            self.windows.remove_turn(tp, conversation, parsed.turn_id)
            return
        try:
            turn = TurnSummary.decode(value)
        except ValidationError:
            self._warn_unreadable(tp, "a turn that cannot be read")
            return
        self._observer.session_turns(self.windows.add_turn(tp, timestamp_ms, turn, value))

    def _warn_unreadable(self, tp: TopicPartition, what: str) -> None:
        self._unreadable += 1
        if self._unreadable == 1 or self._unreadable % 1000 == 0:
            log.warning(
                "sessions: %d records of %s skipped (%s): only the sidecar writes to sessions.topic",
                self._unreadable, tp.topic, what,
            )  # fmt: skip

    # -- the ticker ----------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Close, evict, start runs and write tombstones at a steady pace (closing is a matter of time)."""
        async for _ in ticks(stop, min(_TICK_S, self.limits.idle_s / 4)):
            try:
                await self.tick()
            except Exception:  # a bug: what was taken out is rebuilt by the next restore
                log.exception("sessions: a tick failed")

    async def tick(self) -> None:
        await self._check_restores()
        windows = self.windows
        # Nothing closes before stage 1 has read its partitions up to a time: a turn still unread there, or in the
        # trace buffer, may belong to a window that would otherwise look quiet (after a restart, under a backlog).
        read_to = await self._settled_read_to()
        if read_to is not None:
            now = min(self._wall_ms(), read_to) - self._grace_ms
            for tp in list(windows.partitions):
                if not windows.restoring(tp):
                    clock = now if self._caught_up(tp) else min(now, windows.stream_ms(tp) - self._grace_ms)
                    windows.close_due(tp, clock)
        self._evict()
        self._start_ready()
        await self._write_done()
        self._report()
        self.capacity.update()

    async def _wall_clock(self) -> int | None:
        return self._wall_ms()

    async def _settled_read_to(self) -> int | None:
        now = time.monotonic()
        samples = self._read_to
        samples.append((now, await self.stage1_read_to()))
        while len(samples) > 1 and samples[1][0] <= now - _SETTLE_S:
            samples.popleft()
        taken, read_to = samples[0]
        return read_to if taken <= now - _SETTLE_S else None

    def _caught_up(self, tp: TopicPartition) -> bool:
        highwater = self._highwater(tp)
        return highwater is not None and self._next.get(tp, 0) >= highwater

    def _highwater(self, tp: TopicPartition) -> int | None:
        consumer = self._consumer
        if consumer is None or tp in self._leaving or tp not in consumer.assignment():
            return None  # between a revoke and the next assignment: its clock is its stream time
        highwater: int | None = consumer.highwater(tp)
        return highwater

    async def _check_restores(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        for tp, restore in list(self._restores.items()):
            end = self._restore_end(tp, restore)
            if self._next.get(tp, 0) >= end:  # nothing to read (an empty partition answered its first fetch)
                self._restored(tp)
                continue
            if time.monotonic() - restore.progress < _RESTORE_STALL_S:
                continue
            with contextlib.suppress(Exception):  # a partition revoked meanwhile
                if await consumer.position(tp) >= end and tp in self._restores:
                    self._restored(tp)

    def _evict(self) -> None:
        evicted = 0  # counted as closed (reason evicted) when their runs start
        while self.windows.evict() is not None:
            evicted += 1
        if evicted and time.monotonic() - self._last_warning >= _WARNING_EVERY_S:
            self._last_warning = time.monotonic()
            log.warning(
                "sessions: %d MiB of turns buffered (sessions.max_bytes=%d): scored %d conversations before they "
                "went quiet (close reason evicted, incomplete). More conversations are open than the buffer holds: "
                "raise sessions.max_bytes above the conversation start rate × (their length + idle_s) × their size",
                self.windows.bytes // 2**20, self.limits.max_bytes, evicted,
            )  # fmt: skip

    def _start_ready(self) -> None:
        while self._max_in_flight_runs - self._dispatcher.in_flight > 0:
            window = self.windows.take()
            if window is None:
                return
            self._start(window)

    def _start(self, window: Window[TopicPartition]) -> None:
        assert window.reason is not None
        conversation = window.conversation
        ordered = window.ordered_ids()
        turns = [TurnSummary.decode(window.turns[turn_id].data) for turn_id in ordered]
        self._observer.session_closed(window.reason, len(turns))
        found = conversation_runs(self._scorers, conversation, turns, window.reason)
        for scorer_id in found.sampled_out:
            self._observer.runs_skipped(scorer_id, AGENT_NOT_READ, "sampled_out", 1)
        runs = found.runs
        done = _Done(conversation, tuple(ordered))
        if not runs:
            self._scored_window(done)
            return
        key = id(done)

        def ended() -> None:
            del self._scoring[key]
            self._scored_window(done)

        claim = Claim(ended)
        self._scoring[key] = (window.partition, claim)
        for configured, request in runs:
            self._dispatcher.start(configured, request, claim)
        claim.seal()

    def _scored_window(self, done: _Done) -> None:
        self._done_count += 1
        self._scored.append((self._done_count, done))

    # -- after the scores are confirmed --------------------------------------------------------------------
    def confirmation(self) -> Callable[[], None] | None:
        """For the checkpoint, before it flushes the sinks: what to do once they confirmed (the windows whose
        runs ended by now get their tombstones); ``None`` when no window waits."""
        markers = len(self._markers_written)  # their turns' tombstones were put before this checkpoint's flush
        if not self._scored and not markers:
            return None
        upto = self._scored[-1][0] if self._scored else 0

        def confirmed() -> None:
            self._confirmed.extend(done for number, done in self._scored if number <= upto)
            self._scored = [(number, done) for number, done in self._scored if number > upto]
            self._tombstones.extend(self._markers_written[:markers])
            del self._markers_written[:markers]

        return confirmed

    async def _write_done(self) -> None:
        topic = self._topic
        while self._tombstones:
            conversation, key = self._tombstones.popleft()
            await topic.publish(conversation, key, None)
        self._markers_written.extend(self._markers_restored)  # their turns' tombstones are now put
        self._markers_restored.clear()
        while self._confirmed:
            done = self._confirmed.popleft()
            conversation, first = done.conversation, done.turn_ids[0]
            marker = marker_key(conversation, first)
            # The marker first: a restore that finds it skips the turns it lists, so a process dying between the
            # tombstones never leaves part of a scored window to score again. Its own tombstone comes once a
            # checkpoint confirmed the turns' (``confirmation``).
            await topic.publish(conversation, marker, marker_value(done.turn_ids))
            for turn_id in done.turn_ids:
                await topic.publish(conversation, turn_key(conversation, turn_id), None)
            self._markers_written.append((conversation, marker))

    async def finish(self, timeout_s: float) -> bool:
        """At a stop, after the final checkpoint: write the tombstones of what it confirmed, and flush them (else
        the next owner scores those windows again, under the same ids)."""
        if timeout_s <= 0 or not (
            self._confirmed or self._tombstones or self._markers_written or self._markers_restored
        ):
            return True
        try:
            async with asyncio.timeout(timeout_s):
                await self._write_done()
                if not await self._topic.flush(timeout_s):
                    return False
                # The turns' tombstones are in: the markers' may follow (left out, a marker would stay).
                self._tombstones.extend(self._markers_written)
                self._markers_written.clear()
                await self._write_done()
                return await self._topic.flush(timeout_s)
        except TimeoutError:
            return False

    def drop_all(self) -> None:
        for _, claim in self._scoring.values():
            claim.drop()
        self._scoring.clear()

    def _report(self) -> None:
        windows = self.windows
        self._observer.session_buffer(windows.open_windows, windows.bytes)
        for tp in list(windows.partitions):
            highwater = self._highwater(tp)
            if highwater is not None and tp in self._next:
                self._observer.consumer_lag(tp.topic, tp.partition, max(0, highwater - self._next[tp]))
