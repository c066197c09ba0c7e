"""A run's own time limit, stopped while the run waits for its judge.

``run_timeout_s`` exists to end runs that hang (a scorer stuck in its own code, a call that never returns).
Time spent waiting for a judge that is down, paused, over its spend cap or busy is not the run's fault:
counting it would turn every judge outage into failed runs, which is what holding work is meant to avoid.
So the judge client marks its waits with :func:`deadline_paused`, and :func:`run_deadline` moves its
deadline forward by their length.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar

__all__ = ["deadline_paused", "run_deadline"]


class _PausableDeadline:
    __slots__ = ("_loop", "_paused", "_remaining", "_timeout")

    def __init__(self, timeout: asyncio.Timeout) -> None:
        self._timeout = timeout
        self._loop = asyncio.get_running_loop()
        self._paused = 0
        self._remaining = 0.0

    def pause(self) -> None:
        self._paused += 1
        if self._paused > 1:
            return
        when = self._timeout.when()
        if when is None:
            return
        self._remaining = max(0.0, when - self._loop.time())
        # A timeout that already fired cannot be moved: the run ends with it, as it would have.
        with contextlib.suppress(RuntimeError):
            self._timeout.reschedule(None)

    def resume(self) -> None:
        self._paused -= 1
        if self._paused:
            return
        with contextlib.suppress(RuntimeError):
            self._timeout.reschedule(self._loop.time() + self._remaining)


_current: ContextVar[_PausableDeadline | None] = ContextVar("scoring_run_deadline", default=None)


@contextlib.asynccontextmanager
async def run_deadline(seconds: float) -> AsyncIterator[None]:
    """Like ``asyncio.timeout(seconds)``, except for the time spent inside :func:`deadline_paused`."""
    async with asyncio.timeout(seconds) as timeout:
        token = _current.set(_PausableDeadline(timeout))
        try:
            yield
        finally:
            _current.reset(token)


@contextlib.contextmanager
def deadline_paused() -> Iterator[None]:
    """Stop the enclosing :func:`run_deadline` (if any) while the block runs."""
    deadline = _current.get()
    if deadline is None:
        yield
        return
    deadline.pause()
    try:
        yield
    finally:
        deadline.resume()
