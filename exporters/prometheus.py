"""Prometheus metrics: what SRE dashboards and alert rules read (names are a contract, see docs/metrics.md).

``SidecarMetrics`` owns its own ``CollectorRegistry`` (never the process-global one), so several
instances can live side by side (tests, embedded demos). Every label is bounded: scorer ids, agent
labels, judge models, topics and partitions come from configuration; outcomes, token types and reasons
from fixed sets. Trace ids never become label values: they go into exemplars, which only the
OpenMetrics exposition carries (``exporters.http_server`` serves it when the scraper asks for it).

``SidecarMetrics`` is a ``ServiceObserver``: the service, the judge clients and the judge gates report
what happens to it (runs finished and skipped, records consumed, judge calls as each ends, judge states,
exporter flushes), and it turns every event into metrics synchronously.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.deadletters import DeadLetterReason
from sidecar.core.observers import IngestSkipReason, ServiceObserver, SkipOutcome
from sidecar.core.runs import ReadyReason
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall, JudgeCallOutcome

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
    "ShedReason",
    "SidecarMetrics",
    "SkipOutcome",
    "judge_model_label",
    "normalise_score",
]

log = logging.getLogger(__name__)

PREFIX: Final = "scoring_sidecar"

ScorerOutcome = Literal["scored", "failed", "not_scorable", "filtered", "sampled_out", "shed", "too_large"]
ShedReason = Literal["spend_cap", "circuit_open", "paused"]
JudgeState = Literal["closed", "open", "half_open", "paused"]
# Why a judge is paused (the judge gate's PauseReason): 401, 402 or insufficient_quota, 403, 404.
JudgePauseReason = Literal["authentication", "payment_required", "permission_denied", "not_found"]
TokenType = Literal["input", "output", "reasoning", "cached_input", "cache_creation"]

RUN_OUTCOMES: Final[tuple[str, ...]] = get_args(ScorerOutcome)
SKIP_OUTCOMES: Final[tuple[str, ...]] = get_args(SkipOutcome)
SHED_REASONS: Final[tuple[str, ...]] = get_args(ShedReason)
JUDGE_STATES: Final[tuple[str, ...]] = get_args(JudgeState)
JUDGE_PAUSE_REASONS: Final[tuple[str, ...]] = get_args(JudgePauseReason)
JUDGE_CALL_OUTCOMES: Final[tuple[str, ...]] = get_args(JudgeCallOutcome)
TOKEN_TYPES: Final[tuple[str, ...]] = get_args(TokenType)
# Spans skipped at ingest, by SkipCounts field (not scorer outcomes: internal and no_content never reach scorers).
SPAN_SKIP_REASONS: Final[tuple[str, ...]] = ("internal", "filtered", "sampled_out", "no_content")

# JudgeUsage field → the ``type`` label.
_USAGE_FIELDS: Final[tuple[tuple[str, TokenType], ...]] = (
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("reasoning_tokens", "reasoning"),
    ("cached_input_tokens", "cached_input"),
    ("cache_creation_input_tokens", "cache_creation"),
)

SCORE_BUCKETS: Final[tuple[float, ...]] = tuple(round(i / 10, 1) for i in range(1, 11))
# OTel GenAI semantic conventions, gen_ai.client.operation.duration (explicit bucket advice).
JUDGE_CALL_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
# Span end → score export: from a fast in-memory path (50 ms) to a backlog of ten minutes.
SCORE_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

# First span → trace ready: idle_s (a few seconds) plus the trace's own length, up to max_wait_s.
TRACE_WAIT_BUCKETS: Final[tuple[float, ...]] = (1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
TRACE_READY_REASONS: Final[tuple[ReadyReason, ...]] = ("root_idle", "max_wait", "evicted")


def judge_model_label(model: JudgeModel | str, provider: str | None = None) -> str:
    """The ``judge_model`` label: ``<provider>/<model>``, i.e. ``JudgeModel.litellm_model``.

    Executions record provider and model id separately; the runtime knows a ``JudgeModel``. Both map
    to the same value, so token, call and pause series of one judge join on the label.
    """
    if isinstance(model, JudgeModel):
        return model.litellm_model
    return f"{provider}/{model}" if provider else model


def normalise_score(score: float, scale: float = 1.0) -> float | None:
    """``score / scale`` clamped to [0, 1]; ``None`` for a non-finite score (nothing to observe)."""
    if not math.isfinite(score):
        return None
    return min(1.0, max(0.0, score / scale))


def _check_scale(scale: float) -> float:
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"a score scale must be a finite number > 0, got {scale!r}")
    return float(scale)


def _check(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")
    return value


class _DeadLetterCollector(Collector):
    """``scoring_sidecar_dead_letters_total{reason}``, every known reason exported from the first scrape
    on (zero included), so ``rate()`` and alert rules see the series at once."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._counts: dict[str, float] = {r.value: 0.0 for r in DeadLetterReason}

    def add(self, reason: str, n: float) -> None:
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0.0) + n

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            counts = dict(self._counts)
        family = CounterMetricFamily(
            self._name, "Records (or spans) sent to the dead-letter topic, by reason.", labels=["reason"]
        )
        for reason in sorted(counts):
            family.add_metric([reason], counts[reason])
        yield family

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self._name, "", labels=["reason"])


class SidecarMetrics(ServiceObserver):
    """Every metric of the sidecar, in a registry of its own (``registry``), fed as a ``ServiceObserver``."""

    def __init__(
        self,
        *,
        version: str = __version__,
        registry: CollectorRegistry | None = None,
        scales: Mapping[str, float] | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._clock_ns = clock_ns
        self._scales: dict[str, float] = {k: _check_scale(v) for k, v in (scales or {}).items()}
        self._judges: set[str] = set()
        # labels() validates and takes a lock on every call; with bounded labels the children can be kept.
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._judges_lock = threading.Lock()
        r = self.registry
        p = PREFIX

        self.build_info = Gauge(
            f"{p}_build_info", "Always 1; the version label says which build runs.", ["version"], registry=r
        )
        self.build_info.labels(version=version).set(1)

        # -- scores and runs ----------------------------------------------------------------------
        self.score = Histogram(
            f"{p}_score",
            "Scores of successful runs, normalised to 0–1 by the scorer's scale.",
            ["scorer", "agent"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.scorer_runs = Counter(
            f"{p}_scorer_runs",
            "Scorer runs (or skipped candidate runs) by outcome.",
            ["scorer", "agent", "outcome"],
            registry=r,
        )
        self.scorer_run_duration = Histogram(
            f"{p}_scorer_run_duration_seconds",
            "Wall time of one scorer run, all steps and judge calls included.",
            ["scorer", "outcome"],
            buckets=JUDGE_CALL_DURATION_BUCKETS,
            registry=r,
        )
        self.score_latency = Histogram(
            f"{p}_score_latency_seconds",
            "End-to-end lag from the scored span's end to the export of its score.",
            ["scorer"],
            buckets=SCORE_LATENCY_BUCKETS,
            registry=r,
        )
        self.scorer_info = Gauge(
            f"{p}_scorer_info",
            "Always 1 per configured scorer: its kind and which way its score is better (higher or lower); "
            "alert rules join on it to read a rise of a lower-is-better score as the regression.",
            ["scorer", "kind", "direction"],
            registry=r,
        )
        self.runs_in_flight_gauge = Gauge(
            f"{p}_runs_in_flight", "Scorer runs started and not yet exported.", registry=r
        )

        # -- judge ----------------------------------------------------------------------------------
        self.judge_tokens = Counter(
            f"{p}_judge_tokens",
            "Judge tokens by type, counted when each call ends; status: success (the answer was used) or failed.",
            ["judge_model", "scorer", "type", "status"],
            registry=r,
        )
        self.judge_call_duration = Histogram(
            f"{p}_judge_call_duration_seconds",
            "Duration of one judge HTTP call (gen_ai.client.operation.duration buckets).",
            ["judge_model", "outcome"],
            buckets=JUDGE_CALL_DURATION_BUCKETS,
            registry=r,
        )
        self.judge_calls = Counter(
            f"{p}_judge_calls",
            "Judge HTTP calls by outcome, counted when each call ends, whatever becomes of its run.",
            ["judge_model", "outcome"],
            registry=r,
        )
        self.judge_cost = Counter(
            f"{p}_judge_cost_usd",
            "Judge cost in USD: estimated from token prices (every call) or reported by the provider.",
            ["judge_model", "scorer", "source"],
            registry=r,
        )
        self.judge_paused = Gauge(
            f"{p}_judge_paused",
            "1 while calls to this judge are held (circuit open or probing, paused on an auth/quota/model "
            "error), else 0.",
            ["judge_model"],
            registry=r,
        )
        self.judge_state = Gauge(
            f"{p}_judge_state",
            "1 for the judge gate's current state (closed, open, half_open, paused), 0 for the others.",
            ["judge_model", "state"],
            registry=r,
        )
        self.judge_pause_reason = Gauge(
            f"{p}_judge_pause_reason",
            "1 for the reason this judge is paused (authentication, payment_required, permission_denied, "
            "not_found: HTTP 401, 402 or insufficient_quota, 403, 404), also while its re-check call runs; "
            "0 for the others and whenever it is not paused.",
            ["judge_model", "reason"],
            registry=r,
        )
        self.judge_held_runs = Gauge(
            f"{p}_judge_held_runs",
            "Runs waiting for this judge to recover (circuit open, paused, held at the spend cap); their "
            "records stay uncommitted.",
            ["judge_model"],
            registry=r,
        )
        self.judge_oldest_hold = Gauge(
            f"{p}_judge_oldest_hold_seconds",
            "How long the longest-waiting held run has waited for this judge (0 without holds).",
            ["judge_model"],
            registry=r,
        )
        self.judge_hold_duration = Histogram(
            f"{p}_judge_hold_seconds",
            "Length of each finished hold: a run's wait for the judge to recover.",
            ["judge_model"],
            buckets=SCORE_LATENCY_BUCKETS,
            registry=r,
        )
        self.judge_spend_gauge = Gauge(
            f"{p}_judge_spend_usd",
            "Judge spend in USD within the current spend-cap window.",
            ["judge_model"],
            registry=r,
        )
        self.judge_spend_cap = Gauge(
            f"{p}_judge_spend_cap_usd", "The configured spend cap in USD per window.", ["judge_model"], registry=r
        )
        self.judge_shed = Counter(
            f"{p}_judge_shed",
            "Scorer runs shed before reaching the judge, by reason.",
            ["judge_model", "reason"],
            registry=r,
        )

        # -- exporters ------------------------------------------------------------------------------
        self.exporter_up = Gauge(
            f"{p}_exporter_up",
            "1 while the exporter confirms its exports at checkpoints; 0 after 3 unconfirmed flushes in a row.",
            ["exporter"],
            registry=r,
        )
        self.exporter_flush_failures = Counter(
            f"{p}_exporter_flush_failures",
            "Checkpoint flushes the exporter did not confirm (an export failed or timed out): nothing committed.",
            ["exporter"],
            registry=r,
        )
        self.exporter_pending = Gauge(
            f"{p}_exporter_pending_items",
            "Items handed to the exporter and not yet confirmed (queued, in flight or kept for a resend).",
            ["exporter"],
            registry=r,
        )
        self.exporter_signal_disabled = Gauge(
            f"{p}_exporter_signal_disabled",
            "1 while an optional signal of the exporter is off because its receiver does not take it (OTLP "
            "evaluation log records: set exporters.otlp.evaluation_logs: false for such a receiver), else 0.",
            ["exporter", "signal"],
            registry=r,
        )
        self.exporter_dropped_total = Counter(
            f"{p}_exporter_dropped",
            "Items the exporter gave up on, logged with their score id: the destination can never take them "
            "(reason: rejected), or their span never reached it (span_not_found).",
            ["exporter", "reason"],
            registry=r,
        )

        # -- ingest ---------------------------------------------------------------------------------
        self.consumer_lag_gauge = Gauge(
            f"{p}_consumer_lag_records",
            "Records between the committed offset and the partition's high watermark.",
            ["topic", "partition"],
            registry=r,
        )
        self.records_consumed = Counter(f"{p}_records_consumed", "Kafka records consumed.", ["topic"], registry=r)
        self.spans_seen = Counter(f"{p}_spans_seen", "Spans decoded from consumed records.", registry=r)
        self.spans_skipped_total = Counter(
            f"{p}_spans_skipped",
            "Candidate spans deliberately not scored at ingest, by reason.",
            ["reason"],
            registry=r,
        )
        # -- whole traces (scope: trace) -----------------------------------------------------------
        self.traces_buffered = Gauge(
            f"{p}_traces_buffered", "Traces waiting to be done before their trace-scope runs start.", registry=r
        )
        self.trace_buffer_bytes = Gauge(
            f"{p}_trace_buffer_bytes", "Encoded size of the buffered traces' spans.", registry=r
        )
        self.traces_ready = Counter(
            f"{p}_traces_ready",
            "Buffered traces taken out to be scored, by why: root_idle (root ended, then quiet for idle_s), "
            "max_wait (max_wait_s since the first span: scored incomplete), evicted (past max_trace_bytes).",
            ["reason"],
            registry=r,
        )
        for reason in TRACE_READY_REASONS:
            self.traces_ready.labels(reason=reason)
        self.trace_assembly_wait = Histogram(
            f"{p}_trace_assembly_wait_seconds",
            "Time from a trace's first span arriving to the trace being taken out to be scored.",
            ["reason"],
            buckets=TRACE_WAIT_BUCKETS,
            registry=r,
        )
        self.late_spans_total = Counter(
            f"{p}_late_spans",
            "Spans that arrived for a trace the trace-scope scorer had already scored (not scored again).",
            ["scorer"],
            registry=r,
        )
        self.degraded_runs = Counter(
            f"{p}_degraded_runs",
            "Runs scored without a part the scorer reads (missing: input, output, system, comma-separated): "
            "the score judged the rest.",
            ["scorer", "agent", "missing"],
            registry=r,
        )
        self._dead_letters = _DeadLetterCollector(f"{p}_dead_letters")
        r.register(self._dead_letters)

    def _child(self, metric: MetricWrapperBase, *label_values: str) -> Any:
        """``metric.labels(*label_values)`` (values in declaration order), looked up once per series."""
        key = (id(metric), label_values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*label_values)
        return child

    # -- configuration ------------------------------------------------------------------------------
    def set_scorer_scale(self, scorer: str, scale: float) -> None:
        """A scorer whose scores run 0..scale (e.g. 0..10): observed as score / scale."""
        self._scales[scorer] = _check_scale(scale)

    def register_scorer(
        self, scorer: str, *, kind: str, direction: str, scale: float = 1.0, scope: str = "span"
    ) -> None:
        """A configured scorer: its info series (kind, direction) and its scale; a trace-scope scorer's late
        spans at 0."""
        _check(direction, ("higher", "lower"), "score direction")
        self.set_scorer_scale(scorer, scale)
        self.scorer_info.labels(scorer=scorer, kind=kind, direction=direction).set(1)
        if scope == "trace":
            self._child(self.late_spans_total, scorer)

    def scale_for(self, scorer: str) -> float:
        return self._scales.get(scorer, 1.0)

    def register_judge(self, judge_model: JudgeModel | str) -> str:
        """Create a judge's series at zero (calls by outcome, paused), so rates and alerts see them early."""
        label = judge_model_label(judge_model)
        if label in self._judges:  # every judge call passes here: no lock once registered
            return label
        with self._judges_lock:
            if label in self._judges:
                return label
            self._judges.add(label)
        for outcome in JUDGE_CALL_OUTCOMES:
            self.judge_calls.labels(judge_model=label, outcome=outcome)
        self.judge_paused.labels(judge_model=label)
        for state in JUDGE_STATES:
            self.judge_state.labels(judge_model=label, state=state).set(1 if state == "closed" else 0)
        self.judge_held_runs.labels(judge_model=label)
        self.judge_oldest_hold.labels(judge_model=label)
        return label

    # -- runs -----------------------------------------------------------------------------------------
    def observe_score(
        self,
        scorer: str,
        agent: str,
        score: float,
        *,
        scale: float | None = None,
        trace_id: str | None = None,
    ) -> float | None:
        """Observe one score, normalised (``scale`` defaults to the scorer's). Returns what was observed."""
        value = normalise_score(score, _check_scale(scale) if scale is not None else self.scale_for(scorer))
        if value is not None:
            self._child(self.score, scorer, agent).observe(value, exemplar=_exemplar(trace_id))
        return value

    def count_run(
        self, scorer: str, agent: str, outcome: ScorerOutcome, n: float = 1, *, trace_id: str | None = None
    ) -> None:
        _check(outcome, RUN_OUTCOMES, "scorer outcome")
        self._child(self.scorer_runs, scorer, agent, outcome).inc(n, exemplar=_exemplar(trace_id))

    def count_skipped(self, scorer: str, outcome: SkipOutcome, n: float = 1, *, agent: str = "unknown") -> None:
        """Runs that never happened: filtered, sampled_out, shed, too_large (scorer ``""`` when not per scorer)."""
        _check(outcome, SKIP_OUTCOMES, "skip outcome")
        if n:
            self._child(self.scorer_runs, scorer, agent, outcome).inc(n)

    def observe_score_latency(self, scorer: str, span_end_unix_nano: int, *, trace_id: str | None = None) -> None:
        """Observe now − span end (skipped when the span end is unknown; clock skew clamps to 0)."""
        if span_end_unix_nano <= 0:
            return
        lag_s = max(0.0, (self._clock_ns() - span_end_unix_nano) / 1e9)
        self._child(self.score_latency, scorer).observe(lag_s, exemplar=_exemplar(trace_id))

    def set_runs_in_flight(self, n: int) -> None:
        self.runs_in_flight_gauge.set(n)

    def observe_run(self, run: ScoredRun) -> None:
        """Everything a finished run tells: outcome, score, end-to-end lag, duration. Its judge calls were
        counted as each ended (``judge_call_finished``): a run's record misses the calls of runs that are
        shed, time out or are cancelled, and the metrics must match the provider's bill."""
        target = run.request.target
        scorer, agent = run.scorer_id, run.agent_label
        self.count_run(scorer, agent, run.outcome, trace_id=target.trace_id)
        duration_s = (run.finished_unix_nano - run.started_unix_nano) / 1e9
        if duration_s >= 0:
            self._child(self.scorer_run_duration, scorer, run.outcome).observe(duration_s)
        if run.outcome == "scored" and run.result is not None and run.result.score is not None:
            self.observe_score(scorer, agent, run.result.score, trace_id=target.trace_id)
            self.observe_score_latency(scorer, target.end_time_unix_nano, trace_id=target.trace_id)
        if run.degraded:
            self._child(self.degraded_runs, scorer, agent, ",".join(run.missing)).inc()

    # -- judge ----------------------------------------------------------------------------------------
    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        """One judge HTTP call ended (``JudgeCallObserver``): the call by outcome, its duration, its tokens
        (``status`` success when its answer was used), estimated and provider-reported cost."""
        label = self.register_judge(model)
        self._child(self.judge_calls, label, call.outcome).inc()
        self._child(self.judge_call_duration, label, call.outcome).observe(max(0.0, call.duration_s))
        scorer = request.scorer
        usage = call.usage
        if usage is not None:
            status = "success" if call.outcome == "ok" else "failed"
            for field, token_type in _USAGE_FIELDS:
                tokens: int | None = getattr(usage, field)
                if tokens:
                    self._child(self.judge_tokens, label, scorer, token_type, status).inc(tokens)
        estimated = call.estimated_cost_usd
        if estimated is not None and math.isfinite(estimated) and estimated >= 0:
            self._child(self.judge_cost, label, scorer, "estimated").inc(estimated)
        cost = call.provider_cost
        if cost is not None and cost.unit.upper() == "USD" and math.isfinite(cost.amount) and cost.amount >= 0:
            self._child(self.judge_cost, label, scorer, "provider").inc(cost.amount)

    def set_judge_state(self, judge_model: JudgeModel | str, state: JudgeState) -> None:
        """The gate's state: ``judge_state`` one-hot, and ``judge_paused`` 1 in every state that holds calls."""
        _check(state, JUDGE_STATES, "judge state")
        label = self.register_judge(judge_model)
        for each in JUDGE_STATES:
            self._child(self.judge_state, label, each).set(1 if each == state else 0)
        self._child(self.judge_paused, label).set(0 if state == "closed" else 1)

    def track_judge_pause(self, judge_model: JudgeModel | str, reason: Callable[[], str | None]) -> None:
        """The reason of the judge's current pause (``None``: not paused), read from its gate at scrape time."""
        label = self.register_judge(judge_model)
        for each in JUDGE_PAUSE_REASONS:
            self._child(self.judge_pause_reason, label, each).set_function(lambda each=each: float(reason() == each))

    def track_judge_holds(
        self, judge_model: JudgeModel | str, held: Callable[[], int], oldest_s: Callable[[], float]
    ) -> None:
        """Held runs and the oldest hold's age, read from the judge's gate at scrape time."""
        label = self.register_judge(judge_model)
        self._child(self.judge_held_runs, label).set_function(lambda: float(held()))
        self._child(self.judge_oldest_hold, label).set_function(lambda: float(oldest_s()))

    def observe_judge_hold(self, judge_model: JudgeModel | str, seconds: float) -> None:
        self._child(self.judge_hold_duration, self.register_judge(judge_model)).observe(max(0.0, seconds))

    def set_judge_spend(self, judge_model: JudgeModel | str, spent_usd: float, cap_usd: float | None = None) -> None:
        """Spend within the current cap window (and the cap, when one is configured)."""
        label = self.register_judge(judge_model)
        self._child(self.judge_spend_gauge, label).set(spent_usd)
        if cap_usd is not None:
            self._child(self.judge_spend_cap, label).set(cap_usd)

    def count_judge_shed(
        self,
        judge_model: JudgeModel | str,
        reason: ShedReason,
        n: float = 1,
        *,
        scorer: str = "",
        agent: str = "unknown",
    ) -> None:
        """Runs shed for a judge (over its spend cap); also counted as scorer outcome ``shed``."""
        _check(reason, SHED_REASONS, "shed reason")
        if n:
            self.judge_shed.labels(judge_model=self.register_judge(judge_model), reason=reason).inc(n)
            self.count_skipped(scorer, "shed", n, agent=agent)

    # -- ingest ---------------------------------------------------------------------------------------
    def set_consumer_lag(self, topic: str, partition: int, lag: int) -> None:
        self.consumer_lag_gauge.labels(topic=topic, partition=str(partition)).set(max(0, lag))

    def remove_consumer_lag(self, topic: str, partition: int) -> None:
        """Drop a partition's lag series (the partition was revoked: another replica reports it now)."""
        with contextlib.suppress(KeyError):
            self.consumer_lag_gauge.remove(topic, str(partition))

    def count_dead_letters(self, reason: DeadLetterReason | str, n: int = 1) -> None:
        self._dead_letters.add(str(reason), n)

    def register_exporter(
        self, name: str, pending: Callable[[], int] | None = None, *, drop_reasons: Iterable[str] = ()
    ) -> None:
        """An exporter's series: up (1 until flushes fail), flush failures at 0, dropped items at 0 per reason
        it can drop for, and its pending items read at scrape time from ``pending`` when it can tell."""
        self.exporter_up.labels(exporter=name).set(1)
        self.exporter_flush_failures.labels(exporter=name)
        for reason in drop_reasons:
            self.exporter_dropped_total.labels(exporter=name, reason=reason)
        if pending is not None:
            self.exporter_pending.labels(exporter=name).set_function(lambda: float(pending()))

    def track_exporter_signal(self, name: str, signal: str, disabled: Callable[[], bool]) -> None:
        """An exporter's optional signal: 1 while it is off, read at scrape time."""
        self.exporter_signal_disabled.labels(exporter=name, signal=signal).set_function(
            lambda: 1.0 if disabled() else 0.0
        )

    def exporter_dropped(self, name: str, reason: str, n: int = 1) -> None:
        self._child(self.exporter_dropped_total, name, reason).inc(n)

    # -- ServiceObserver ------------------------------------------------------------------------------
    def record_consumed(self, topic: str, spans_seen: int) -> None:
        self._child(self.records_consumed, topic).inc()
        if spans_seen:
            self.spans_seen.inc(spans_seen)

    def spans_skipped(self, reason: IngestSkipReason, n: int) -> None:
        _check(reason, SPAN_SKIP_REASONS, "span skip reason")
        if n:
            self._child(self.spans_skipped_total, reason).inc(n)

    def dead_lettered(self, reason: str, n: int = 1) -> None:
        self._dead_letters.add(reason, n)

    def consumer_lag(self, topic: str, partition: int, lag: int | None) -> None:
        if lag is None:
            self.remove_consumer_lag(topic, partition)
        else:
            self.set_consumer_lag(topic, partition, lag)

    def runs_skipped(self, scorer: str, agent: str, outcome: SkipOutcome, n: int, *, judge: str = "") -> None:
        if outcome == "shed":
            self.count_judge_shed(judge or "unknown", "spend_cap", n, scorer=scorer, agent=agent)
        else:
            self.count_skipped(scorer, outcome, n, agent=agent)

    def run_finished(self, run: ScoredRun) -> None:
        self.observe_run(run)

    def runs_in_flight(self, n: int) -> None:
        self.set_runs_in_flight(n)

    def judge_state_changed(self, judge: str, state: str) -> None:
        self.set_judge_state(judge, state)  # type: ignore[arg-type]

    def trace_buffer(self, traces: int, span_bytes: int) -> None:
        self.traces_buffered.set(traces)
        self.trace_buffer_bytes.set(span_bytes)

    def trace_ready(self, reason: ReadyReason, waited_s: float) -> None:
        self._child(self.traces_ready, reason).inc()
        self._child(self.trace_assembly_wait, reason).observe(max(0.0, waited_s))

    def late_spans(self, scorer: str, n: int) -> None:
        self._child(self.late_spans_total, scorer).inc(n)

    def judge_spend(self, judge: str, spent_usd: float, cap_usd: float | None) -> None:
        self.set_judge_spend(judge, spent_usd, cap_usd)

    def judge_hold_ended(self, judge: str, seconds: float) -> None:
        self.observe_judge_hold(judge, seconds)

    def exporter_flushed(self, name: str, *, confirmed: bool, up: bool) -> None:
        if not confirmed:
            self._child(self.exporter_flush_failures, name).inc()
        self._child(self.exporter_up, name).set(1 if up else 0)


def _exemplar(trace_id: str | None) -> dict[str, str] | None:
    return {"trace_id": trace_id} if trace_id else None
