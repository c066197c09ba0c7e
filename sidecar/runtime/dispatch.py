"""Scorer runs as tasks: each runs one scorer on one request, reports how it ended, and hands the finished run
to every sink before telling its claim it is done.

Runs finish out of order and may wait a long time for a judge (a hold), so each is its own task; the
dispatcher counts them (intake pauses at ``max_in_flight_runs``), drains them at a stop and cancels what the
stop budget does not wait for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from sidecar.core import ScorerRunRequest, Sink
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.agent_labels import AgentLabels
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.claims import Claim
from sidecar.runtime.configured import ConfiguredScorer

__all__ = ["RunDispatcher"]

log = logging.getLogger(__name__)


class RunDispatcher:
    """Starts runs and the other tasks a claim waits for; ``on_change`` hears of every run that ends (the
    service's capacity check; whoever starts runs checks capacity once they are started)."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        observer: ServiceObserver,
        agent_labels: AgentLabels,
        *,
        run_timeout_s: float,
    ) -> None:
        self._sinks = tuple(sinks)
        self._observer = observer
        self._agent_labels = agent_labels
        self._run_timeout_s = run_timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        # Counted explicitly: a finishing run updates capacity before its task is done (and removed from
        # _tasks by a later callback), so len(_tasks) would still count it and pausing would never end.
        self.in_flight = 0
        self.on_change: Callable[[], None] = lambda: None

    def start(self, configured: ConfiguredScorer, request: ScorerRunRequest, claim: Claim) -> None:
        """Run ``configured`` on ``request``, holding a part of ``claim`` until the run is handed to every sink."""
        claim.take()
        self.in_flight += 1
        self.spawn(self._score(configured, request, claim), claim)

    def spawn(self, work: Coroutine[Any, Any, None], claim: Claim | None = None) -> asyncio.Task[None]:
        """A task the stop waits for (and cancels past its budget), cancelled with ``claim`` if it is dropped."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if claim is not None:
            claim.tasks.append(task)
        return task

    async def _score(self, configured: ConfiguredScorer, request: ScorerRunRequest, claim: Claim) -> None:
        scorer = configured.scorer
        agent = self._agent_labels.label(request.target.agent_name, request.target.service_name)
        try:
            attempt = await attempt_scorer(scorer, request, timeout_s=self._run_timeout_s)
            shed_reason = attempt.shed_reason
            if shed_reason is not None:  # over a judge's spend cap with the "shed" policy: skipped, counted
                self._observer.runs_skipped(
                    scorer.id, agent, "shed", 1, judge=configured.judge_model or "unknown", shed_reason=shed_reason
                )
            else:
                scored = attempt.to_scored_run(request, scorer, agent, needs=configured.needs)
                self._observer.run_finished(scored)
                for sink in self._sinks:
                    try:
                        await sink.submit(scored)
                    except Exception:
                        log.exception("sink %s rejected score %s", sink.name, scored.score_id)
        finally:
            self.in_flight -= 1
            claim.release()
            self.on_change()

    @property
    def pending(self) -> int:
        """Tasks not finished: runs, and the dead letters a ready trace waits for."""
        return len(self._tasks)

    async def drain(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every task; returns how many are still running."""
        if self._tasks and timeout_s > 0:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        return sum(1 for task in self._tasks if not task.done())

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
