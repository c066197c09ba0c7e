"""The scoring service: Kafka in, scorer runs, sinks out, offsets committed only behind the exports.

One asyncio loop does everything. Records are polled, decoded once, mapped per scorer, and each run
becomes a task; runs finish out of order. A checkpoint (every ``commit_interval_s``, on revoke and at
shutdown) computes what is committable *first*, then flushes every sink, then commits: whatever was
done before the checkpoint started was submitted before the flush, so it is exported when the flush
succeeds (at-least-once; score ids are deterministic, so redelivery is harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from sidecar.conventions.selection import Selection
from sidecar.core import ScorerRunRequest, Sink
from sidecar.core.observers import IngestSkipReason, ServiceObserver
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason, RecordSource
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig, MultiProcessedRecord, process_record_multi
from sidecar.runtime.agent_labels import AgentLabels
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.checkpoint import Checkpoint
from sidecar.runtime.offsets import OffsetTracker
from sidecar.scoring import Scorer

__all__ = ["ConfiguredScorer", "RuntimeLimits", "ScoringService"]

log = logging.getLogger(__name__)

# How long intake may hold the event loop between two yields. A whole poll (500 records, ~150 ms) at once
# would hold judge replies back for its full ingest time, and a judge call takes a few loop turns (reply,
# slot handed over, next request sent): at a fixed judge concurrency, loop turns held by intake divide the
# calls per second. Measured with bench/e2e.py's judge section (3 runs each, fraction of a raw client's
# calls/s; 2 workers / 1 process): 2 ms 0.98 / 0.81, 5 ms 0.95 / 0.86, 10 ms 0.91 / 0.78, and 32 records
# per slice (before, one run) 0.87 / 0.74. Shorter slices cost more loop turns, which a CPU-bound process feels.
_INGEST_SLICE_S = 0.005

_INGEST_SKIPS: tuple[IngestSkipReason, ...] = ("internal", "filtered", "sampled_out", "no_content")


@dataclass(frozen=True, slots=True)
class ConfiguredScorer:
    scorer: Scorer
    selection: Selection = field(default_factory=Selection)
    scale: float = 1.0
    judge_model: str | None = None  # the judge's label (provider/model), for shed accounting


@dataclass(frozen=True, slots=True)
class RuntimeLimits:
    max_in_flight_runs: int = 512
    max_buffered_bytes: int = 64 * 1024 * 1024
    commit_interval_s: float = 1.0
    shutdown_timeout_s: float = 20.0
    revoke_timeout_s: float = 5.0
    run_timeout_s: float = 120.0
    flush_timeout_s: float = 10.0
    poll_timeout_ms: int = 200
    max_poll_records: int = 500
    # How long intake waits for capacity before pausing its partitions. Pausing drops the consumer's
    # prefetched records (a fetch round trip to resume), so runs that only need CPU are waited for.
    pause_grace_s: float = 0.2


@dataclass(slots=True)
class _Pending:
    runs_left: int
    size: int
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, service: ScoringService) -> None:
        self._service = service

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._service._on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self._service._on_assigned(list(assigned))


class ScoringService:
    def __init__(
        self,
        *,
        bootstrap_servers: str,
        group_id: str,
        ingest: IngestConfig,
        topics: Sequence[str],
        scorers: Sequence[ConfiguredScorer],
        sinks: Sequence[Sink],
        observer: ServiceObserver | None = None,
        limits: RuntimeLimits = RuntimeLimits(),
        consumer_options: dict[str, Any] | None = None,
        producer_options: dict[str, Any] | None = None,
        readiness_checks: Sequence[Callable[[], str | None]] = (),
        agent_labels: AgentLabels | None = None,
    ) -> None:
        if not scorers:
            raise ValueError("the service needs at least one scorer")
        self._bootstrap = bootstrap_servers
        self._group_id = group_id
        self._ingest = ingest
        self._topics = list(topics)
        self._scorers = tuple(scorers)
        self._selections = tuple(s.selection for s in scorers)
        self._sinks = tuple(sinks)
        self._observer = observer or ServiceObserver()
        self._limits = limits
        self._consumer_options = consumer_options or {}
        self._producer_options = producer_options or {}
        self._readiness_checks = tuple(readiness_checks)
        self._agent_labels = agent_labels or AgentLabels()
        self._tracker: OffsetTracker[TopicPartition] = OffsetTracker()
        self._pending: dict[tuple[TopicPartition, int], _Pending] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Counted explicitly: a finishing run updates capacity before its task is done (and removed from
        # _tasks by a later callback), so len(_tasks) would still count it and pausing would never end.
        self._runs_in_flight = 0
        self._buffered_bytes = 0
        self._capacity = asyncio.Event()
        self._capacity.set()
        self._consumer: AIOKafkaConsumer | None = None
        self._assigned: set[TopicPartition] = set()
        self._paused = False
        self._checkpoints: Checkpoint[TopicPartition] | None = None  # once the consumer exists
        self.ready = False  # the consumer joined its group and polled
        self.stopped = asyncio.Event()

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: the group is joined, every exporter confirms its exports (a sink whose last
        ``UNHEALTHY_FLUSHES`` flushes failed is down: its broker or receiver is unreachable or refusing), and
        no readiness check reports a problem (a judge holding runs: nothing past them can commit)."""
        if not self.ready:
            return False, "joining the consumer group"
        down = self._checkpoints.sinks_down() if self._checkpoints is not None else []
        problems = [problem for check in self._readiness_checks if (problem := check())]
        if down:
            problems.insert(0, f"exporter not confirming exports: {', '.join(down)}")
        if problems:
            return False, "; ".join(problems)
        return True, "ready"

    # -- lifecycle ------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then drain (bounded), flush, commit and return."""
        for sink in self._sinks:
            await sink.start()
        producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap, acks="all", **self._producer_options)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            group_id=self._group_id,
            **{"auto_offset_reset": "earliest", **self._consumer_options, "enable_auto_commit": False},
        )
        self._consumer = consumer
        self._checkpoints = Checkpoint(self._tracker, self._sinks, consumer, self._observer)
        await producer.start()
        publisher = DeadLetterPublisher(producer, self._ingest.dead_letter_topic, encoding=self._ingest.encoding)
        committer: asyncio.Task[None] | None = None
        try:
            await consumer.start()
            consumer.subscribe(self._topics, listener=_Rebalance(self))
            committer = asyncio.create_task(self._commit_loop(stop), name="checkpoints")
            await self._consume(consumer, publisher, stop)
            await self._drain(self._limits.shutdown_timeout_s)
            await self._checkpoint(timeout_s=self._limits.flush_timeout_s)
        finally:
            self.ready = False
            if committer is not None:
                committer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await committer
            for task in list(self._tasks):
                task.cancel()
            await consumer.stop()
            await producer.stop()
            for sink in self._sinks:
                with contextlib.suppress(Exception):
                    await sink.close()
            self.stopped.set()

    async def _consume(self, consumer: AIOKafkaConsumer, publisher: DeadLetterPublisher, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not self._capacity.is_set():
                if not self._paused and await self._capacity_within(self._limits.pause_grace_s):
                    continue
                self._set_paused(consumer, True)
                stop_wait = asyncio.ensure_future(stop.wait())
                capacity_wait = asyncio.ensure_future(self._capacity.wait())
                await asyncio.wait({stop_wait, capacity_wait}, return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                capacity_wait.cancel()
                continue
            self._set_paused(consumer, False)
            batches = await consumer.getmany(
                timeout_ms=self._limits.poll_timeout_ms, max_records=self._limits.max_poll_records
            )
            self.ready = True
            slice_started = time.perf_counter()
            for tp, records in batches.items():
                if tp not in self._assigned:
                    continue  # revoked while the fetch was in flight: the new owner reads these
                for record in records:
                    if tp not in self._assigned:
                        break  # revoked while this batch was being ingested: the rest is the new owner's
                    await self._ingest_record(tp, record, publisher)
                    if time.perf_counter() - slice_started >= _INGEST_SLICE_S:
                        # Ingest is CPU work: let judge replies and finished runs through between slices.
                        await asyncio.sleep(0)
                        slice_started = time.perf_counter()
            # getmany returns buffered records without suspending: let the runs just created progress.
            await asyncio.sleep(0)

    async def _capacity_within(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self._capacity.wait()
        except TimeoutError:
            return False
        return True

    def _set_paused(self, consumer: AIOKafkaConsumer, paused: bool) -> None:
        # Backpressure: stop fetching (and prefetching) rather than buffer without bound.
        if paused == self._paused:
            return
        self._paused = paused
        assignment = list(consumer.assignment())
        if paused:
            consumer.pause(*assignment)
            log.info("backpressure: paused %d partitions (%d runs in flight)", len(assignment), self._runs_in_flight)
        else:
            consumer.resume(*assignment)

    # -- records --------------------------------------------------------------------------------------
    async def _ingest_record(self, tp: TopicPartition, record: Any, publisher: DeadLetterPublisher) -> None:
        value: bytes | None = record.value
        size = len(value) if value is not None else 0
        try:
            self._tracker.track(tp, record.offset)
        except ValueError:
            # A record this assignment already holds (a fetch from before a seek): the first copy counts.
            log.warning("skipping %s/%d@%d: already in flight", tp.topic, tp.partition, record.offset)
            return
        try:
            processed = process_record_multi(value, self._ingest, self._selections)
        except Exception as exc:  # a bug, not bad input: set the record aside, keep the partition moving
            log.exception("ingest failed on %s/%d@%d", tp.topic, tp.partition, record.offset)
            letter = DeadLetter(DeadLetterReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:300])
            processed = MultiProcessedRecord(dead_letters=(letter,), runs=tuple(() for _ in self._selections))
        if processed.dead_letters:
            source = RecordSource(
                topic=tp.topic,
                partition=tp.partition,
                offset=record.offset,
                value=value or b"",
                key=record.key,
                headers=tuple((k, bytes(v)) for k, v in record.headers or ()),
            )
            await publisher.publish(source, processed.dead_letters)
            for letter in processed.dead_letters:
                self._observer.dead_lettered(letter.reason.value)
        self._observe_record(tp.topic, processed)
        work = [
            (configured, request)
            for configured, requests in zip(self._scorers, processed.runs, strict=True)
            for request in requests
        ]
        if not work:
            self._tracker.done(tp, record.offset)
            return
        pending = self._pending[(tp, record.offset)] = _Pending(runs_left=len(work), size=size)
        self._buffered_bytes += size
        for configured, request in work:
            task = asyncio.create_task(self._score(configured, request, tp, record.offset, pending))
            pending.tasks.append(task)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            self._runs_in_flight += 1
        self._update_capacity()

    def _observe_record(self, topic: str, processed: MultiProcessedRecord) -> None:
        observer = self._observer
        observer.record_consumed(topic, processed.spans_seen)
        for configured, skipped in zip(self._scorers, processed.skipped, strict=True):
            scorer_id = configured.scorer.id
            if skipped.filtered:
                observer.runs_skipped(scorer_id, "unknown", "filtered", skipped.filtered)
            if skipped.sampled_out:
                observer.runs_skipped(scorer_id, "unknown", "sampled_out", skipped.sampled_out)
        # Ingest-level skips are counted once per span, whichever scorers' selections saw them.
        for reason in _INGEST_SKIPS:
            n = max((getattr(skipped, reason) for skipped in processed.skipped), default=0)
            if n:
                observer.spans_skipped(reason, n)
        too_large = sum(
            1 for letter in processed.dead_letters if letter.reason.value in ("too_large", "record_too_large")
        )
        if too_large:
            observer.runs_skipped("", "unknown", "too_large", too_large)

    def _update_capacity(self) -> None:
        over = self._runs_in_flight >= self._limits.max_in_flight_runs or (
            self._buffered_bytes >= self._limits.max_buffered_bytes
        )
        if over:
            self._capacity.clear()
        else:
            self._capacity.set()
        self._observer.runs_in_flight(self._runs_in_flight)

    # -- runs -----------------------------------------------------------------------------------------
    async def _score(
        self,
        configured: ConfiguredScorer,
        request: ScorerRunRequest,
        tp: TopicPartition,
        offset: int,
        pending: _Pending,
    ) -> None:
        scorer = configured.scorer
        agent = self._agent_labels.label(request.target.agent_name)
        try:
            attempt = await attempt_scorer(scorer, request, timeout_s=self._limits.run_timeout_s)
            shed_reason = attempt.shed_reason
            if shed_reason is not None:  # over a judge's spend cap with the "shed" policy: skipped, counted
                self._observer.runs_skipped(scorer.id, agent, "shed", 1, judge=configured.judge_model or "unknown")
            else:
                scored = attempt.to_scored_run(request, scorer, agent)
                self._observer.run_finished(scored)
                for sink in self._sinks:
                    try:
                        await sink.submit(scored)
                    except Exception:
                        log.exception("sink %s rejected score %s", sink.name, scored.score_id)
        finally:
            self._run_done(tp, offset, pending)

    def _run_done(self, tp: TopicPartition, offset: int, pending: _Pending) -> None:
        self._runs_in_flight -= 1
        pending.runs_left -= 1
        # A run that outlived a revoke belongs to an older assignment: it must not complete the record
        # the current assignment holds at the same offset.
        if pending.runs_left == 0 and self._pending.get((tp, offset)) is pending:
            del self._pending[(tp, offset)]
            self._buffered_bytes -= pending.size
            self._tracker.done(tp, offset)
        self._update_capacity()

    # -- commits --------------------------------------------------------------------------------------
    async def _commit_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._limits.commit_interval_s)
            try:
                await self._checkpoint(timeout_s=self._limits.flush_timeout_s)
                self._report_lag()
            except Exception:
                log.exception("checkpoint failed; offsets stay where they were")

    async def _checkpoint(self, *, timeout_s: float, partitions: Sequence[TopicPartition] | None = None) -> bool:
        if self._checkpoints is None:
            return False
        owned = list(partitions if partitions is not None else self._assigned)
        return await self._checkpoints.commit(owned, timeout_s=timeout_s)

    def _report_lag(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        for tp in self._assigned:
            highwater = consumer.highwater(tp)
            committed = self._tracker.committed(tp)
            if highwater is not None and committed is not None:
                self._observer.consumer_lag(tp.topic, tp.partition, highwater - committed)

    async def _drain(self, timeout_s: float) -> None:
        if self._tasks:
            log.info("draining %d runs (up to %ss)", len(self._tasks), timeout_s)
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    # -- rebalances -----------------------------------------------------------------------------------
    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        # Commit what is done for the partitions we lose, within a budget; abandon the rest to the new owner
        # (its runs are cancelled, held ones included: their records were not committed, so they are redone).
        mine = [tp for tp in revoked if tp in self._assigned]
        if mine:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._checkpoint(timeout_s=self._limits.revoke_timeout_s, partitions=mine),
                    self._limits.revoke_timeout_s,
                )
        abandoned = self._tracker.revoke(mine)
        lost = set(mine)
        for key in [k for k in self._pending if k[0] in lost]:
            pending = self._pending.pop(key)
            self._buffered_bytes -= pending.size
            for task in pending.tasks:
                task.cancel()
        for tp in mine:
            self._assigned.discard(tp)
            self._observer.consumer_lag(tp.topic, tp.partition, None)
        if abandoned:
            log.info("revoked %d partitions; %d records left to their new owner", len(mine), abandoned)
        self._update_capacity()

    def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        self._assigned.update(assigned)
        if self._paused and self._consumer is not None:
            self._consumer.pause(*assigned)
