"""The scoring service: the engine and the stages wired on one asyncio loop.

Records come from a :class:`~sidecar.runtime.sources.RecordSource` (a group subscription for ``run``) through
the :class:`~sidecar.runtime.intake.Intake` to the :class:`~sidecar.runtime.records.RecordHandler`, which reads each
record once and hands it to every stage (``sidecar.runtime.stages``: span, trace, session). Each record's claim
(``sidecar.runtime.claims``) holds it until every stage's work on it is exported, and the
:class:`~sidecar.runtime.checkpoint.Checkpoint` commits behind it: committable offsets first, then every sink
flushed, then the commit (at-least-once; score ids are deterministic, so redelivery is harmless). The stop is
bounded (:mod:`sidecar.runtime.stopping`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from sidecar.core import Flushable
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.checkpoint import Checkpoint
from sidecar.runtime.clients import BrokerClients, ClientOptions, start_clients
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.engine import Engine
from sidecar.runtime.intake import INTAKE_STOP_S, Intake
from sidecar.runtime.records import RecordHandler
from sidecar.runtime.sources import GroupSubscription, RecordSource
from sidecar.runtime.stages import Stage, StageContext
from sidecar.runtime.stopping import StopClock, StopReport, cancel_and_wait, close_side_by_side, closing_reserve

__all__ = ["ConfiguredScorer", "ScoringService"]

log = logging.getLogger(__name__)

# While the last runs of an exhausted source finish, how often the wait looks at the stop event.
_FINISH_POLL_S = 0.5


class ScoringService:
    """The engine's parts and the stages, wired on one loop. Built by the composition root (``sidecar.app``), which
    builds the :class:`Engine` and the stages over it (``sidecar.runtime.stages.build_stages``)."""

    def __init__(
        self,
        *,
        engine: Engine,
        stages: Sequence[Stage],
        ingest: IngestConfig,
        dead_letters: DeadLetterPublisher,
        bootstrap_servers: str,
        group_id: str,
        topics: Sequence[str] = (),
        publishers: Sequence[Flushable] = (),
        consumer_options: dict[str, Any] | None = None,
        producer_options: dict[str, Any] | None = None,
        readiness_checks: Sequence[Callable[[], str | None]] = (),
        source: RecordSource | None = None,
        key_sampling: bool = True,
    ) -> None:
        if not stages:
            raise ValueError("the service needs at least one stage (a scorer)")
        self._engine = engine
        self._limits = limits = engine.limits
        self._clients = ClientOptions(
            bootstrap_servers, group_id, consumer_options or {}, producer_options or {}, limits.startup_timeout_s
        )
        self._ingest = ingest
        self._dead_letters = dead_letters
        self._key_sampling = key_sampling
        self._source: RecordSource = source or GroupSubscription(topics or (ingest.topic,))
        self._stages = tuple(stages)
        self._claims = engine.claims
        self._dispatcher = engine.dispatcher
        self._capacity = engine.capacity
        self._observer = engine.observer
        self._readiness_checks = tuple(readiness_checks)
        # What the checkpoint flushes before it commits, started and closed with the sinks: the sinks, then what
        # they hand on (score dead letters), and what the stages write of their own (the conversations' turns).
        self._checkpointed: tuple[Flushable, ...] = (
            *engine.sinks,
            *publishers,
            *(flushable for stage in self._stages for flushable in stage.flushables()),
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
        stages = all(stage.ready for stage in self._stages)
        return self._running and self._intake is not None and self._intake.ready and stages

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
        stages = self._stages
        try:
            clients = await start_clients(
                self._clients,
                self._checkpointed,
                self._dead_letters,
                stop,
                waiting=self._set_waiting,
                phase=self._set_phase,
            )
            if clients is None:
                return  # stopped while waiting for the broker: nothing was consumed
            consumer = clients.consumer
            handler = RecordHandler(
                self._ingest,
                stages,
                claims=self._claims,
                capacity=self._capacity,
                observer=self._observer,
                dead_letters=self._dead_letters,
                key_sampling=self._key_sampling,
            )
            intake = self._intake = self._new_intake(consumer, handler)
            context = StageContext(self._clients, intake.watermark_ms)
            for stage in stages:
                self.stop_phase = f"starting: the {stage.name} stage"
                await stage.start(context)
            self._checkpoints = Checkpoint(
                self._claims.offsets,
                self._checkpointed,
                consumer,
                self._observer,
                confirmations=tuple(stage.confirmation for stage in stages),
            )
            await intake.attach()
            background.append(asyncio.create_task(self._commit_loop(stop), name="checkpoints"))
            self.stop_phase = "consuming"
            for stage in stages:
                for work in stage.background(stop):
                    background.append(asyncio.create_task(work, name=f"{stage.name} stage"))
            ended = await intake.run_until(stop)
            if ended == "abandoned":
                report.give_up(f"intake did not stop within {INTAKE_STOP_S:g} s and was cancelled")
            for task in background[1:]:
                await cancel_and_wait(task)
            for stage in stages:
                await stage.stopping(report)
            if ended == "exhausted":
                await self._finish_source(stop)
            await self._drain(clock.left() - reserve, report)
            await cancel_and_wait(background[0])  # it may hold the checkpoint lock, waiting on a commit that hangs
            await self._final_checkpoint(min(limits.flush_timeout_s, clock.left() - reserve / 2), report)
            for stage in stages:
                await stage.finish(clock.left() - reserve / 2, report)
        finally:
            self._running = False
            for task in background:
                await cancel_and_wait(task)
            await self._abandon()
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
                    self._intake.report_lag(self._claims.offsets)
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
        abandoned = self._claims.revoke(lost)
        for stage in self._stages:
            stage.revoked(lost)
        if abandoned:
            log.info("revoked %d partitions; %d records left to their new owner", len(revoked), abandoned)
        self._capacity.update()

    # -- the end of a bounded source ----------------------------------------------------------------------
    async def _finish_source(self, stop: asyncio.Event) -> None:
        """A bounded source read to its end (a backfill's window): nothing more will come, so the traces still
        buffered are scored now, and every run is waited for (only a stop cuts the wait short: the stop budget
        is for stopping, not for the window's last runs), before the final checkpoint."""
        self.stop_phase = "source read to its end: finishing its runs"
        for stage in self._stages:
            await stage.source_ended(stop)
        while self._dispatcher.pending and not stop.is_set():
            await self._dispatcher.drain(_FINISH_POLL_S)

    def done_offsets(self) -> dict[TopicPartition, int]:
        """Per partition read so far, the offset below which every record is done (scored and handed to the
        sinks, not yet necessarily committed): a bounded source's progress."""
        offsets = self._claims.offsets
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

    async def _abandon(self) -> None:
        """Cancel the runs still in flight (held by a judge, or slow). Their records' claims are dropped first, as
        on a revoke, so that a cancelled run never completes its record."""
        self._claims.drop_all()
        for stage in self._stages:
            await stage.abandon()
        self._dispatcher.cancel_all()

    async def _close(self, clients: BrokerClients | None, clock: StopClock, report: StopReport) -> None:
        """Leave the groups, stop the dead-letter producer and close the sinks, side by side, within what is
        left of the budget."""
        steps: dict[str, Any] = {}
        if clients is not None:
            steps["leaving the consumer group"] = clients.consumer.stop()
            steps["stopping the dead-letter producer"] = clients.dead_letters.stop()
        for stage in self._stages:
            steps.update(stage.closing())
        for sink in self._checkpointed:
            steps[f"closing exporter {sink.name}"] = sink.close()
        self.stop_phase = "closing: " + ", ".join(steps)
        await close_side_by_side(steps, clock, report)
