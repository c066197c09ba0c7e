"""Starting against dependencies that may not be up yet, and the failures a start-up can end with.

Kubernetes starts a pod whenever it likes, Kafka included: a broker not reachable at start-up is the
normal case for a while, not an error. ``BrokerWait`` paces the attempts (1 s doubling to 30 s), says
what it waits for (``/readyz``, a WARNING at most every 30 s) and, once ``kafka.startup_timeout_s`` has
passed, gives up with a :class:`StartupFailure`: one line for the operator and an exit status, never a
traceback (docs/worker-lifecycle.md, "Starting").
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = [
    "EXIT_INVALID",
    "EXIT_UNREACHABLE",
    "BrokerWait",
    "StartupFailure",
    "listen_failure",
    "quiet_connect_errors",
]

log = logging.getLogger(__name__)

# The exit statuses of expected start-up failures (the table in docs/worker-lifecycle.md).
EXIT_INVALID = 2  # an invalid configuration or option (a metrics port that is taken, too)
EXIT_UNREACHABLE = 4  # a dependency (the Kafka broker) unreachable for kafka.startup_timeout_s

_FIRST_BACKOFF_S = 1.0
_MAX_BACKOFF_S = 30.0
_WARNING_EVERY_S = 30.0


class StartupFailure(Exception):
    """An expected reason the process cannot start: its message is the whole line the operator reads."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class BrokerWait:
    """The attempts to reach the broker at start-up: when the next one is, what ``/readyz`` says meanwhile,
    and the failure once ``timeout_s`` has passed since the first."""

    def __init__(self, bootstrap_servers: str, timeout_s: float, *, clock: Callable[[], float] = time.monotonic):
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self.attempts = 0
        self.reason = ""
        self._clock = clock
        self._started = clock()
        self._backoff = _FIRST_BACKOFF_S
        self._last_warning: float | None = None

    def left(self) -> float:
        return self._started + self.timeout_s - self._clock()

    def failed(self, what: str) -> float:
        """Attempt failed (``what``: the step and the error); returns the delay before the next one, or raises
        :class:`StartupFailure` when no time is left for one."""
        self.attempts += 1
        left = self.left()
        if left <= 0:
            raise self.give_up(what)
        delay = min(self._backoff, left)
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
        self.reason = (
            f"waiting for the Kafka broker at {self.bootstrap_servers}: {what} (attempt {self.attempts}, next in "
            f"{delay:.0f} s; gives up after kafka.startup_timeout_s={self.timeout_s:g})"
        )
        now = self._clock()
        # A broker down for minutes must not fill the log: the first failure, then one line every 30 s.
        if self._last_warning is None or now - self._last_warning >= _WARNING_EVERY_S:
            self._last_warning = now
            log.warning("%s", self.reason)
        else:
            log.debug("%s", self.reason)
        return delay

    def give_up(self, what: str) -> StartupFailure:
        waited = self._clock() - self._started
        return StartupFailure(
            f"the Kafka broker at {self.bootstrap_servers} was not reachable for {waited:.0f} s ({self.attempts} "
            f"attempts; the last: {what}): check kafka.bootstrap_servers and that the broker is up and reachable "
            f"from here, or raise kafka.startup_timeout_s (now {self.timeout_s:g})",
            EXIT_UNREACHABLE,
        )


RUN_PORT_ADVICE = (
    "change exporters.prometheus.port (or exporters.prometheus.host), or pass run --metrics-port N (0: a free port)"
)


def listen_failure(host: str, port: int, error: OSError, *, advice: str = RUN_PORT_ADVICE) -> StartupFailure:
    """The one line for a metrics port that cannot be bound (taken, privileged, an address not on this host), ending
    with ``advice``: what changes the port for the command that failed."""
    # aiohttp's message repeats the address: the errno's own words are enough beside host:port.
    why = os.strerror(error.errno) if error.errno else str(error)
    if error.errno == errno.EADDRINUSE:
        why = "the port is taken (another process listens on it)"
    return StartupFailure(
        f"cannot serve /metrics, /healthz and /readyz on {host}:{port}: {why}: {advice}",
        EXIT_INVALID,
    )


class _ConnectErrors(logging.Filter):
    """Takes aiokafka's per-attempt connection errors out of the log (the wait's own WARNING says the same,
    throttled) and keeps the last one: it holds the socket error the raised exception lacks."""

    def __init__(self) -> None:
        super().__init__()
        self.last: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Unable connect to"):
            self.last = message.partition(": ")[2] or message
            return False
        return True


@contextmanager
def quiet_connect_errors() -> Iterator[_ConnectErrors]:
    """While the broker is awaited at start-up; afterwards a lost connection is logged as aiokafka does."""
    errors = _ConnectErrors()
    logger = logging.getLogger("aiokafka")
    logger.addFilter(errors)
    try:
        yield errors
    finally:
        logger.removeFilter(errors)
