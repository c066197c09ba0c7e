"""CPU per scored run of the version comparisons (``VersionMetrics.run_finished``: the comparison's confidence
sequences updated, docs/versions.md), against the metrics' own per-run work in the same run
(``SidecarMetrics.run_finished``: counters, histograms, exemplars), as a ratio.

    .venv/bin/python bench/versions.py [--runs 20000] [--rounds 5]

Each round feeds N finished runs of a canary (two versions of one agent, two scorers) to a fresh ``SidecarMetrics``
and to a fresh ``VersionMetrics``, in process CPU time, alternating which goes first. The last line prints
``versions_us_per_run=... metrics_us_per_run=... ratio=...`` (medians of the rounds); docs/versions.md records it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry

from exporters.prometheus import SidecarMetrics
from exporters.prometheus.versions import VersionMetrics
from sidecar.core import ScoredRun
from sidecar.versions.comparison import ComparisonSettings
from tests.support.versions import canary_runs


def _cpu_us_per_run(feed: Callable[[ScoredRun], None], runs: list[ScoredRun]) -> float:
    started = time.process_time()
    for run in runs:
        feed(run)
    return (time.process_time() - started) / len(runs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    runs = list(canary_runs(args.runs // 2, start_ns=1_700_000_000_000_000_000))
    versions_us, metrics_us = [], []
    for round_ in range(args.rounds):
        metrics = SidecarMetrics()
        for scorer in ("helpfulness", "tone"):
            metrics.register_scorer(scorer, kind="python", direction="higher")
        versions = VersionMetrics(ComparisonSettings(), registry=CollectorRegistry())
        for scorer in ("helpfulness", "tone"):
            versions.register_scorer(scorer, direction="higher")
        pair = [("metrics", metrics.run_finished), ("versions", versions.run_finished)]
        for name, feed in pair if round_ % 2 == 0 else reversed(pair):
            (metrics_us if name == "metrics" else versions_us).append(_cpu_us_per_run(feed, runs))
        print(f"round {round_ + 1}: versions {versions_us[-1]:.1f} us/run, metrics {metrics_us[-1]:.1f} us/run")
    v, m = statistics.median(versions_us), statistics.median(metrics_us)
    print(f"versions_us_per_run={v:.1f} metrics_us_per_run={m:.1f} ratio={v / m:.2f}")


if __name__ == "__main__":
    main()
