"""The scoring service: Kafka in, scorer runs, sinks out, offsets committed only behind the exports.

One asyncio loop does everything. Records are polled, decoded once, mapped per scorer, and each run
becomes a task; runs finish out of order. A checkpoint (every ``commit_interval_s``, on revoke and at
shutdown) computes what is committable *first*, then flushes every sink, then commits: whatever was
done before the checkpoint started was submitted before the flush, so it is exported when the flush
succeeds (at-least-once; score ids are deterministic, so redelivery is harmless).

A stop is bounded by ``shutdown_timeout_s`` from the moment it is asked for, whatever the group or the
broker is doing: intake ends, runs drain, the final checkpoint flushes and commits, then the consumer
leaves its group while the producer and the sinks close. What does not finish in time is given up and
logged; uncommitted records are redelivered (docs/worker-lifecycle.md).

``scope: trace`` scorers score agent spans with their descendants once the trace is done: each record's
spans wait in a :class:`TraceBuffer` (by partition and trace id), a ticker takes out the traces that are
ready and starts their runs, and a record stays uncommitted until every trace it brought spans to has been
scored (or given up on) and exported: its pending count holds one reference per such trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

from sidecar.conventions.selection import Selection, classify, sample_score
from sidecar.conventions.spans import MappingResult, SpanReject, admit
from sidecar.conventions.trace_runs import TraceSpan, trace_runs
from sidecar.core import ScorerRunRequest, Sink, names
from sidecar.core.observers import IngestSkipReason, ServiceObserver
from sidecar.core.runs import ReadyReason
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason, RecordSource
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig, MultiProcessedRecord, process_record_multi
from sidecar.runtime.agent_labels import AgentLabels
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.checkpoint import Checkpoint
from sidecar.runtime.limits import RuntimeLimits, closing_reserve
from sidecar.runtime.offsets import OffsetTracker
from sidecar.runtime.startup import EXIT_UNREACHABLE, BrokerWait, StartupFailure, quiet_connect_errors
from sidecar.runtime.trace_buffer import BufferedTrace, TraceBuffer
from sidecar.scorers.context import REQUEST_CONTEXT_KEY
from sidecar.scoring import Scorer

__all__ = ["ConfiguredScorer", "RuntimeLimits", "ScoringService", "closing_reserve"]

log = logging.getLogger(__name__)

# How long intake may hold the event loop between two yields. A whole poll (500 records, ~150 ms) at once
# would hold judge replies back for its full ingest time, and a judge call takes a few loop turns (reply,
# slot handed over, next request sent): at a fixed judge concurrency, loop turns held by intake divide the
# calls per second. Measured with bench/e2e.py's judge section (3 runs each, fraction of a raw client's
# calls/s; 2 workers / 1 process): 2 ms 0.98 / 0.81, 5 ms 0.95 / 0.86, 10 ms 0.91 / 0.78, and 32 records
# per slice (before, one run) 0.87 / 0.74. Shorter slices cost more loop turns, which a CPU-bound process feels.
_INGEST_SLICE_S = 0.005

_INGEST_SKIPS: tuple[IngestSkipReason, ...] = ("internal", "filtered", "sampled_out", "no_content")

# Intake notices a stop between two polls (``poll_timeout_ms``); one waiting on a sink with no room or on
# an unreachable broker (a dead letter) is cancelled after this long: its record was not done, so it is
# redelivered.
_INTAKE_STOP_S = 1.0


# How often the trace buffer is asked for ready traces (at most; a quarter of idle_s when shorter): the
# delay it adds to a trace's score, against a pass over every buffered trace per tick.
_TRACE_TICK_S = 0.1
_DEAD_LETTER_RETRY_S = 5.0
# The attempt made at kafka.startup_timeout_s gets this long: a refused connection fails in milliseconds,
# and a broker that answers just then is not given up on.
_LAST_ATTEMPT_S = 2.0
# A full, stuck trace buffer logs its warning at most this often (it may evict a trace every tick).
_EVICTION_WARNING_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class ConfiguredScorer:
    scorer: Scorer
    selection: Selection = field(default_factory=Selection)
    scale: float = 1.0
    judge_model: str | None = None  # the judge's label (provider/model), for shed accounting
    # span: each selected span scored at once; trace: each selected agent span with its descendants, once
    # its trace is done.
    scope: Literal["span", "trace"] = "span"
    # The parts of a run the scorer reads (its kind's needs): a score says which of them the run lacked.
    needs: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Pending:
    runs_left: int  # its span runs not finished, plus the buffered traces it brought spans to
    size: int
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class _StopClock:
    """When the stop was asked for (the moment ``stop`` was set, noticed within a loop turn), and how much
    of the budget is left."""

    def __init__(self, stop: asyncio.Event, budget_s: float) -> None:
        self.budget_s = budget_s
        self.started: float | None = None
        self.asked = False  # the stop was asked for (else an error ended the service)
        self._watch: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        self._watch.add_done_callback(self._stop_asked)

    def _stop_asked(self, watch: asyncio.Future[Any]) -> None:
        if not watch.cancelled():
            self.asked = True
            self.start()

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def left(self) -> float:
        self.start()  # a stop not asked for (an error ends the service): the budget starts now
        assert self.started is not None
        return self.started + self.budget_s - time.monotonic()

    def elapsed(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started

    def close(self) -> None:
        self._watch.cancel()


@dataclass(slots=True)
class _TraceWork:
    """A ready trace being scored: its records are released when its runs (and dead letters) are done."""

    trace: BufferedTrace[TopicPartition]
    runs_left: int
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
        limits: RuntimeLimits | None = None,
        consumer_options: dict[str, Any] | None = None,
        producer_options: dict[str, Any] | None = None,
        readiness_checks: Sequence[Callable[[], str | None]] = (),
        agent_labels: AgentLabels | None = None,
    ) -> None:
        if not scorers:
            raise ValueError("the service needs at least one scorer")
        limits = limits or RuntimeLimits()
        self._bootstrap = bootstrap_servers
        self._group_id = group_id
        self._ingest = ingest
        self._topics = list(topics)
        self._scorers = tuple(scorers)
        # Trace-scope scorers map nothing per record: their runs are assembled when a trace is ready.
        self._selections = tuple(None if s.scope == "trace" else s.selection for s in scorers)
        self._trace_scorers = tuple(s for s in scorers if s.scope == "trace")
        self._traces: TraceBuffer[TopicPartition] | None = limits.trace_buffer.buffer() if self._trace_scorers else None
        self._trace_work: dict[tuple[TopicPartition, bytes], _TraceWork] = {}
        self._publisher: DeadLetterPublisher | None = None
        self._last_eviction_warning = -_EVICTION_WARNING_EVERY_S
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
        self._waiting = ""  # why the start-up waits (the broker), for /readyz
        self._joined = False
        # Where this process's /metrics is served, named in the line that says the group was joined.
        self.metrics_url: str | None = None
        self.stopped = asyncio.Event()
        # What the service is doing, for a watchdog's overrun line (read from another thread).
        self.stop_phase = "not started"
        self._given_up: list[str] = []  # what the stop could not do in time

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: the group is joined, every exporter confirms its exports (a sink whose last
        ``UNHEALTHY_FLUSHES`` flushes failed is down: its broker or receiver is unreachable or refusing), and
        no readiness check reports a problem (a judge holding runs: nothing past them can commit)."""
        if not self.ready:
            return False, self._waiting or "joining the consumer group"
        down = self._checkpoints.sinks_down() if self._checkpoints is not None else []
        problems = [problem for check in self._readiness_checks if (problem := check())]
        if down:
            problems.insert(0, f"exporter not confirming exports: {', '.join(down)}")
        if problems:
            return False, "; ".join(problems)
        return True, "ready"

    # -- lifecycle ------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then drain, flush, commit and leave the group, returning within
        ``shutdown_timeout_s`` of the stop whatever the group or the broker is doing."""
        clock = _StopClock(stop, self._limits.shutdown_timeout_s)
        reserve = closing_reserve(self._limits.shutdown_timeout_s)
        self._given_up = []
        self.stop_phase = "starting"
        producer: AIOKafkaProducer | None = None
        consumer: AIOKafkaConsumer | None = None
        committer: asyncio.Task[None] | None = None
        ticker: asyncio.Task[None] | None = None
        try:
            clients = await self._start_clients(stop)
            if clients is None:
                return  # stopped while waiting for the broker: nothing was consumed
            producer, consumer = clients
            self._consumer = consumer
            self._checkpoints = Checkpoint(self._tracker, self._sinks, consumer, self._observer)
            publisher = DeadLetterPublisher(producer, self._ingest.dead_letter_topic, encoding=self._ingest.encoding)
            self._publisher = publisher
            consumer.subscribe(self._topics, listener=_Rebalance(self))
            committer = asyncio.create_task(self._commit_loop(stop), name="checkpoints")
            self.stop_phase = "consuming"
            if self._traces is not None:
                ticker = asyncio.create_task(self._trace_loop(self._traces, stop), name="trace readiness")
            await self._intake_until(stop, consumer, publisher)
            if ticker is not None:
                await _cancel(ticker)
            await self._drain(clock.left() - reserve)
            await _cancel(committer)  # it may hold the checkpoint lock, waiting on a commit that hangs
            await self._final_checkpoint(min(self._limits.flush_timeout_s, clock.left() - reserve / 2))
        finally:
            self.ready = False
            for background in (committer, ticker):
                if background is not None:
                    await _cancel(background)
            self._abandon_runs()
            await self._close(consumer, producer, clock)
            clock.close()
            self._log_stop(clock)
            self.stopped.set()

    async def _start_clients(self, stop: asyncio.Event) -> tuple[AIOKafkaProducer, AIOKafkaConsumer] | None:
        """Start the sinks, the dead-letter producer and the consumer, retrying while the broker cannot be
        reached (up to ``startup_timeout_s``, then :class:`StartupFailure`); None when the stop came first."""
        wait = BrokerWait(self._bootstrap, self._limits.startup_timeout_s)
        # Before a first failure (a connect that hangs on a host dropping packets), /readyz says so already.
        self._waiting = f"connecting to the Kafka broker at {self._bootstrap}"
        stopped = asyncio.ensure_future(stop.wait())
        try:
            with quiet_connect_errors() as connect_errors:
                while True:
                    self.stop_phase = f"starting: connecting to the Kafka broker at {self._bootstrap}"
                    step = ["starting"]
                    attempt = asyncio.ensure_future(self._start_attempt(step))
                    await asyncio.wait(
                        {attempt, stopped},
                        timeout=max(wait.left(), _LAST_ATTEMPT_S),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if not attempt.done():
                        await _cancel(attempt, timeout_s=5.0)  # its own cleanup stops what it started
                        if stopped.done():
                            return None
                        raise wait.give_up(f"{step[0]} did not finish")
                    try:
                        clients = attempt.result()
                    except KafkaConnectionError as exc:
                        detail = connect_errors.last or str(exc)
                        connect_errors.last = None
                        delay = wait.failed(f"{step[0]}: cannot connect ({detail})")
                    except KafkaError as exc:  # the broker answered and refused (security settings, versions)
                        raise StartupFailure(
                            f"the Kafka broker at {self._bootstrap} refused the sidecar ({step[0]}: "
                            f"{type(exc).__name__}: {exc}): check kafka.security and kafka.bootstrap_servers",
                            EXIT_UNREACHABLE,
                        ) from exc
                    else:
                        if wait.attempts:
                            log.info(
                                "the Kafka broker at %s answered after %d failed attempts",
                                self._bootstrap,
                                wait.attempts,
                            )
                        return clients
                    self._waiting = wait.reason
                    await asyncio.wait({stopped}, timeout=delay)
                    if stopped.done():
                        return None
        finally:
            stopped.cancel()
            self._waiting = ""

    async def _start_attempt(self, step: list[str]) -> tuple[AIOKafkaProducer, AIOKafkaConsumer]:
        """One start of every client that needs the broker; a failure stops the clients it made, so a retry
        starts afresh. Sinks that started stay started: a sink's ``start`` is a no-op once it succeeded."""
        producer: AIOKafkaProducer | None = None
        consumer: AIOKafkaConsumer | None = None
        try:
            for sink in self._sinks:
                step[0] = f"starting exporter {sink.name}"
                await sink.start()
            step[0] = "starting the dead-letter producer"
            producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap, acks="all", **self._producer_options)
            await producer.start()
            step[0] = "starting the consumer"
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                group_id=self._group_id,
                **{"auto_offset_reset": "earliest", **self._consumer_options, "enable_auto_commit": False},
            )
            await consumer.start()
        except BaseException:
            for client in (consumer, producer):
                if client is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(client.stop(), 5.0)
            raise
        return producer, consumer

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
            processed = process_record_multi(
                value, self._ingest, self._selections, group_traces=self._traces is not None, offset=record.offset
            )
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
        # No await from here on: a trace this record joins cannot be released before the record is pending.
        joined = self._buffer_traces(tp, record.offset, processed.traces) if processed.traces else 0
        if not work and not joined:
            self._tracker.done(tp, record.offset)
            return
        pending = self._pending[(tp, record.offset)] = _Pending(runs_left=len(work) + joined, size=size)
        self._buffered_bytes += size
        done = functools.partial(self._run_done, tp, record.offset, pending)
        for configured, request in work:
            pending.tasks.append(self._start_run(configured, request, done))
        self._update_capacity()

    def _start_run(
        self, configured: ConfiguredScorer, request: ScorerRunRequest, done: Callable[[], None]
    ) -> asyncio.Task[None]:
        task = asyncio.create_task(self._score(configured, request, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._runs_in_flight += 1
        return task

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
        over = (
            self._runs_in_flight >= self._limits.max_in_flight_runs
            or self._buffered_bytes >= self._limits.max_buffered_bytes
            or (self._traces is not None and self._limits.trace_buffer.full(self._traces))
        )
        if over:
            self._capacity.clear()
        else:
            self._capacity.set()
        self._observer.runs_in_flight(self._runs_in_flight)

    # -- runs -----------------------------------------------------------------------------------------
    async def _score(self, configured: ConfiguredScorer, request: ScorerRunRequest, done: Callable[[], None]) -> None:
        scorer = configured.scorer
        agent = self._agent_labels.label(request.target.agent_name)
        # A whole-trace run's retrieved documents: the context scorers read them from request_context.
        context = {REQUEST_CONTEXT_KEY: list(request.context)} if request.context else None
        try:
            attempt = await attempt_scorer(
                scorer, request, timeout_s=self._limits.run_timeout_s, request_context=context
            )
            shed_reason = attempt.shed_reason
            if shed_reason is not None:  # over a judge's spend cap with the "shed" policy: skipped, counted
                self._observer.runs_skipped(scorer.id, agent, "shed", 1, judge=configured.judge_model or "unknown")
            else:
                scored = attempt.to_scored_run(request, scorer, agent, needs=configured.needs)
                self._observer.run_finished(scored)
                for sink in self._sinks:
                    try:
                        await sink.submit(scored)
                    except Exception:
                        log.exception("sink %s rejected score %s", sink.name, scored.score_id)
        finally:
            done()

    def _run_done(self, tp: TopicPartition, offset: int, pending: _Pending) -> None:
        self._runs_in_flight -= 1
        self._record_part_done(tp, offset, pending)
        self._update_capacity()

    def _record_part_done(self, tp: TopicPartition, offset: int, pending: _Pending) -> None:
        pending.runs_left -= 1
        # A run that outlived a revoke belongs to an older assignment: it must not complete the record
        # the current assignment holds at the same offset.
        if pending.runs_left == 0 and self._pending.get((tp, offset)) is pending:
            del self._pending[(tp, offset)]
            self._buffered_bytes -= pending.size
            self._tracker.done(tp, offset)

    # -- whole traces (scope: trace) ----------------------------------------------------------------------
    def _buffer_traces(self, tp: TopicPartition, offset: int, traces: Mapping[bytes, list[TraceSpan]]) -> int:
        """Buffer a record's spans by trace; returns how many buffered traces the record now holds back."""
        buffer = self._traces
        assert buffer is not None
        joined = late = 0
        for trace_id, spans in traces.items():
            if not self._trace_wanted(trace_id):
                self._count_unwanted(spans)
                continue
            if buffer.add(tp, offset, trace_id, spans) == "late":
                late += len(spans)
            else:
                joined += 1
        if late:
            # A span of a trace already scored: its score stands (it is not scored again), and this says how
            # often traces are cut short. A rising count means idle_s is shorter than the agents' pauses.
            for configured in self._trace_scorers:
                self._observer.late_spans(configured.scorer.id, late)
        self._observer.trace_buffer(len(buffer), buffer.bytes)
        return joined

    def _count_unwanted(self, spans: list[TraceSpan]) -> None:
        # A trace that no trace-scope scorer samples in is never buffered, so never assembled: its agent spans
        # are counted here as span scope counts them (sampled out, or filtered by service before that).
        for item in spans:
            kind, internal = classify(item.span.attributes)
            if kind is None or internal:
                continue
            for configured in self._trace_scorers:
                if kind not in configured.selection.kinds:
                    continue
                verdict = admit(item.span, own_span=False, service=item.service, selection=configured.selection).verdict
                if verdict == "sampled_out" or verdict == "filtered":
                    self._observer.runs_skipped(configured.scorer.id, "unknown", verdict, 1)

    def _trace_wanted(self, trace_id: bytes) -> bool:
        # Sampling is by trace id: a trace every trace-scope scorer samples out is not buffered at all.
        for configured in self._trace_scorers:
            rate = configured.selection.sample_rate
            if rate >= 1.0 or (rate > 0.0 and sample_score(trace_id) < rate):
                return True
        return False

    async def _trace_loop(self, buffer: TraceBuffer[TopicPartition], stop: asyncio.Event) -> None:
        """Start the runs of the traces that are ready, at a steady pace (a trace's readiness is a matter of
        time passing, not of records arriving). Traces still buffered at shutdown are left uncommitted: the
        next owner of their partitions reads them again."""
        tick = min(_TRACE_TICK_S, buffer.idle_s / 4)
        stuck_since: float | None = None
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), tick)
            if stop.is_set():
                break
            try:
                # Ready traces start while runs may: the others wait in the buffer (still bounded), not as tasks.
                room = self._limits.max_in_flight_runs - self._runs_in_flight
                ready = buffer.due(limit=room) if room > 0 else []
                if ready or room <= 0 or not self._limits.trace_buffer.full(buffer):
                    stuck_since = None
                elif stuck_since is None:
                    stuck_since = time.monotonic()
                elif time.monotonic() - stuck_since >= buffer.idle_s:
                    ready = self._evict_oldest(buffer)
                    stuck_since = None  # intake resumes: give the next stall idle_s again
                started = time.perf_counter()
                for trace, reason in ready:
                    self._start_trace(trace, reason)
                    if time.perf_counter() - started >= _INGEST_SLICE_S:
                        await asyncio.sleep(0)  # assembly is CPU work, as ingest is
                        started = time.perf_counter()
            except Exception:  # a bug: the traces taken out are redelivered after a restart
                log.exception("starting the runs of ready traces failed")
            self._observer.trace_buffer(len(buffer), buffer.bytes)
            self._update_capacity()

    def _evict_oldest(
        self, buffer: TraceBuffer[TopicPartition]
    ) -> list[tuple[BufferedTrace[TopicPartition], ReadyReason]]:
        # Full, intake paused, and no trace got ready for idle_s: every buffered trace waits for spans behind
        # the pause, so waiting only leads to max_wait_s. Score the oldest now, from what arrived.
        # An agent span is exported when it ends, after its children: a trace holding one has its run whole.
        oldest = buffer.take_oldest(prefer=_holds_agent_span)
        if oldest is None:
            return []
        now = time.monotonic()
        if now - self._last_eviction_warning >= _EVICTION_WARNING_EVERY_S:
            self._last_eviction_warning = now
            limits = self._limits.trace_buffer
            log.warning(
                "trace buffer full (%d traces, %.0f MiB of spans; runtime.trace_buffer.max_traces=%d, "
                "max_bytes=%d) and no trace done: scoring the oldest incomplete (ready reason evicted). More "
                "traces are open at once than the buffer holds: raise max_traces/max_bytes above the trace "
                "rate × the longest trace duration",
                len(buffer) + 1,
                buffer.bytes / 2**20,
                limits.max_traces,
                limits.max_bytes,
            )
        return [(oldest, "evicted")]

    def _start_trace(self, trace: BufferedTrace[TopicPartition], reason: ReadyReason) -> None:
        tp = trace.partition
        self._observer.trace_ready(reason, time.monotonic() - trace.first_seen)
        if reason != "root_idle":
            log.debug("trace %s ready (%s) with %d spans", trace.trace_id.hex(), reason, len(trace.spans))
        runs: list[tuple[ConfiguredScorer, ScorerRunRequest]] = []
        rejects: dict[tuple[str, str], SpanReject] = {}
        skipped: dict[str, int] = {}
        complete = reason == "root_idle" and not trace.cut_short
        assembled: dict[Selection, MappingResult] = {}  # scorers with the same targets share one assembly
        spans: list[TraceSpan] | None = None
        for configured in self._trace_scorers:
            result = assembled.get(configured.selection)
            if result is None:
                result = assembled[configured.selection] = trace_runs(
                    spans if spans is not None else (spans := trace.decoded()),
                    configured.selection,
                    ready_reason=reason,
                    complete=complete,
                )
            runs.extend((configured, request) for request in result.runs)
            for reject in result.rejects:
                rejects.setdefault((reject.span_id, reject.reason), reject)
            scorer_id = configured.scorer.id
            if result.skipped.filtered:
                self._observer.runs_skipped(scorer_id, "unknown", "filtered", result.skipped.filtered)
            if result.skipped.sampled_out:
                self._observer.runs_skipped(scorer_id, "unknown", "sampled_out", result.skipped.sampled_out)
            for skip in ("internal", "no_content"):
                skipped[skip] = max(skipped.get(skip, 0), getattr(result.skipped, skip))
        for skip, n in skipped.items():
            if n:
                self._observer.spans_skipped(skip, n)  # type: ignore[arg-type]
        if not runs and self._traces is not None:
            self._traces.forget(trace)  # no agent span here yet: spans after this start the trace anew
        work = _TraceWork(trace, runs_left=len(runs) + (1 if rejects else 0))
        if work.runs_left == 0:
            self._release_records(trace)
            return
        self._trace_work[(tp, trace.trace_id)] = work
        done = functools.partial(self._trace_part_done, work)
        if rejects:
            letters = self._set_aside(trace, list(rejects.values()))
            task = asyncio.create_task(letters)
            work.tasks.append(task)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda t: None if t.cancelled() else done())
        for configured, request in runs:
            work.tasks.append(self._start_run(configured, request, functools.partial(self._trace_run_done, work)))
        self._update_capacity()

    async def _set_aside(self, trace: BufferedTrace[TopicPartition], rejects: list[SpanReject]) -> None:
        """Dead letters for the agent spans of a ready trace that cannot become runs: each carries the span alone
        (OTLP protobuf), with the record that brought it as its source."""
        publisher = self._publisher
        assert publisher is not None
        tp = trace.partition
        by_id = {item.span_id.hex(): item for item in trace.spans}
        for reject in rejects:
            item = by_id.get(reject.span_id)
            letter = DeadLetter(
                DeadLetterReason(reject.reason), reject.detail, trace_id=reject.trace_id, span_id=reject.span_id
            )
            value = _lone_span(item.decode()) if item is not None else b""
            offset = item.offset if item is not None else -1
            source = RecordSource(topic=tp.topic, partition=tp.partition, offset=offset, value=value, key=None)
            # Until delivered, the trace's records stay uncommitted: retried, not given up.
            while True:
                try:
                    await publisher.publish(source, [letter], encoding="otlp_proto")
                    break
                except Exception as exc:
                    log.warning(
                        "dead letter for span %s (%s) not delivered to %s: %s; its trace's records stay "
                        "uncommitted, retrying in %ss",
                        reject.span_id,
                        letter.reason.value,
                        self._ingest.dead_letter_topic,
                        exc,
                        _DEAD_LETTER_RETRY_S,
                    )
                    await asyncio.sleep(_DEAD_LETTER_RETRY_S)
            self._observer.dead_lettered(letter.reason.value)

    def _trace_run_done(self, work: _TraceWork) -> None:
        self._runs_in_flight -= 1
        self._trace_part_done(work)
        self._update_capacity()

    def _trace_part_done(self, work: _TraceWork) -> None:
        work.runs_left -= 1
        trace = work.trace
        key = (trace.partition, trace.trace_id)
        if work.runs_left == 0 and self._trace_work.get(key) is work:
            del self._trace_work[key]
            self._release_records(trace)

    def _release_records(self, trace: BufferedTrace[TopicPartition]) -> None:
        tp = trace.partition
        for offset in trace.records:
            pending = self._pending.get((tp, offset))
            if pending is not None:
                self._record_part_done(tp, offset, pending)

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
        if not self._tasks:
            return
        self.stop_phase = f"draining {len(self._tasks)} runs"
        log.info("draining %d runs (up to %.1fs)", len(self._tasks), max(timeout_s, 0.0))
        if timeout_s > 0:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        left = sum(1 for task in self._tasks if not task.done())
        if left:
            self._given_up.append(
                f"{left} runs were still in flight after the drain ({max(timeout_s, 0.0):.1f} s; waiting for a "
                "judge or an exporter, or slow): abandoned, their records are not committed"
            )

    def _abandon_runs(self) -> None:
        """Cancel the runs still in flight (held by a judge, or slow). Their records are forgotten first, as
        on a revoke, so that a cancelled run never completes its record: a checkpoint that still happens
        (a rebalance while the consumer leaves) cannot commit it."""
        for key in list(self._pending):
            pending = self._pending.pop(key)
            self._buffered_bytes -= pending.size
            for task in pending.tasks:
                task.cancel()
        for work in self._trace_work.values():
            for task in work.tasks:
                task.cancel()
        self._trace_work.clear()
        for task in list(self._tasks):
            task.cancel()

    async def _intake_until(
        self, stop: asyncio.Event, consumer: AIOKafkaConsumer, publisher: DeadLetterPublisher
    ) -> None:
        """Run intake until ``stop``; intake that does not notice the stop within ``_INTAKE_STOP_S`` (waiting
        on a sink with no room, or on the broker for a dead letter) is cancelled."""
        intake = asyncio.create_task(self._consume(consumer, publisher, stop), name="intake")
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({intake, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not intake.done():
                await asyncio.wait({intake}, timeout=_INTAKE_STOP_S)
        finally:
            stopped.cancel()
            abandoned = not intake.done()
            if abandoned:
                await _cancel(intake)
        if abandoned:
            self._given_up.append(f"intake did not stop within {_INTAKE_STOP_S:g} s and was cancelled")
            return
        intake.result()  # raises what ended intake, if it failed

    async def _final_checkpoint(self, timeout_s: float) -> None:
        self.stop_phase = "final checkpoint: flushing the exporters and committing offsets"
        if timeout_s <= 0:
            self._given_up.append("no time was left for the final commit")
            return
        try:
            async with asyncio.timeout(timeout_s):
                committed = await self._checkpoint(timeout_s=timeout_s)
        except TimeoutError:
            self._given_up.append(f"the final commit did not finish within {timeout_s:.1f} s")
            return
        except Exception as exc:  # the commit of a consumer kicked out by a rebalance, a broker error
            self._given_up.append(f"the final commit failed ({type(exc).__name__}: {exc})")
            return
        if not committed:
            self._given_up.append("the final commit was not made (an exporter did not confirm, or the commit failed)")

    async def _close(
        self, consumer: AIOKafkaConsumer | None, producer: AIOKafkaProducer | None, clock: _StopClock
    ) -> None:
        """Leave the group, stop the dead-letter producer and close the sinks, side by side, within what is
        left of the budget; what is still running then is cancelled (and named in the stop's summary).
        ``None``: that client never started (the broker was not reached)."""
        steps: dict[asyncio.Future[None], str] = {}
        if consumer is not None:
            steps[asyncio.ensure_future(consumer.stop())] = "leaving the consumer group"
        if producer is not None:
            steps[asyncio.ensure_future(producer.stop())] = "stopping the dead-letter producer"
        for sink in self._sinks:
            steps[asyncio.ensure_future(sink.close())] = f"closing exporter {sink.name}"
        self.stop_phase = "closing: " + ", ".join(steps.values())
        _, pending = await asyncio.wait(steps, timeout=max(clock.left(), 0.05))
        for step in steps:
            if step.done() and not step.cancelled() and step.exception() is not None:
                log.warning("stop: %s failed: %r", steps[step], step.exception())
        if pending:
            waited = clock.elapsed()
            for step in pending:
                self._given_up.append(f"{steps[step]} did not finish within the budget ({waited:.1f} s)")
                step.cancel()
            await asyncio.wait(pending, timeout=0.5)

    def _log_stop(self, clock: _StopClock) -> None:
        self.stop_phase = "stopped"
        took, budget = clock.elapsed(), clock.budget_s
        if not clock.asked and not self._given_up:
            return  # an error ended the service: it says so itself
        if not self._given_up:
            if self._consumer is None:
                log.info("stop: done in %.1f s while waiting for the Kafka broker; nothing was consumed", took)
            else:
                log.info("stop: done in %.1f s of %g s: drained, committed, consumer closed", took, budget)
            return
        for item in self._given_up:
            log.warning("stop: %s", item)
        left_group = not any(item.startswith("leaving the consumer group") for item in self._given_up)
        log.warning(
            "stop: done in %.1f s of %g s (runtime.shutdown_timeout_s) with work given up: records after the "
            "last commit are redelivered%s",
            took,
            budget,
            ""
            if left_group
            else "; this member did not leave its group (the group is rebalancing or the broker does not "
            "answer): the broker reassigns its partitions after kafka.session_timeout_ms",
        )

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
        if self._traces is not None:
            self._traces.drop_partitions(lost)
            for trace_key in [k for k in self._trace_work if k[0] in lost]:
                for task in self._trace_work.pop(trace_key).tasks:
                    task.cancel()
            self._observer.trace_buffer(len(self._traces), self._traces.bytes)
        for tp in mine:
            self._assigned.discard(tp)
            self._observer.consumer_lag(tp.topic, tp.partition, None)
        if abandoned:
            log.info("revoked %d partitions; %d records left to their new owner", len(mine), abandoned)
        self._update_capacity()

    def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        self._assigned.update(assigned)
        self._log_assignment()
        if self._paused and self._consumer is not None:
            self._consumer.pause(*assigned)

    def _log_assignment(self) -> None:
        # The first line says where the process stands (group, topics, partitions, metrics); later ones
        # follow the rebalances of a group whose members come and go.
        owned = _partitions(self._assigned)
        if self._joined:
            log.info("consumer group %s rebalanced: %s", self._group_id, owned)
            return
        self._joined = True
        metrics = f"; metrics on {self.metrics_url}" if self.metrics_url else ""
        log.info("joined consumer group %s on topics %s: %s%s", self._group_id, ",".join(self._topics), owned, metrics)


_LISTED_PARTITIONS = 12  # more are counted, not listed


def _partitions(owned: set[TopicPartition]) -> str:
    names = [f"{tp.topic}-{tp.partition}" for tp in sorted(owned, key=lambda tp: (tp.topic, tp.partition))]
    if not names:
        return "0 partitions assigned (more members in the group than partitions: this one idles)"
    listed = ", ".join(names[:_LISTED_PARTITIONS]) + (", …" if len(names) > _LISTED_PARTITIONS else "")
    return f"{len(names)} partitions assigned ({listed})"


async def _cancel(task: asyncio.Future[Any], timeout_s: float = 1.0) -> None:
    """Cancel ``task`` and wait (bounded) for it to end; its outcome is dropped, the caller's own
    cancellation is not."""
    task.cancel()
    await asyncio.wait({task}, timeout=timeout_s)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: a failure while cancelling is not worth a "never retrieved" warning


def _lone_span(item: TraceSpan) -> bytes:
    """An export request holding one span and its resource's service name."""
    resource = Resource()
    if item.service is not None:
        resource.attributes.append(KeyValue(key=names.SERVICE_NAME, value=AnyValue(string_value=item.service)))
    scope = ScopeSpans()
    scope.spans.append(item.span)
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope])])
    data: bytes = request.SerializeToString()
    return data


def _holds_agent_span(trace: BufferedTrace[TopicPartition]) -> bool:
    return any(classify(item.span.attributes)[0] == "agent" for item in trace.decoded())
