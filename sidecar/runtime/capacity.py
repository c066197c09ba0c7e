"""Whether intake may fetch more: the one place that adds up what the service holds in memory.

Runs in flight, the bytes of records held back by work, and each stage's own bound (the trace buffer) all
pause intake when full; nothing is dropped for lack of room: Kafka keeps the backlog.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sidecar.core.observers import ServiceObserver

__all__ = ["Capacity"]


class Capacity:
    def __init__(self, observer: ServiceObserver, runs_in_flight: Callable[[], int]) -> None:
        self.room = asyncio.Event()
        self.room.set()
        self._observer = observer
        self._runs_in_flight = runs_in_flight
        self._full: list[Callable[[], bool]] = []

    def bound(self, full: Callable[[], bool]) -> None:
        """Add a bound: intake pauses while ``full()`` is true."""
        self._full.append(full)

    def update(self) -> None:
        """Check the bounds after a change (runs started or ended, records held or released)."""
        if any(full() for full in self._full):
            self.room.clear()
        else:
            self.room.set()
        self._observer.runs_in_flight(self._runs_in_flight())
