"""The interfaces of what the checkpoint flushes (``Flushable``) and of every score destination (``Sink``).

The runtime hands each finished scorer run to every sink with ``submit``; a sink may buffer. Before
committing Kafka offsets the runtime calls ``flush`` on every checkpointed part: an offset is committed only
after each has confirmed that everything handed to it before is exported (at-least-once, docs/delivery.md).
Parts never raise out of ``submit`` for export failures: they report them through ``flush`` returning
``False``, so the runtime commits nothing and the records are redelivered (score ids are deterministic, so
redelivery creates no second score). ``submit`` may wait for room when the sink is full: that is
backpressure.

``Flushable`` is everything but ``submit``: a publisher that the checkpoint must flush but that takes no
``ScoredRun`` (a publisher to an internal topic, of dead letters) implements it and fits the checkpoint.
A part may also tell why its destination refuses it for good as things stand (credentials, a wrong URL):
an optional ``problem`` attribute (``str | None``), read with :func:`problem_of` and shown by ``/readyz``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sidecar.core.scored import ScoredRun

__all__ = ["Flushable", "Sink", "problem_of"]


@runtime_checkable
class Flushable(Protocol):
    name: str

    async def start(self) -> None:
        """Connect. Called again after a start-up attempt failed (the broker not reachable yet): a part that
        started already must do nothing, one whose start failed tries again."""
        ...

    async def flush(self, timeout_s: float) -> bool:
        """True when everything handed over so far has been exported; False on failure or timeout."""
        ...

    @property
    def outstanding(self) -> int:
        """Items handed over and not yet confirmed (queued, in flight or kept for a resend)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class Sink(Flushable, Protocol):
    async def submit(self, run: ScoredRun) -> None:
        """Hand a finished run over. May wait for room; must not raise on export failures."""
        ...


def problem_of(part: Flushable) -> str | None:
    """The part's readiness problem (its optional ``problem`` attribute), ``None`` when it has none."""
    problem = getattr(part, "problem", None)
    return problem if isinstance(problem, str) and problem else None
