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
from contextvars import ContextVar
from types import TracebackType

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


class _RunDeadline:
    """``async with`` support for :func:`run_deadline`: a class rather than a generator-based context manager,
    which costs several times more, and every run enters one."""

    __slots__ = ("_seconds", "_timeout", "_token")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    async def __aenter__(self) -> None:
        self._timeout = timeout = asyncio.timeout(self._seconds)
        await timeout.__aenter__()
        self._token = _current.set(_PausableDeadline(timeout))

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _current.reset(self._token)
        await self._timeout.__aexit__(exc_type, exc, tb)  # raises TimeoutError when it fired


def run_deadline(seconds: float) -> _RunDeadline:
    """Like ``asyncio.timeout(seconds)``, except for the time spent inside :func:`deadline_paused`."""
    return _RunDeadline(seconds)


class _Paused:
    __slots__ = ("_deadline",)

    def __enter__(self) -> None:
        self._deadline = deadline = _current.get()
        if deadline is not None:
            deadline.pause()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._deadline is not None:
            self._deadline.resume()


def deadline_paused() -> _Paused:
    """Stop the enclosing :func:`run_deadline` (if any) while the block runs."""
    return _Paused()
