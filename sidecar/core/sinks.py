"""The one interface every destination implements (Kafka score records, OTLP spans, …).

The runtime hands each finished scorer run to every sink with ``submit``; a sink may buffer. Before
committing Kafka offsets the runtime calls ``flush``: an offset is committed only after every sink has
confirmed that everything submitted before it is exported (at-least-once, docs/delivery.md). Sinks never
raise out of ``submit`` for export failures: they report them through ``flush`` returning ``False``, so
the runtime commits nothing and the records are redelivered (score ids are deterministic, so redelivery
creates no second score). ``submit`` may wait for room when the sink is full: that is backpressure.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sidecar.core.scored import ScoredRun

__all__ = ["Sink"]


@runtime_checkable
class Sink(Protocol):
    name: str

    async def start(self) -> None:
        """Connect. Called again after a start-up attempt failed (the broker not reachable yet): a sink that
        started already must do nothing, one whose start failed tries again."""
        ...

    async def submit(self, run: ScoredRun) -> None:
        """Hand a finished run over. May wait for room; must not raise on export failures."""
        ...

    async def flush(self, timeout_s: float) -> bool:
        """True when everything submitted so far has been exported; False on failure or timeout."""
        ...

    @property
    def outstanding(self) -> int:
        """Items submitted and not yet confirmed (queued, in flight or kept for a resend)."""
        ...

    async def close(self) -> None: ...
