"""Finished runs of agent versions, as the service hands them to its observers and sinks, for the version
comparison tests: one scored run of a version, and a canary's traffic (a second version beside the first)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

from sidecar.core import ScoredRun
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.scoring import AgentRunInput
from sidecar.scoring.types import ScorerRunResult

__all__ = ["canary_runs", "scored"]


def scored(
    scorer: str,
    version: str | None,
    score: float,
    i: int,
    *,
    agent: str = "support-bot",
    outcome: str = "scored",
    start_ns: int = 1_700_000_000_000_000_000,
) -> ScoredRun:
    """The ``i``-th run (its trace id from ``i``), ending at ``start_ns`` + i × 100 ms + 50 ms."""
    target = SpanTarget(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", agent_name=agent, version=version)
    return ScoredRun(
        request=ScorerRunRequest(target=target, input=AgentRunInput(), output=()),
        scorer_id=scorer,
        scorer_name=scorer,
        scorer_fingerprint=f"{scorer}-1",
        outcome=outcome,  # type: ignore[arg-type]
        result=ScorerRunResult(run_id=f"r{i}", score=score),
        error=None,
        started_unix_nano=start_ns + i * 100_000_000,
        finished_unix_nano=start_ns + i * 100_000_000 + 50_000_000,
        agent_label=agent,
    )


def canary_runs(
    runs: int, *, seed: int = 1, start_ns: int | None = None, worse: float = 0.15, before: int = 200
) -> Iterator[ScoredRun]:
    """support-bot 1.0 alone for ``before`` runs, then 1.1 beside it (half the traffic): on ``helpfulness`` (higher
    is better) 1.1 is ``worse`` lower, on ``tone`` the same. Each run is scored by both scorers."""
    rng = random.Random(seed)
    start = time.time_ns() - (2 * runs + 10) * 100_000_000 if start_ns is None else start_ns  # all in the past
    for i in range(runs):
        version = "1.0" if i < before or rng.random() < 0.5 else "1.1"
        base = 0.9 * rng.betavariate(8, 2)  # mean 0.72, sd 0.11
        yield scored("helpfulness", version, base - (worse if version == "1.1" else 0.0) + 0.1, 2 * i, start_ns=start)
        yield scored("tone", version, 0.9 * rng.betavariate(7, 3), 2 * i + 1, start_ns=start)
