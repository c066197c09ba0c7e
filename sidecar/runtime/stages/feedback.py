"""Human feedback joined to the sidecar's own scores (docs/feedback.md): a stage that starts no runs.

It takes nothing from the traces topic. An intake of its own, in its own consumer group (``<group>-feedback``),
reads the feedback topic and the score topic the Kafka score exporter writes, co-partitioned, and hands each record to
the live join (``runtime.feedback.stage``): pairs go to the pairs topic and the metrics, what waits to the compacted
state topic, restored when a lane is assigned. The stage commits its group's offsets through a checkpoint of its own,
which flushes the state and pairs topics first: an offset is committed only once what its record changed is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from sidecar.core.observers import ServiceObserver
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.checkpoint import Checkpoint
from sidecar.runtime.feedback import FeedbackLimits, JoinedScorer
from sidecar.runtime.feedback.consumer import JoinSubscription, feedback_group, start_feedback_consumers
from sidecar.runtime.feedback.stage import FeedbackJoin
from sidecar.runtime.feedback.topics import RecordWriter
from sidecar.runtime.intake import INTAKE_STOP_S, Intake
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.stages.base import Fetched, Stage, StageContext
from sidecar.runtime.stopping import StopReport, cancel_and_wait

__all__ = ["FeedbackStage"]

log = logging.getLogger(__name__)


class FeedbackStage(Stage):
    def __init__(
        self,
        limits: FeedbackLimits,
        scorers: Mapping[str, JoinedScorer],
        *,
        state: RecordWriter,
        pairs: RecordWriter,
        dead_letters: DeadLetterPublisher,
        observer: ServiceObserver,
        runtime: RuntimeLimits,
    ) -> None:
        super().__init__(())  # it scores nothing: its scorers are those whose scores it joins
        self.limits = limits
        self.live = FeedbackJoin(
            limits, scorers, state=state, pairs=pairs, dead_letters=dead_letters, observer=observer
        )
        self._writers = (state, pairs)
        self._observer = observer
        self._runtime = runtime
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: AIOKafkaConsumer | None = None
        self._intake: Intake | None = None
        self._checkpoint: Checkpoint[TopicPartition] | None = None
        self._task: asyncio.Task[str] | None = None
        self._stop = asyncio.Event()

    @property
    def name(self) -> str:
        return "feedback stage"

    def take(self, record: Fetched) -> None:
        """Nothing: the stage reads topics of its own."""

    def key_sample_rate(self) -> float:
        return 0.0  # no record of the traces topic holds anything for it

    @property
    def ready(self) -> bool:
        return self._intake is not None and self._intake.ready

    async def start(self, context: StageContext) -> None:
        """The topics' check, the group's consumer, the state reader and the writers (:class:`StartupFailure` when
        a topic is missing or unfit)."""
        clients = context.clients
        for writer in self._writers:
            await writer.start()
        self._consumer, self._reader = await start_feedback_consumers(clients, self.limits)
        self.live.attach(self._reader)
        limits = self._runtime
        self._checkpoint = Checkpoint(self.live.offsets, self._writers, self._consumer, self._observer)
        self._intake = Intake(
            self._consumer,
            JoinSubscription([self.limits.topic, self.limits.scores_topic], self.live.assigned),
            self.live.handle,
            capacity=Capacity(ServiceObserver(), lambda: 0),  # the join bounds itself (max_held): never full
            observer=self._observer,
            group_id=feedback_group(clients.group_id or ""),
            poll_timeout_ms=limits.poll_timeout_ms,
            max_poll_records=limits.max_poll_records,
            pause_grace_s=limits.pause_grace_s,
            on_revoked=self._revoked,
            runs_in_flight=lambda: 0,
        )
        await self._intake.attach()

    async def _revoked(self, revoked: list[TopicPartition]) -> None:
        # What is done on them is committed (the state and pairs flushed first), within the revoke's budget; what is
        # not is read again by their next owner, and the join takes it as a redelivery.
        budget = self._runtime.revoke_timeout_s
        if revoked and self._checkpoint is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._checkpoint.commit(revoked, timeout_s=budget), budget)
        self.live.revoked(revoked)

    def background(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        return [self._run(stop)]

    async def _run(self, service_stop: asyncio.Event) -> None:
        """Intake, the ticker and the commits until :meth:`stopping`; a failure (a lane that cannot be restored, the
        intake failing) stops the service: feedback is not left unjoined silently."""
        intake, stop = self._intake, self._stop
        if intake is None:
            return
        live = self.live
        ticker = asyncio.create_task(live.run(stop), name="feedback ticker")
        commits = asyncio.create_task(self._commit_loop(stop, service_stop), name="feedback checkpoints")

        async def consume() -> str:
            try:
                return await intake.run_until(stop)
            finally:
                await cancel_and_wait(ticker)
                await cancel_and_wait(commits)

        def ended(task: asyncio.Task[str]) -> None:
            if not task.cancelled() and task.exception() is not None and not stop.is_set():
                log.error("the feedback intake failed (%r): stopping the service", task.exception())
                service_stop.set()

        self._task = asyncio.create_task(consume(), name="feedback intake")
        self._task.add_done_callback(ended)

    async def _commit_loop(self, stop: asyncio.Event, service_stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._runtime.commit_interval_s)
            if self.live.failure is not None:
                service_stop.set()
                return
            try:
                await self._commit(self._runtime.flush_timeout_s)
            except Exception:
                log.exception("feedback: checkpoint failed; offsets stay where they were")

    async def _commit(self, timeout_s: float) -> bool:
        checkpoint, intake = self._checkpoint, self._intake
        if checkpoint is None or intake is None:
            return False
        committed = await checkpoint.commit(list(intake.owned), timeout_s=timeout_s)
        intake.report_lag(self.live.offsets)
        return committed

    async def stopping(self, report: StopReport) -> None:
        self._stop.set()
        task = self._task
        if task is not None and await task == "abandoned":
            report.give_up(f"the feedback intake did not stop within {INTAKE_STOP_S:g} s and was cancelled")

    async def finish(self, timeout_s: float, report: StopReport) -> None:
        """The final commit of what the join read (the state and pairs flushed first)."""
        if timeout_s <= 0:
            report.give_up("no time was left for the feedback join's final commit")
            return
        try:
            async with asyncio.timeout(timeout_s):
                committed = await self._commit(timeout_s)
        except Exception as exc:
            report.give_up(f"the feedback join's final commit failed ({type(exc).__name__}: {exc})")
            return
        if not committed:
            report.give_up("the feedback join's final commit was not made: its records are read again (no pair twice)")

    async def abandon(self) -> None:
        self._stop.set()
        if self._task is not None:
            await cancel_and_wait(self._task)

    def closing(self) -> Mapping[str, Awaitable[Any]]:
        steps: dict[str, Awaitable[Any]] = {}
        consumer, self._consumer = self._consumer, None
        reader, self._reader = self._reader, None
        if consumer is not None:
            steps["leaving the feedback consumer group"] = consumer.stop()
        if reader is not None:
            steps["stopping the feedback state reader"] = reader.stop()
        for writer in self._writers:
            steps[f"closing {writer.name}"] = writer.close()
        return steps
