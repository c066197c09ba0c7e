"""One ``/metrics`` for a pod that runs several worker processes.

Each worker keeps its own registry (prometheus_client's multiprocess mode drops exemplars and cannot
serve callback gauges), and serves it on a Unix socket only the supervisor reads. At each scrape the
supervisor fetches every worker's OpenMetrics text, adds a ``worker`` label to each sample and
serves the union: one family per name, exemplars kept. A worker label is bounded (the configured
count) and the shipped rules and dashboards aggregate with ``sum``/``max``/``min by``, so they read a
multi-worker pod as they read a single process.

``WorkerPoolMetrics`` adds what only the supervisor knows: how many workers are configured, which
answered the last scrape, and how often each was restarted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from exporters.prometheus import PREFIX

__all__ = ["WORKER_LABEL", "MergedWorkerMetrics", "WorkerPoolMetrics", "merge_worker_metrics"]

WORKER_LABEL = "worker"


def merge_worker_metrics(expositions: Mapping[str, str]) -> tuple[list[Metric], list[str]]:
    """Worker id → its OpenMetrics text, merged into one family per metric name with a ``worker`` label.

    Returns the families and the ids of the workers whose text was left out: not valid OpenMetrics, or a
    metric whose type differs from another worker's (a half-upgraded pod must not break the scrape).
    """
    families: dict[str, Metric] = {}
    invalid: list[str] = []
    for worker, text in expositions.items():
        try:
            parsed = list(text_string_to_metric_families(text))  # type: ignore[no-untyped-call]
        except ValueError:
            invalid.append(worker)
            continue
        if any(f.name in families and families[f.name].type != f.type for f in parsed):
            invalid.append(worker)
            continue
        for family in parsed:
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            merged.samples.extend(
                Sample(s.name, {**s.labels, WORKER_LABEL: worker}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )
    return list(families.values()), invalid


class MergedWorkerMetrics(Collector):
    """The workers' families as of the last ``update`` (the supervisor refreshes it before each scrape)."""

    def __init__(self) -> None:
        self._families: list[Metric] = []

    def update(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return list(self._families)


class WorkerPoolMetrics:
    """The supervisor's registry: its own gauges and counters plus every worker's metrics."""

    def __init__(self, workers: int, *, prefix: str = PREFIX) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.workers = Gauge(f"{prefix}_workers", "Worker processes configured (runtime.workers).", registry=r)
        self.workers.set(workers)
        self.worker_up = Gauge(
            f"{prefix}_worker_up",
            "1 while the worker process runs and answered the last metrics fetch, else 0.",
            [WORKER_LABEL],
            registry=r,
        )
        self.worker_restarts = Counter(
            f"{prefix}_worker_restarts",
            "Worker processes restarted after exiting on their own (crash, kill).",
            [WORKER_LABEL],
            registry=r,
        )
        for index in range(workers):
            self.worker_up.labels(worker=str(index)).set(0)
            self.worker_restarts.labels(worker=str(index))
        self.merged = MergedWorkerMetrics()
        r.register(self.merged)
