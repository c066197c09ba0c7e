"""The token bucket behind a judge's RPM and TPM limits (:mod:`sidecar.runtime.judge_gate`)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """A token bucket taken by reservation: each taker is told how long to wait for its share."""

    def __init__(self, per_minute: float, burst: int | None, clock: Callable[[], float]) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(burst if burst is not None else max(1, math.ceil(self.rate)))
        self.level = self.capacity
        self._clock = clock
        self._updated = clock()

    def _refill(self) -> None:
        now = self._clock()
        self.level = min(self.capacity, self.level + (now - self._updated) * self.rate)
        self._updated = now

    def reserve(self, n: float) -> float:
        """Take ``n`` tokens now (possibly into debt); return the seconds to wait before using them."""
        self._refill()
        wait = max(0.0, (min(n, self.capacity) - self.level) / self.rate)
        self.level -= n
        return wait

    def try_take(self, n: float) -> bool:
        """Take ``n`` tokens if they are there now (no debt, no wait)."""
        self._refill()
        if self.level < min(n, self.capacity):
            return False
        self.level -= n
        return True

    def refund(self, n: float) -> None:
        self._refill()
        self.level = min(self.capacity, self.level + n)
