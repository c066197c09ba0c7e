"""The agent versions' gauges (docs/versions.md): every scored run of a traced version fed to the version
comparisons (``sidecar.versions``), their state served at each scrape.

A ``ServiceObserver`` (``run_finished``) and a registry ``Collector`` at once: the event loop feeds it, the metrics
server's encoding thread reads it, both under one lock. The series are built from the comparisons' state at each
scrape, so a version displaced or forgotten, or a comparison that ended, leaves no stale series behind. The
``version`` and ``reference`` labels are bounded per agent by ``versions.max_versions``; runs of the ``other`` agent
label (agents past ``runtime.max_agent_labels``) are not compared: that label mixes agents.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporters.prometheus.labels import PREFIX, check_label, check_scale, normalise_score
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver
from sidecar.versions.comparison import ComparisonSettings, Observation, VersionComparisons

__all__ = ["MIXED_AGENT_LABEL", "VersionMetrics"]

MIXED_AGENT_LABEL: Final = "other"  # sidecar.runtime.agent_labels.OTHER: many agents under one label
_VERSION = ["agent", "scorer", "version"]
_COMPARED = ["agent", "scorer", "version", "reference"]


class VersionMetrics(ServiceObserver, Collector):
    """``scoring_sidecar_version_*``: runs and mean score per version, and per agent and scorer the newest version's
    comparison with its reference (estimate, bounds, verdict, the reference window it reads)."""

    def __init__(
        self, settings: ComparisonSettings, *, registry: CollectorRegistry | None = None, prefix: str = PREFIX
    ) -> None:
        self._comparisons = VersionComparisons(settings)
        self._scorers: dict[str, tuple[bool, float]] = {}  # scorer id -> (higher is better, scale)
        self._lock = threading.Lock()
        self._prefix = prefix
        if registry is not None:
            registry.register(self)

    def register_scorer(self, scorer: str, *, direction: str, scale: float = 1.0) -> None:
        """A configured scorer: which way is better, and the scale its scores are normalised by."""
        check_label(direction, ("higher", "lower"), "score direction")
        self._scorers[scorer] = (direction == "higher", check_scale(scale))

    def run_finished(self, run: ScoredRun) -> None:
        result = run.result
        version = run.request.target.version
        known = self._scorers.get(run.scorer_id)
        if (
            run.outcome != "scored"
            or result is None
            or result.score is None
            or version is None
            or known is None
            or run.agent_label == MIXED_AGENT_LABEL
        ):
            return
        higher, scale = known
        score = normalise_score(result.score, scale)
        if score is None:
            return
        observation = Observation(
            agent=run.agent_label,
            scorer=run.scorer_id,
            version=version,
            score=score,
            time_ms=run.finished_unix_nano // 1_000_000,  # the score record's timestamp: what `compare` reads
            higher_is_better=higher,
            score_id=run.score_id,
        )
        with self._lock:
            self._comparisons.observe(observation)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            versions = self._comparisons.versions()
            comparisons = self._comparisons.comparisons()
        families = self._families()
        runs, mean, window, delta, lower, upper, verdict = families
        for each in versions:
            labels = [each.agent, each.scorer, each.version]
            runs.add_metric(labels, each.runs)
            mean.add_metric(labels, each.mean)
        for comparison in comparisons:
            labels = [comparison.agent, comparison.scorer, comparison.version, comparison.reference]
            window.add_metric([*labels, comparison.mode], 1)
            verdict.add_metric(labels, comparison.verdict)
            for family, value in ((delta, comparison.delta), (lower, comparison.lower), (upper, comparison.upper)):
                if value is not None and math.isfinite(value):
                    family.add_metric(labels, value)
        return families

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def _families(self) -> list[GaugeMetricFamily]:
        p = f"{self._prefix}_version"
        return [
            GaugeMetricFamily(
                f"{p}_runs",
                "Scored runs of the agent's version counted by this process (since first seen).",
                labels=_VERSION,
            ),
            GaugeMetricFamily(f"{p}_mean", "Mean score (0–1) of those runs.", labels=_VERSION),
            GaugeMetricFamily(
                f"{p}_comparison",
                "Always 1 per comparison: which reference runs it reads (pending, concurrent, before).",
                labels=[*_COMPARED, "reference_window"],
            ),
            GaugeMetricFamily(
                f"{p}_delta",
                "Mean score of the version minus its reference's, in the scorer's better direction (< 0: worse).",
                labels=_COMPARED,
            ),
            GaugeMetricFamily(f"{p}_delta_lower", "Lower bound of the delta's confidence sequence.", labels=_COMPARED),
            GaugeMetricFamily(f"{p}_delta_upper", "Upper bound of the delta's confidence sequence.", labels=_COMPARED),
            GaugeMetricFamily(
                f"{p}_verdict",
                "-1: worse than its reference by more than min_effect; +1: better by more; 0: undecided.",
                labels=_COMPARED,
            ),
        ]
