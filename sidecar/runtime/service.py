"""The scoring service: the parts of the engine wired on one asyncio loop.

Records come from a :class:`~sidecar.runtime.sources.RecordSource` (a group subscription for ``run``) through
the :class:`~sidecar.runtime.intake.Intake` to the :class:`~sidecar.runtime.records.RecordHandler`, which starts
span runs on the :class:`~sidecar.runtime.dispatch.RunDispatcher` and hands spans to the whole-trace stage
(:class:`~sidecar.runtime.trace_scope.TraceScope`), which hands the turns of conversations to stage 1; stage 2
(:class:`~sidecar.runtime.sessions.SessionStage`, ``scope: session``) is a second intake over the internal topic
in its own group, on the same dispatcher. The :class:`~sidecar.runtime.ledger.RecordLedger` holds each
record until its work is exported, and the :class:`~sidecar.runtime.checkpoint.Checkpoint` commits behind it:
committable offsets first, then every sink flushed, then the commit (at-least-once; score ids are deterministic,
so redelivery is harmless). The stop is bounded (:mod:`sidecar.runtime.stopping`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from sidecar.core import Flushable, Sink
from sidecar.core.observers import ServiceObserver
from sidecar.ingest.deadletter import DEFAULT_MAX_REQUEST_SIZE
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.agent_labels import AgentLabels
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.checkpoint import Checkpoint
from sidecar.runtime.clients import BrokerClients, ClientOptions, start_clients
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.conversations import Conversations
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.intake import INTAKE_STOP_S, Intake
from sidecar.runtime.ledger import RecordLedger
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.records import RecordHandler
from sidecar.runtime.sessions import SessionLimits, SessionStage, TurnPublishing, TurnTopic
from sidecar.runtime.sources import GroupSubscription, RecordSource
from sidecar.runtime.stopping import StopClock, StopReport, cancel_and_wait, close_side_by_side, closing_reserve
from sidecar.runtime.trace_scope import TraceScope

__all__ = ["ConfiguredScorer", "ScoringService"]

log = logging.getLogger(__name__)

# While the last runs of an exhausted source finish, how often the wait looks at the stop event.
_FINISH_POLL_S = 0.5
# A turn's agent span ends before the Collector writes its trace's last record (batching): what a window waits for
# past its last turn's end + idle_s, beyond what stage 1 has read.
_TURN_GRACE_S = 0.5


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
        publishers: Sequence[Flushable] = (),
        observer: ServiceObserver | None = None,
        limits: RuntimeLimits | None = None,
        consumer_options: dict[str, Any] | None = None,
        producer_options: dict[str, Any] | None = None,
        readiness_checks: Sequence[Callable[[], str | None]] = (),
        agent_labels: AgentLabels | None = None,
        source: RecordSource | None = None,
        key_sampling: bool = True,
        sessions: SessionLimits | None = None,
        turn_topic: TurnTopic | None = None,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
    ) -> None:
        if not scorers:
            raise ValueError("the service needs at least one scorer")
        self._limits = limits = limits or RuntimeLimits()
        self._clients = ClientOptions(
            bootstrap_servers,
            group_id,
            consumer_options or {},
            producer_options or {},
            limits.startup_timeout_s,
            max_request_size,
        )
        self._ingest = ingest
        self._key_sampling = key_sampling
        self._source: RecordSource = source or GroupSubscription(topics)
        self._scorers = tuple(scorers)
        self._sinks = tuple(sinks)
        self._observer = observer = observer or ServiceObserver()
        self._readiness_checks = tuple(readiness_checks)
        self._ledger: RecordLedger[TopicPartition] = RecordLedger()
        self._dispatcher = RunDispatcher(
            sinks, observer, agent_labels or AgentLabels(observer=observer), run_timeout_s=limits.run_timeout_s
        )
        self._capacity = Capacity(observer, lambda: self._dispatcher.in_flight)
        self._capacity.bound(lambda: self._dispatcher.in_flight >= limits.max_in_flight_runs)
        self._capacity.bound(lambda: self._ledger.held_bytes >= limits.max_buffered_bytes)
        self._dispatcher.on_change = self._capacity.update
        trace_scorers = [s for s in scorers if s.scope == "trace"]
        session_scorers = [s for s in scorers if s.scope == "session"]
        turns: TurnPublishing | None = None
        self._sessions: Conversations | None = None
        self._turn_topic = turn_topic if session_scorers else None
        if session_scorers:
            if sessions is None or turn_topic is None:
                raise ValueError("scope: session needs the sessions block and the internal topic's publisher")
            turns = TurnPublishing(session_scorers, sessions, turn_topic, observer)
            stage = SessionStage(
                session_scorers, sessions, dispatcher=self._dispatcher, topic=turn_topic, observer=observer,
                max_in_flight_runs=limits.max_in_flight_runs, grace_s=_TURN_GRACE_S,
            )  # fmt: skip
            self._sessions = Conversations(stage, limits=limits, dispatcher=self._dispatcher, observer=observer)
        # What the checkpoint flushes before it commits, started and closed with the sinks: the sinks, then what
        # they hand on (score dead letters), and the internal topic's turns.
        self._checkpointed: tuple[Flushable, ...] = (*self._sinks, *publishers, *filter(None, [self._turn_topic]))
        self._traces = (
            TraceScope(
                trace_scorers,
                limits.trace_buffer,
                ledger=self._ledger,
                dispatcher=self._dispatcher,
                capacity=self._capacity,
                observer=observer,
                max_in_flight_runs=limits.max_in_flight_runs,
                dead_letter_topic=ingest.dead_letter_topic,
                span_attributes=ingest.span_attributes,
                turns=turns,
                max_runs=limits.max_runs_per_record,
            )
            if trace_scorers or turns is not None
            else None
        )
        self._intake: Intake | None = None
        self._running = False
        self._checkpoints: Checkpoint[TopicPartition] | None = None  # once the consumer exists
        self._waiting = ""  # why the start-up waits (the broker), for /readyz
        # Where this process's /metrics is served, named in the line that says the group was joined.
        self.metrics_url: str | None = None
        self.stopped = asyncio.Event()
        # What the service is doing, for a watchdog's overrun line (read from another thread).
        self.stop_phase = "not started"

    @property
    def ready(self) -> bool:
        """The consumer joined its group and polled."""
        sessions = self._sessions is None or self._sessions.ready
        return self._running and self._intake is not None and self._intake.ready and sessions

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

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set (or a bounded source is exhausted), then drain, flush, commit and leave
        the group, returning within ``shutdown_timeout_s`` of the stop whatever the group or the broker does."""
        limits = self._limits
        clock = StopClock(stop, limits.shutdown_timeout_s)
        reserve = closing_reserve(limits.shutdown_timeout_s)
        report = StopReport()
        self.stop_phase = "starting"
        self._running = True
        clients: BrokerClients | None = None
        background: list[asyncio.Task[None]] = []
        sessions = self._sessions
        try:
            clients = await start_clients(
                self._clients, self._checkpointed, stop, waiting=self._set_waiting, phase=self._set_phase
            )
            if clients is None:
                return  # stopped while waiting for the broker: nothing was consumed
            consumer = clients.consumer
            if sessions is not None:
                self.stop_phase = "starting: the conversations' consumer"
                await sessions.start(self._clients)
            confirmations = (sessions.stage.confirmation,) if sessions is not None else ()
            self._checkpoints = Checkpoint(
                self._ledger.offsets, self._checkpointed, consumer, self._observer, confirmations=confirmations
            )
            publisher = DeadLetterPublisher(
                clients.producer,
                self._ingest.dead_letter_topic,
                encoding=self._ingest.encoding,
                max_request_size=self._clients.max_request_size,
                observer=self._observer,
            )
            handler = RecordHandler(
                self._ingest,
                self._scorers,
                ledger=self._ledger,
                dispatcher=self._dispatcher,
                capacity=self._capacity,
                observer=self._observer,
                publisher=publisher,
                traces=self._traces,
                key_sampling=self._key_sampling,
                max_runs=self._limits.max_runs_per_record,
            )
            intake = self._intake = self._new_intake(consumer, handler)
            if sessions is not None:
                sessions.follow(intake, self._traces)
            await intake.attach()
            background.append(asyncio.create_task(self._commit_loop(stop), name="checkpoints"))
            self.stop_phase = "consuming"
            if self._traces is not None:
                self._traces.publisher = publisher
                background.append(asyncio.create_task(self._traces.run(stop), name="trace readiness"))
            if sessions is not None:
                sessions.run(stop)
            ended = await intake.run_until(stop)
            if ended == "abandoned":
                report.give_up(f"intake did not stop within {INTAKE_STOP_S:g} s and was cancelled")
            for task in background[1:]:
                await cancel_and_wait(task)
            if sessions is not None:
                await sessions.stop(report)
            if ended == "exhausted":
                await self._finish_source(stop)
            await self._drain(clock.left() - reserve, report)
            await cancel_and_wait(background[0])  # it may hold the checkpoint lock, waiting on a commit that hangs
            await self._final_checkpoint(min(limits.flush_timeout_s, clock.left() - reserve / 2), report)
            if sessions is not None:
                await sessions.finish(clock.left() - reserve / 2, report)
        finally:
            self._running = False
            for task in background:
                await cancel_and_wait(task)
            if sessions is not None:
                await sessions.abandon()
            self._abandon()
            await self._close(clients, clock, report)
            clock.close()
            self.stop_phase = "stopped"
            report.log(clock, consumed=clients is not None)
            self.stopped.set()

    def _new_intake(self, consumer: AIOKafkaConsumer, handler: RecordHandler) -> Intake:
        limits = self._limits
        return Intake(
            consumer,
            self._source,
            handler.handle,
            capacity=self._capacity,
            observer=self._observer,
            group_id=self._clients.group_id,
            poll_timeout_ms=limits.poll_timeout_ms,
            max_poll_records=limits.max_poll_records,
            pause_grace_s=limits.pause_grace_s,
            on_revoked=self._on_revoked,
            runs_in_flight=lambda: self._dispatcher.in_flight,
            metrics_url=self.metrics_url,
        )

    def _set_waiting(self, reason: str) -> None:
        self._waiting = reason

    def _set_phase(self, phase: str) -> None:
        self.stop_phase = phase

    # -- commits -------------------------------------------------------------------------------------------
    async def _commit_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._limits.commit_interval_s)
            try:
                await self._checkpoint(timeout_s=self._limits.flush_timeout_s)
                if self._intake is not None:
                    self._intake.report_lag(self._ledger.offsets)
            except Exception:
                log.exception("checkpoint failed; offsets stay where they were")

    async def _checkpoint(self, *, timeout_s: float, partitions: Sequence[TopicPartition] | None = None) -> bool:
        if self._checkpoints is None or self._intake is None:
            return False
        owned = list(partitions if partitions is not None else self._intake.owned)
        return await self._checkpoints.commit(owned, timeout_s=timeout_s)

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        # Commit what is done for the partitions we lose, within a budget; abandon the rest to the new owner
        # (its runs are cancelled, held ones included: their records were not committed, so they are redone).
        budget = self._limits.revoke_timeout_s
        if revoked:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._checkpoint(timeout_s=budget, partitions=revoked), budget)
        lost = set(revoked)
        abandoned = self._ledger.forget(lost)
        if self._traces is not None:
            self._traces.drop_partitions(lost)
        if abandoned:
            log.info("revoked %d partitions; %d records left to their new owner", len(revoked), abandoned)
        self._capacity.update()

    # -- the end of a bounded source ----------------------------------------------------------------------
    async def _finish_source(self, stop: asyncio.Event) -> None:
        """A bounded source read to its end (a backfill's window): nothing more will come, so the traces still
        buffered are scored now, and every run is waited for (only a stop cuts the wait short: the stop budget
        is for stopping, not for the window's last runs), before the final checkpoint."""
        self.stop_phase = "source read to its end: finishing its runs"
        if self._traces is not None:
            started = await self._traces.score_the_rest(stop)
            if started:
                log.info(
                    "source read to its end: scoring the %d traces still buffered (ready reason window_end)", started
                )
        while self._dispatcher.pending and not stop.is_set():
            await self._dispatcher.drain(_FINISH_POLL_S)

    def done_offsets(self) -> dict[TopicPartition, int]:
        """Per partition read so far, the offset below which every record is done (scored and handed to the
        sinks, not yet necessarily committed): a bounded source's progress."""
        offsets = self._ledger.offsets
        return {tp: position for tp in offsets.partitions if (position := offsets.position(tp)) is not None}

    # -- the stop ------------------------------------------------------------------------------------------
    async def _drain(self, timeout_s: float, report: StopReport) -> None:
        pending = self._dispatcher.pending
        if not pending:
            return
        self.stop_phase = f"draining {pending} runs"
        log.info("draining %d runs (up to %.1fs)", pending, max(timeout_s, 0.0))
        left = await self._dispatcher.drain(timeout_s)
        if left:
            report.give_up(
                f"{left} runs were still in flight after the drain ({max(timeout_s, 0.0):.1f} s; waiting for a "
                "judge or an exporter, or slow): abandoned, their records are not committed"
            )

    async def _final_checkpoint(self, timeout_s: float, report: StopReport) -> None:
        self.stop_phase = "final checkpoint: flushing the exporters and committing offsets"
        if timeout_s <= 0:
            report.give_up("no time was left for the final commit")
            return
        try:
            async with asyncio.timeout(timeout_s):
                committed = await self._checkpoint(timeout_s=timeout_s)
        except TimeoutError:
            report.give_up(f"the final commit did not finish within {timeout_s:.1f} s")
            return
        except Exception as exc:  # the commit of a consumer kicked out by a rebalance, a broker error
            report.give_up(f"the final commit failed ({type(exc).__name__}: {exc})")
            return
        if not committed:
            report.give_up("the final commit was not made (an exporter did not confirm, or the commit failed)")

    def _abandon(self) -> None:
        """Cancel the runs still in flight (held by a judge, or slow). Their records are forgotten first, as on
        a revoke, so that a cancelled run never completes its record."""
        self._ledger.drop_all()
        if self._traces is not None:
            self._traces.drop_all()
        self._dispatcher.cancel_all()

    async def _close(self, clients: BrokerClients | None, clock: StopClock, report: StopReport) -> None:
        """Leave the groups, stop the dead-letter producer and close the sinks, side by side, within what is
        left of the budget."""
        steps: dict[str, Any] = {}
        if clients is not None:
            steps["leaving the consumer group"] = clients.consumer.stop()
            steps["stopping the dead-letter producer"] = clients.producer.stop()
        if self._sessions is not None:
            steps.update(self._sessions.closing())
        for sink in self._checkpointed:
            steps[f"closing exporter {sink.name}"] = sink.close()
        self.stop_phase = "closing: " + ", ".join(steps)
        await close_side_by_side(steps, clock, report)
