"""A stop bounded by ``shutdown_timeout_s`` from the moment it is asked for, whatever the group or the broker
is doing: the clock, the steps that may overrun it, and the report of what was given up.

The service stops in this order: intake ends, runs drain until the closing reserve is left, the final
checkpoint flushes and commits, then the consumer leaves its group while the producer and the sinks close,
side by side. What does not finish in time is given up and named in one summary; uncommitted records are
redelivered (docs/worker-lifecycle.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any

__all__ = ["StopClock", "StopReport", "cancel_and_wait", "close_side_by_side", "closing_reserve"]

log = logging.getLogger(__name__)


def closing_reserve(shutdown_timeout_s: float) -> float:
    """The part of the stop budget kept for the final checkpoint and the closing steps (leave the group,
    close the producer and the sinks), however long the drain took: a quarter, at most 5 s."""
    return min(5.0, shutdown_timeout_s / 4)


class StopClock:
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


class StopReport:
    """What the stop could not do in time, said once at the end: each item, then one summary line."""

    def __init__(self) -> None:
        self.given_up: list[str] = []

    def give_up(self, what: str) -> None:
        self.given_up.append(what)

    def log(self, clock: StopClock, *, consumed: bool) -> None:
        took, budget = clock.elapsed(), clock.budget_s
        if not clock.asked and not self.given_up:
            return  # an error ended the service: it says so itself
        if not self.given_up:
            if not consumed:
                log.info("stop: done in %.1f s while waiting for the Kafka broker; nothing was consumed", took)
            else:
                log.info("stop: done in %.1f s of %g s: drained, committed, consumer closed", took, budget)
            return
        for item in self.given_up:
            log.warning("stop: %s", item)
        left_group = not any(item.startswith("leaving the consumer group") for item in self.given_up)
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


async def close_side_by_side(steps: Mapping[str, Awaitable[Any]], clock: StopClock, report: StopReport) -> None:
    """Run the closing ``steps`` (named) together within what is left of the budget; what is still running then
    is cancelled and named in the report."""
    futures = {asyncio.ensure_future(step): name for name, step in steps.items()}
    if not futures:
        return
    _, pending = await asyncio.wait(futures, timeout=max(clock.left(), 0.05))
    for future, name in futures.items():
        if future.done() and not future.cancelled() and future.exception() is not None:
            log.warning("stop: %s failed: %r", name, future.exception())
    if pending:
        waited = clock.elapsed()
        for future in pending:
            report.give_up(f"{futures[future]} did not finish within the budget ({waited:.1f} s)")
            future.cancel()
        await asyncio.wait(pending, timeout=0.5)


async def cancel_and_wait(task: asyncio.Future[Any], timeout_s: float = 1.0) -> None:
    """Cancel ``task`` and wait (bounded) for it to end; its outcome is dropped, the caller's own cancellation
    is not."""
    task.cancel()
    await asyncio.wait({task}, timeout=timeout_s)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: a failure while cancelling is not worth a "never retrieved" warning
