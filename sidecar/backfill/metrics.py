"""A backfill's metrics: the live service's families in a registry of the backfill process's own, every series
labelled ``mode="backfill"`` when served (``backfill --metrics-port``).

Prometheus stamps a sample with the time it scrapes it, not the time of the trace scored: a backfill's scores of
last week land in the dashboards *now*, as a burst. The label keeps that burst out of what watches the live
traffic (the shipped score rules read ``mode!="backfill"``) while the same dashboards can show the backfill's
progress, judge load and spend by selecting it (docs/backfill.md, docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

__all__ = ["MODE_LABEL", "mode_labelled"]

MODE_LABEL = "mode"


class _Labelled(Collector):
    def __init__(self, source: CollectorRegistry, label: str, value: str) -> None:
        self._source = source
        self._label = label
        self._value = value

    def collect(self) -> Iterable[Metric]:
        for family in self._source.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                Sample(s.name, {**s.labels, self._label: self._value}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            ]
            yield labelled


def mode_labelled(source: CollectorRegistry, mode: str = "backfill") -> CollectorRegistry:
    """A registry serving every series of ``source`` with ``mode`` added (read at each scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Labelled(source, MODE_LABEL, mode))
    return registry
