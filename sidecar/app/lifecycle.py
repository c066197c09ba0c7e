"""A process's stop deadline, kept by a thread that does not depend on the event loop.

``runtime.shutdown_timeout_s`` bounds a stop from the moment it is asked for (SIGTERM, or a worker's
supervisor gone) until the process exits. The service keeps the bound itself (``ScoringService.run``
gives up what does not finish in time); this watchdog is the backstop when it cannot: an event loop
blocked by a scorer, an exporter thread the interpreter waits for at exit. ``STOP_GRACE_S`` past the
budget it logs what the process was doing and ends it with ``EXIT_STOP_OVERRUN``, without committing
more (what was not committed is redelivered).

In a worker it also watches the supervisor: when its parent process changes (the supervisor exited,
even killed with SIGKILL, and the worker was re-parented), it asks the loop to stop and starts the
deadline itself, so a worker whose loop is stuck still exits. The worker's stdin pipe (end of file when
the supervisor is gone, read by the loop) stays the immediate path; this thread polls. docs/worker-lifecycle.md
says why a thread rather than ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["EXIT_STOP_OVERRUN", "STOP_GRACE_S", "StopWatchdog"]

log = logging.getLogger(__name__)

# The exit status of a process whose stop overran its deadline and was ended by its watchdog (the
# supervisor exits with it too when one of its workers overran or had to be killed).
EXIT_STOP_OVERRUN = 3
# How long past runtime.shutdown_timeout_s the watchdog waits before it ends the process: the service
# gives up at the budget, and what follows (metrics server, judge clients, interpreter exit) is quick.
STOP_GRACE_S = 2.0


class StopWatchdog:
    """Arm it when a stop begins; past ``budget_s + grace_s`` the process exits with ``EXIT_STOP_OVERRUN``.

    ``parent_pid``: the supervisor of a worker process; when this process's parent is no longer it,
    ``on_parent_gone`` is called (from the watchdog's thread: make it thread-safe) and the deadline armed.
    ``phase``/``phase_source`` say what the process is doing, for the overrun line.
    """

    def __init__(
        self,
        budget_s: float,
        *,
        grace_s: float = STOP_GRACE_S,
        parent_pid: int | None = None,
        poll_s: float = 0.2,
        exit: Callable[[int], object] = os._exit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget_s = budget_s
        self.grace_s = grace_s
        self.parent_pid = parent_pid
        self.phase = "running"
        self.phase_source: Callable[[], str] | None = None
        self.on_parent_gone: Callable[[], object] | None = None
        self._poll_s = poll_s
        self._exit = exit
        self._clock = clock
        self._lock = threading.Lock()
        self._armed_at: float | None = None
        self._reason = ""
        self._parent_gone = False
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()

    @property
    def deadline(self) -> float | None:
        return None if self._armed_at is None else self._armed_at + self.budget_s + self.grace_s

    def describe(self) -> str:
        source = self.phase_source
        if source is not None:
            try:
                return source()
            except Exception:  # a phase must never keep the watchdog from ending the process
                return self.phase
        return self.phase

    def start(self) -> StopWatchdog:
        self._thread = threading.Thread(target=self._watch, name="stop-watchdog", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop watching (tests; a process simply exits)."""
        self._finished.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def arm(self, reason: str) -> bool:
        """The stop began (thread-safe; the first call counts). True if this call armed it."""
        with self._lock:
            if self._armed_at is not None:
                return False
            self._armed_at = self._clock()
            self._reason = reason
            return True

    def supervisor_gone(self, how: str) -> None:
        """The supervisor exited (seen by the loop on stdin, or by the thread): log once, stop, arm."""
        with self._lock:
            if self._parent_gone:
                return
            self._parent_gone = True
        log.warning(
            "the supervisor (pid %s) is gone (%s): stopping within runtime.shutdown_timeout_s (%.0f s)",
            self.parent_pid,
            how,
            self.budget_s,
        )
        self.arm("the supervisor is gone")
        callback = self.on_parent_gone
        if callback is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the process is exiting anyway
                callback()

    def check(self) -> None:
        """One look: the parent, then the deadline (the thread calls this every ``poll_s``)."""
        if self.parent_pid is not None and not self._parent_gone and os.getppid() != self.parent_pid:
            self.supervisor_gone(f"this worker's parent is now pid {os.getppid()}")
        deadline = self.deadline
        if deadline is not None and self._clock() >= deadline:
            self._overrun()

    def _watch(self) -> None:
        while not self._finished.wait(self._poll_s):
            self.check()

    def _overrun(self) -> None:
        assert self._armed_at is not None
        waited = self._clock() - self._armed_at
        message = (
            f"stop overran its deadline: {waited:.1f} s since {self._reason} (runtime.shutdown_timeout_s "
            f"{self.budget_s:g} s + {self.grace_s:g} s), still {self.describe()}; exiting now with status "
            f"{EXIT_STOP_OVERRUN} without finishing the stop (records after the last commit are redelivered)"
        )
        _emergency_log(message)
        self._finished.set()
        self._exit(EXIT_STOP_OVERRUN)


def _emergency_log(message: str) -> None:
    """Write a CRITICAL line to stderr without taking the logging locks (the thread that holds them may be
    the one that is stuck), formatted as the process's other lines."""
    record = log.makeRecord(log.name, logging.CRITICAL, __file__, 0, message, (), None)
    formatter = next((h.formatter for h in logging.getLogger().handlers if h.formatter is not None), None)
    line = formatter.format(record) if formatter is not None else f"CRITICAL {log.name} {message}"
    with contextlib.suppress(OSError, ValueError):
        os.write(sys.stderr.fileno(), (line + "\n").encode("utf-8", "replace"))
