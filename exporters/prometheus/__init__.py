"""Prometheus metrics: what SRE dashboards and alert rules read (names are a contract, see docs/metrics.md).

``SidecarMetrics`` owns its own ``CollectorRegistry`` (never the process-global one), so several
instances can live side by side (tests, embedded demos). Every label is bounded: scorer ids, agent
labels, judge models, topics and partitions come from configuration; outcomes, token types and reasons
from fixed sets, each read from where its names are declared (``labels``). Trace ids never become label
values: they go into exemplars, which only the OpenMetrics exposition carries (``exporters.http_server``
serves it when the scraper asks for it).

``SidecarMetrics`` is a ``ServiceObserver`` (``observer``): the service, the judge clients and the judge
gates report what happens to it, one method per event, and it turns every event into metrics
synchronously. The families it feeds are declared in groups (``families``: runs, judges, exporters,
ingest, whole traces).
"""

from __future__ import annotations

from exporters.prometheus.labels import (
    JUDGE_CALL_DURATION_BUCKETS,
    JUDGE_CALL_OUTCOMES,
    JUDGE_PAUSE_REASONS,
    JUDGE_STATES,
    PREFIX,
    RUN_OUTCOMES,
    SCORE_BUCKETS,
    SCORE_LATENCY_BUCKETS,
    SHED_REASONS,
    SKIP_OUTCOMES,
    TOKEN_TYPES,
    ScorerOutcome,
    judge_model_label,
    normalise_score,
)
from exporters.prometheus.observer import SidecarMetrics

__all__ = [
    "JUDGE_CALL_DURATION_BUCKETS",
    "JUDGE_CALL_OUTCOMES",
    "JUDGE_PAUSE_REASONS",
    "JUDGE_STATES",
    "PREFIX",
    "RUN_OUTCOMES",
    "SCORE_BUCKETS",
    "SCORE_LATENCY_BUCKETS",
    "SHED_REASONS",
    "SKIP_OUTCOMES",
    "TOKEN_TYPES",
    "ScorerOutcome",
    "SidecarMetrics",
    "judge_model_label",
    "normalise_score",
]
