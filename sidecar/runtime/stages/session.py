"""``scope: session``: the turns of a conversation scored together once it goes quiet (docs/sessions.md).

Two stages in one: stage 1 follows the whole-trace stage (each ready trace's turns published to the internal topic,
``runtime.sessions.turns``); stage 2 is a second intake in the same process, in its own consumer group
(``<group>-sessions``), over that topic: every assigned partition restored from its beginning, turns held by
conversation until a window closes (``runtime.sessions.stage``), then scored on the shared dispatcher. Stage 1's
progress (the service's intake watermark and the traces not yet handed over) holds stage 2's clock, so a window
never closes while one of its turns may still be on its way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer

from sidecar.conventions.session_turns import TurnSummary
from sidecar.conventions.trace_runs import trace_runs
from sidecar.conventions.versions import DEFAULT_VERSIONS, VersionAttributes
from sidecar.core import Flushable
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.intake import INTAKE_STOP_S, Intake
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.sessions import SessionLimits, Stage2, TurnPublishing, Turns, TurnTopic, conversation_runs
from sidecar.runtime.sessions.consumer import session_group, start_session_consumer
from sidecar.runtime.sources import RestoringSubscription
from sidecar.runtime.stages.base import Assembly, Fetched, OfflineRecord, OfflineRun, Stage, StageContext, StageFacts
from sidecar.runtime.stages.trace import TraceStage, whole_traces
from sidecar.runtime.stopping import StopReport, cancel_and_wait

__all__ = ["SessionAssembly", "SessionStage"]

log = logging.getLogger(__name__)

# A turn's agent span ends before the Collector writes its trace's last record (batching): what a window waits for
# past its last turn's end + idle_s, beyond what stage 1 has read.
_TURN_GRACE_S = 0.5


class SessionAssembly(Assembly):
    """Records → conversations → runs, with no topic: each trace's turns as stage 1 makes them, grouped by
    conversation, each conversation one window closed as quiet (``idle``)."""

    def __init__(
        self, scorers: Sequence[ConfiguredScorer], limits: SessionLimits, versions: VersionAttributes = DEFAULT_VERSIONS
    ) -> None:
        self.scorers = tuple(scorers)
        self._turns = Turns(scorers, limits, ServiceObserver())
        self._versions = versions

    def runs_of_records(self, records: Sequence[OfflineRecord]) -> list[OfflineRun]:
        conversations: dict[str, list[tuple[TurnSummary, str]]] = {}
        selection = self._turns.selection
        for trace, reason, where in whole_traces(records):
            spans = trace.decoded()
            complete = reason == "root_idle" and not trace.cut_short
            agents = trace_runs(spans, selection, ready_reason=reason, complete=complete, versions=self._versions).runs
            for turn in self._turns.turns(spans, agents, complete=complete):
                conversations.setdefault(turn.conversation_id, []).append((turn, where))
        runs: list[OfflineRun] = []
        for conversation, found in conversations.items():
            turns = [turn for turn, _ in found]
            last = max(found, key=lambda item: (item[0].start_time_unix_nano, item[0].trace_id, item[0].span_id))
            for configured, request in conversation_runs(self.scorers, conversation, turns, "idle").runs:
                runs.append(OfflineRun(configured, request, last[1]))
        return runs


class SessionStage(Stage):
    facts = StageFacts(scope="session", unit="conversation", backfills=False, conversation_items=True, late_spans=False)

    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        limits: SessionLimits,
        *,
        turns: TurnPublishing,
        topic: TurnTopic,
        traces: TraceStage,
        dispatcher: RunDispatcher,
        observer: ServiceObserver,
        runtime: RuntimeLimits,
    ) -> None:
        super().__init__(scorers)
        self.assembly = SessionAssembly(scorers, limits)
        self.turns = turns  # stage 1: a follower of ``traces``
        self._topic = topic
        self._traces = traces
        self._dispatcher = dispatcher
        self._observer = observer
        self._runtime = runtime
        self.stage2 = Stage2(
            scorers, limits, dispatcher=dispatcher, topic=topic, observer=observer,
            max_in_flight_runs=runtime.max_in_flight_runs, grace_s=_TURN_GRACE_S,
        )  # fmt: skip
        self._consumer: AIOKafkaConsumer | None = None
        self._intake: Intake | None = None
        self._task: asyncio.Task[str] | None = None
        self._stop = asyncio.Event()

    def take(self, record: Fetched) -> None:
        """Nothing per record: stage 1 takes whole traces from the trace stage."""

    def key_sample_rate(self) -> float:
        return 1.0  # conversations are sampled by their id, which a record's key does not name

    def flushables(self) -> Sequence[Flushable]:
        return (self._topic,)

    @property
    def ready(self) -> bool:
        return self._intake is not None and self._intake.ready

    async def start(self, context: StageContext) -> None:
        """Stage 2's consumer (after the check of the internal topic: :class:`StartupFailure` when it is unfit), its
        subscription, and stage 1's progress as its clock."""
        stage = self.stage2
        clients = context.clients
        self._consumer, _ = await start_session_consumer(clients, stage.limits.topic)
        stage.attach(self._consumer)
        stage.stage1_read_to = self._read_to(context.read_to_ms)
        limits = self._runtime
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

    def _read_to(self, read_to_ms: Callable[[], Awaitable[int | None]]) -> Callable[[], Awaitable[int | None]]:
        traces = self._traces

        async def stage1_read_to() -> int | None:
            """How far in record time stage 1 has handed every trace's turns to the internal topic: read (the
            service's intake watermark), and not waiting in the trace buffer or being published."""
            read = await read_to_ms()
            pending = traces.oldest_pending_ms()
            return read if read is None or pending is None else min(read, pending)

        return stage1_read_to

    def background(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        return [self._run(stop)]

    async def _run(self, service_stop: asyncio.Event) -> None:
        """Intake and ticker until :meth:`stopping`; a failure of stage 2 stops the service (its error is raised by
        :meth:`stopping`): conversations are not left unscored silently."""
        intake, stop = self._intake, self._stop
        if intake is None:
            return
        ticker = asyncio.create_task(self.stage2.run(stop), name="conversations")

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

    async def stopping(self, report: StopReport) -> None:
        """Stop reading (with stage 1, at a stop or at a bounded source's end)."""
        self._stop.set()
        task = self._task
        if task is not None and await task == "abandoned":
            report.give_up(f"the conversations' intake did not stop within {INTAKE_STOP_S:g} s and was cancelled")

    def confirmation(self) -> Callable[[], None] | None:
        return self.stage2.confirmation()

    async def finish(self, timeout_s: float, report: StopReport) -> None:
        """After the final checkpoint: the tombstones of the windows it confirmed."""
        if not await self.stage2.finish(timeout_s):
            report.give_up(
                "the tombstones of conversations scored were not written: their next owner scores them again "
                "(same score ids)"
            )

    async def abandon(self) -> None:
        self._stop.set()
        if self._task is not None:
            await cancel_and_wait(self._task)
        self.stage2.drop_all()

    def closing(self) -> Mapping[str, Awaitable[Any]]:
        consumer, self._consumer = self._consumer, None
        return {"leaving the conversations' consumer group": consumer.stop()} if consumer is not None else {}
