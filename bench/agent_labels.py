"""CPU per run of the metrics' ``agent`` label, bounded in length (docs/limits.md) against the label as it was before
(bounded in count only), in the same run.

    .venv/bin/python bench/agent_labels.py [--calls 500000] [--rounds 5]

Every scored run asks ``AgentLabels.label`` for its agent's label and the Prometheus observer bounds it again;
the traffic is typical: 50 agents with names of 10–40 characters, plus a share of spans without a name. Rounds
alternate between the two so that the host's load falls on both alike. Prints the medians and
``ratio=<bounded / count only>``; docs/limits.md records the figures.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sidecar.core.label_values import bounded_label
from sidecar.runtime.agent_labels import OTHER, UNKNOWN, AgentLabels


class CountOnlyLabels:
    """The label before its length was bounded: the first ``limit`` names, then ``other`` (the warning left out)."""

    def __init__(self, limit: int = 50) -> None:
        self._labels: dict[str, str] = {}
        self._free = limit

    def label(self, agent: str | None) -> str:
        if not agent:
            return UNKNOWN
        label = self._labels.get(agent)
        if label is not None:
            return label
        if self._free > 0:
            self._free -= 1
            label = agent
        else:
            label = OTHER
        self._labels[agent] = label
        return label


def _traffic(calls: int) -> list[str | None]:
    rng = random.Random(36)
    names = [f"agent-{i}-" + "x" * rng.randint(0, 30) for i in range(50)]
    return [None if rng.random() < 0.05 else rng.choice(names) for _ in range(calls)]


def _time(label: Callable[[str | None], str], traffic: list[str | None], bound: bool) -> float:
    started = time.process_time_ns()
    if bound:
        for agent in traffic:
            bounded_label(label(agent))
    else:
        for agent in traffic:
            label(agent)
    return (time.process_time_ns() - started) / len(traffic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    traffic = _traffic(args.calls)
    before: list[float] = []
    after: list[float] = []
    for _ in range(args.rounds):
        before.append(_time(CountOnlyLabels().label, traffic, bound=False))
        after.append(_time(AgentLabels().label, traffic, bound=True))
    old, new = statistics.median(before), statistics.median(after)
    print(f"count_only_ns_per_run={old:.0f} bounded_ns_per_run={new:.0f} ratio={new / old:.2f}")


if __name__ == "__main__":
    main()
