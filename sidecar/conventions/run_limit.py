"""How many runs one record (or one ready trace) may start: ``runtime.max_runs_per_record`` (docs/limits.md).

A record is written by whoever can write to the traces topic: 2,000 agent spans in 340 KB would otherwise start
2,000 runs per scorer at once, past ``max_in_flight_runs`` and every judge's pace, bounded only by sampling and
the spend caps. Past the bound, the runs kept are shared evenly among the scorers that have any (a scorer with
fewer keeps all of its own, the rest share what it leaves), each keeping its first runs in the record's order: the
same record always keeps the same runs, so a redelivery scores the same spans under the same score ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["limit_runs"]

S = TypeVar("S")
R = TypeVar("R")


def limit_runs(work: Sequence[tuple[S, R]], limit: int) -> tuple[list[tuple[S, R]], int]:
    """At most ``limit`` of ``work`` (pairs of a scorer and one of its runs, in order; a scorer is told apart from
    another by identity), and how many were left out."""
    if len(work) <= limit:
        return list(work), 0
    counts: dict[int, int] = {}
    for scorer, _ in work:
        counts[id(scorer)] = counts.get(id(scorer), 0) + 1
    shares = _fair_shares(counts, limit)
    kept: list[tuple[S, R]] = []
    for scorer, run in work:
        if shares[id(scorer)] > 0:
            shares[id(scorer)] -= 1
            kept.append((scorer, run))
    return kept, len(work) - len(kept)


def _fair_shares(counts: dict[int, int], limit: int) -> dict[int, int]:
    """Round robin in the scorers' order, one run at a time to each scorer that has more: even shares, and the
    remainder of an uneven split to the scorers first in order. Called only past the limit, at most ``limit``
    rounds of the record's scorers."""
    shares = dict.fromkeys(counts, 0)
    left = max(0, limit)
    while left:
        wanting = [scorer for scorer in counts if shares[scorer] < counts[scorer]]
        if not wanting:
            break
        for scorer in wanting[:left]:
            shares[scorer] += 1
        left -= min(left, len(wanting))
    return shares
