"""The concurrency limit of a judge (:mod:`sidecar.runtime.judge_gate`): slots taken in arrival order."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

__all__ = ["CallSlots"]


class CallSlots:
    """At most ``n`` calls in flight; the others queue in arrival order. A free slot is taken synchronously
    (``try_take``), so an uncontended call pays no await and no timer."""

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot just as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes to the next in line
                return
        self.free += 1
