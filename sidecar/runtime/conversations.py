"""Stage 2 of conversations wired into the service: its consumer in its own group, its intake over the internal
topic (each partition restored from the beginning), its ticker, and stage 1's progress that holds its clock
(``runtime.sessions`` has the stage itself; ``service`` only starts, stops and closes this)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer

from sidecar.core.observers import ServiceObserver
from sidecar.runtime.clients import ClientOptions
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.intake import INTAKE_STOP_S, Intake
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.sessions import SessionStage
from sidecar.runtime.sessions.consumer import session_group, start_session_consumer
from sidecar.runtime.sources import RestoringSubscription
from sidecar.runtime.stopping import StopReport, cancel_and_wait
from sidecar.runtime.trace_scope import TraceScope

__all__ = ["Conversations"]

log = logging.getLogger(__name__)


class Conversations:
    def __init__(
        self, stage: SessionStage, *, limits: RuntimeLimits, dispatcher: RunDispatcher, observer: ServiceObserver
    ) -> None:
        self.stage = stage
        self._limits = limits
        self._dispatcher = dispatcher
        self._observer = observer
        self._consumer: AIOKafkaConsumer | None = None
        self._intake: Intake | None = None
        self._stage1: tuple[Intake, TraceScope | None] | None = None
        self._task: asyncio.Task[str] | None = None
        self._stop = asyncio.Event()

    @property
    def ready(self) -> bool:
        return self._intake is not None and self._intake.ready

    async def start(self, clients: ClientOptions) -> None:
        """Its consumer (after the check of the internal topic: :class:`StartupFailure` when it is unfit) and its
        subscription."""
        stage = self.stage
        self._consumer, _ = await start_session_consumer(clients, stage.limits.topic)
        stage.attach(self._consumer)
        limits = self._limits
        self._intake = Intake(
            self._consumer,
            RestoringSubscription([stage.limits.topic], stage.assigned),
            stage.handle,
            capacity=stage.capacity,
            observer=self._observer,
            group_id=session_group(clients.group_id or ""),
            poll_timeout_ms=limits.poll_timeout_ms,
            max_poll_records=limits.max_poll_records,
            pause_grace_s=limits.pause_grace_s,
            on_revoked=stage.revoked,
            runs_in_flight=lambda: self._dispatcher.in_flight,
        )
        await self._intake.attach()

    def follow(self, intake: Intake, traces: TraceScope | None) -> None:
        """Stage 1 of this process: its progress holds stage 2's clock."""
        self._stage1 = (intake, traces)
        self.stage.stage1_read_to = self._stage1_read_to

    async def _stage1_read_to(self) -> int | None:
        """How far in record time stage 1 has handed every trace's turns to the internal topic: read (its intake's
        watermark), and not waiting in the trace buffer or being published."""
        if self._stage1 is None:
            return None
        intake, traces = self._stage1
        read = await intake.watermark_ms()
        pending = traces.oldest_pending_ms() if traces is not None else None
        return read if read is None or pending is None else min(read, pending)

    def run(self, service_stop: asyncio.Event) -> None:
        """Intake and ticker until :meth:`stop`; a failure of stage 2 stops the service (its error is raised by
        :meth:`stop`): conversations are not left unscored silently."""
        intake, stop = self._intake, self._stop
        if intake is None:
            return
        ticker = asyncio.create_task(self.stage.run(stop), name="conversations")

        async def consume() -> str:
            try:
                return await intake.run_until(stop)
            finally:
                await cancel_and_wait(ticker)

        def ended(task: asyncio.Task[str]) -> None:
            if not task.cancelled() and task.exception() is not None and not stop.is_set():
                log.error("the conversations' intake failed (%r): stopping the service", task.exception())
                service_stop.set()

        self._task = asyncio.create_task(consume(), name="conversations intake")
        self._task.add_done_callback(ended)

    async def stop(self, report: StopReport) -> None:
        """Stop reading (with stage 1, at a stop or at a bounded source's end)."""
        self._stop.set()
        task = self._task
        if task is not None and await task == "abandoned":
            report.give_up(f"the conversations' intake did not stop within {INTAKE_STOP_S:g} s and was cancelled")

    async def finish(self, timeout_s: float, report: StopReport) -> None:
        """After the final checkpoint: the tombstones of the windows it confirmed."""
        if not await self.stage.finish(timeout_s):
            report.give_up(
                "the tombstones of conversations scored were not written: their next owner scores them again "
                "(same score ids)"
            )

    async def abandon(self) -> None:
        self._stop.set()
        if self._task is not None:
            await cancel_and_wait(self._task)
        self.stage.drop_all()

    def closing(self) -> dict[str, Any]:
        """The closing steps (the service runs them side by side with its own)."""
        consumer, self._consumer = self._consumer, None
        return {"leaving the conversations' consumer group": consumer.stop()} if consumer is not None else {}
