"""How long CPU work (ingest, trace assembly) may hold the event loop before it yields, and the steady ticks of the
stages whose work is a matter of time passing (ready traces, closing windows, content waits ending).

A judge call takes a few loop turns (the reply, the slot handed over, the next request sent): at a fixed
judge concurrency, turns held by other work divide the calls per second, while shorter slices cost more turns
in a CPU-bound process. The figures behind the value are in docs/benchmarks.md ("Ingest slices").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["INGEST_SLICE_S", "ticks"]

INGEST_SLICE_S = 0.005


async def ticks(stop: asyncio.Event, every_s: float) -> AsyncIterator[None]:
    """One tick every ``every_s`` until ``stop`` is set (none after it, even mid-wait)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        if stop.is_set():
            return
        yield
