"""The live join: the feedback and score topics' records through :class:`~.join.Join`, what it writes to the state
and pairs topics, and the offsets it commits.

An intake of the service in the stage's own group hands every record here (:meth:`FeedbackJoin.handle`): a feedback
record is read and checked (a bad one is a dead letter), a score record is read, and the join's effects are queued
on the state topic (what waits), the pairs topic (what met) and the observer (pairs, unmatched feedback, the window's
statistics). Each record is done as soon as its effects are queued: the checkpoint flushes both topics before it
commits, so an offset is committed only once what it changed is in the state topic, and a restart restores from it
what the lane held. On each assignment, the lanes new to this member are restored from the state topic before
intake reads them; a lane revoked and given back in the same rebalance keeps its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from sidecar.core.deadletters import DeadLetterReason
from sidecar.core.observers import FeedbackOutcome, ServiceObserver
from sidecar.ingest.deadletter import DeadLetter, RecordOrigin
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.runtime.feedback.consumer import read_partitions
from sidecar.runtime.feedback.join import Effects, Join, JoinedScorer
from sidecar.runtime.feedback.limits import FeedbackLimits
from sidecar.runtime.feedback.records import Feedback, FeedbackError, parse_feedback, parse_score
from sidecar.runtime.feedback.topics import RecordWriter, pair_record
from sidecar.runtime.offsets import OffsetTracker

__all__ = ["FeedbackJoin"]

log = logging.getLogger(__name__)

_TICK_S = 1.0
_WARN_EVERY = 1000


class FeedbackJoin:
    def __init__(
        self,
        limits: FeedbackLimits,
        scorers: Mapping[str, JoinedScorer],
        *,
        state: RecordWriter,
        pairs: RecordWriter,
        dead_letters: DeadLetterPublisher,
        observer: ServiceObserver,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.limits = limits
        self.join = Join(limits, scorers)
        self.offsets: OffsetTracker[TopicPartition] = OffsetTracker()
        self._state = state
        self._pairs = pairs
        self._dead_letters = dead_letters
        self._observer = observer
        self._wall_ms = wall_ms
        self._reader: AIOKafkaConsumer | None = None
        self._leaving: set[int] = set()  # lanes revoked by a rebalance that has not assigned yet
        self._unreadable = 0
        self.failure: BaseException | None = None  # a restore that could not finish: the stage stops the service

    def attach(self, reader: AIOKafkaConsumer) -> None:
        """The reader that restores lanes from the state topic."""
        self._reader = reader

    # -- assignment ----------------------------------------------------------------------------------------
    async def assigned(self, partitions: list[TopicPartition]) -> None:
        """A new assignment, before intake owns it: lanes given back keep their state, lanes gone are dropped, the
        others are restored from the state topic."""
        lanes = {tp.partition for tp in partitions}
        for lane in self._leaving - lanes:
            self.join.drop(lane)
        kept = self._leaving & lanes
        self._leaving.clear()
        new = sorted(lanes - kept - self.join.lanes)
        try:
            await self._restore(new)
        except Exception as exc:
            log.error("feedback: the state of lanes %s could not be restored (%r): stopping the service", new, exc)
            self.failure = exc

    def revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """A rebalance began (after the stage committed what it could): the lanes may come back at its assignment."""
        self.offsets.revoke(partitions)
        self._leaving.update(tp.partition for tp in partitions)

    async def _restore(self, lanes: list[int]) -> None:
        reader = self._reader
        if not lanes or reader is None:
            return
        started = time.monotonic()
        for lane in lanes:
            self.join.open(lane)
        skipped = 0

        def each(tp: TopicPartition, record: Any) -> None:
            nonlocal skipped
            skipped += not self.join.restore(tp.partition, record.key, record.value)

        topics = [TopicPartition(self.limits.state, lane) for lane in lanes]
        records = await read_partitions(reader, topics, each)
        self.join.restored()
        held = [self.join.held_of(lane) for lane in lanes]
        log.info(
            "feedback: lanes %s restored in %.1f s from %d records of %s: %d feedback and %d scores wait%s",
            ",".join(map(str, lanes)), time.monotonic() - started, records, self.limits.state,
            sum(f for f, _ in held), sum(s for _, s in held),
            f" ({skipped} records not the join's skipped)" if skipped else "",
        )  # fmt: skip
        self._observer.feedback_held(*self._held())

    # -- records -------------------------------------------------------------------------------------------
    async def handle(self, tp: TopicPartition, record: Any) -> None:
        self.offsets.track(tp, record.offset)
        now = self._wall_ms()
        try:
            if tp.topic == self.limits.topic:
                await self._feedback(tp, record, now)
            else:
                score = parse_score(record.value)
                if score is None:
                    self._warn_unreadable(tp)
                else:
                    await self._apply(self.join.score(tp.partition, score, now, record.timestamp))
        except (KafkaError, OSError):
            raise  # the broker (a dead letter that cannot be written): intake stops, the record is read again
        except Exception as exc:  # a bug met this record: set aside (a feedback) or skipped (a score), never stuck
            log.exception("feedback: %s-%d@%d could not be joined", tp.topic, tp.partition, record.offset)
            if tp.topic == self.limits.topic:
                origin = RecordOrigin(tp.topic, tp.partition, record.offset, record.value or b"", record.key)
                letter = DeadLetter(DeadLetterReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:300])
                for sent in await self._dead_letters.publish(origin, [letter], encoding="json"):
                    self._observer.dead_lettered(sent.reason.value)
        self.offsets.done(tp, record.offset)

    async def _feedback(self, tp: TopicPartition, record: Any, now: int) -> None:
        limits = self.limits
        try:
            feedback = parse_feedback(
                record.value, max_record_bytes=limits.max_record_bytes, max_comment_chars=limits.max_comment_chars
            )
        except FeedbackError as exc:
            self._observer.feedback_received("invalid")
            origin = RecordOrigin(tp.topic, tp.partition, record.offset, record.value or b"", record.key)
            await self._set_aside(origin, str(exc))
            return
        effects = self.join.feedback(tp.partition, feedback, now, record.timestamp)
        outcome: FeedbackOutcome
        if effects.rejected:
            outcome = "invalid"
        elif effects.duplicates:
            outcome = "duplicate"
        elif effects.pairs:
            outcome = "paired"
        else:
            outcome = "held" if effects.held else "unmatched"
        self._observer.feedback_received(outcome)
        if effects.rejected:  # refused at the join: set aside as it came
            [(_, why)] = effects.rejected
            effects.rejected.clear()
            origin = RecordOrigin(tp.topic, tp.partition, record.offset, record.value or b"", record.key)
            await self._set_aside(origin, why)
        await self._apply(effects)

    def _warn_unreadable(self, tp: TopicPartition) -> None:
        self._unreadable += 1
        if self._unreadable == 1 or self._unreadable % _WARN_EVERY == 0:
            log.warning(
                "feedback: %d records of %s skipped (not a score record): only the sidecar's Kafka score exporter "
                "writes to the score topic",
                self._unreadable, tp.topic,
            )  # fmt: skip

    async def _apply(self, effects: Effects) -> None:
        state = self._state
        for lane, key, value in effects.writes:
            await state.write(key, value, str(lane).encode())
        for pair in effects.pairs:
            scorer = self.join.scorers[pair.scorer_id]
            await self._pairs.write(pair.partition_key, pair_record(pair, scorer), pair.partition_key)
            self._observer.feedback_paired(pair.scorer_id, pair.comparison.agreed)
        for scorer_id, n in effects.unmatched.items():
            self._observer.feedback_unmatched(scorer_id, n)
        for feedback, why in effects.rejected:  # held feedback refused once its score came
            await self._set_aside(_origin_of(self.limits.topic, feedback), why)

    async def _set_aside(self, origin: RecordOrigin, why: str) -> None:
        letter = DeadLetter(DeadLetterReason.INVALID_FEEDBACK, why[:300])
        for sent in await self._dead_letters.publish(origin, [letter], encoding="json"):  # counted once delivered
            self._observer.dead_lettered(sent.reason.value)

    # -- the ticker ----------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Expire what waited too long and report the windows, once a second, until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _TICK_S)
            if stop.is_set():
                break
            try:
                await self.tick()
            except Exception:  # a bug: what expired is expired again at the next tick
                log.exception("feedback: a tick failed")

    async def tick(self) -> None:
        await self._apply(self.join.expire(self._wall_ms()))
        self.report()

    def report(self) -> None:
        for scorer_id, stats in self.join.stats():
            self._observer.judge_human_agreement(scorer_id, stats)
        self._observer.feedback_held(*self._held())

    def _held(self) -> tuple[int, int]:
        held = [self.join.held_of(lane) for lane in self.join.lanes]
        return sum(f for f, _ in held), sum(s for _, s in held)


def _origin_of(topic: str, feedback: Feedback) -> RecordOrigin:
    """A held feedback's dead letter: its fields as the state kept them (its record's offset is not kept)."""
    value = json.dumps(feedback.to_json(), ensure_ascii=False).encode()
    return RecordOrigin(topic, -1, -1, value, feedback.trace_id.encode())
