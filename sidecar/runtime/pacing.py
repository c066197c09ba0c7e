"""How long CPU work (ingest, trace assembly) may hold the event loop before it yields.

A judge call takes a few loop turns (the reply, the slot handed over, the next request sent): at a fixed
judge concurrency, turns held by other work divide the calls per second, while shorter slices cost more turns
in a CPU-bound process. The figures behind the value are in docs/benchmarks.md ("Ingest slices").
"""

from __future__ import annotations

__all__ = ["INGEST_SLICE_S"]

INGEST_SLICE_S = 0.005
