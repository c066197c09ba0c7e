"""``SidecarMetrics``: the service's event stream turned into metrics, one observer method per event.

The assembly registers what is known at start (scorers, judges, exporters, and the gauges read from a
judge's gate or a sink at scrape time); everything else arrives as ``ServiceObserver`` events from the
service, the judge clients and the judge gates, and becomes metrics synchronously.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.metrics import MetricWrapperBase

from exporters.prometheus.alignment import FEEDBACK_OUTCOMES, AlignmentFamilies
from exporters.prometheus.families import (
    ContentJoinFamilies,
    ExporterFamilies,
    IngestFamilies,
    JudgeFamilies,
    RunFamilies,
    SessionFamilies,
    TraceFamilies,
    register_build_info,
)
from exporters.prometheus.labels import (
    CONTENT_WAIT_OUTCOMES,
    JUDGE_CALL_OUTCOMES,
    JUDGE_PAUSE_REASONS,
    JUDGE_STATES,
    LOG_CONTENT_OUTCOMES,
    RUN_OUTCOMES,
    SESSION_CLOSE_REASONS,
    SESSION_TURN_OUTCOMES,
    SHED_REASONS,
    SKIP_OUTCOMES,
    SPAN_SKIP_REASONS,
    STRUCTURED_OUTPUT_SHAPES,
    USAGE_FIELDS,
    check_label,
    check_scale,
    judge_model_label,
    normalise_score,
)
from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.label_values import bounded_label
from sidecar.core.observers import (
    ContentWaitOutcome,
    FeedbackOutcome,
    IngestSkipReason,
    JudgeState,
    LimitName,
    LogContentOutcome,
    ServiceObserver,
    SessionTurnOutcome,
    SkipOutcome,
)
from sidecar.core.runs import SCOPES, ReadyReason, SessionCloseReason
from sidecar.scoring.agreement import AgreementStats
from sidecar.scoring.judge.errors import ShedReason
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall

__all__ = ["SidecarMetrics"]


@dataclass(slots=True)
class _RunSeries:
    """The series one finished run updates, per (scorer, agent, outcome); the score's series are made on the first
    score (a scorer that never scores shows none)."""

    runs: Any
    duration: Any
    scale: float
    score: Any = None
    latency: Any = None
    session_delay: Any = None


# Counters and histograms export no ``<name>_created`` series: a start time per series (hundreds of them) that no
# dashboard or alert reads, and that rate() already handles through counter resets. Process-wide in
# prometheus_client, and the sidecar owns its process.
disable_created_metrics()  # type: ignore[no-untyped-call]


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
        self._scales: dict[str, float] = {k: check_scale(v) for k, v in (scales or {}).items()}
        self._run_series: dict[tuple[str, str, str], _RunSeries] = {}
        self._registered_judges: set[str] = set()
        self._judges_lock = threading.Lock()
        # labels() validates and takes a lock on every call; with bounded labels the children can be kept.
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        register_build_info(self.registry, version)
        self.runs = RunFamilies(self.registry)
        self.judges = JudgeFamilies(self.registry)
        self.exporters = ExporterFamilies(self.registry)
        self.ingest = IngestFamilies(self.registry)
        self.traces = TraceFamilies(self.registry)
        self.sessions = SessionFamilies(self.registry)
        self.content = ContentJoinFamilies(self.registry)
        self.alignment = AlignmentFamilies(self.registry)

    def _child(self, metric: MetricWrapperBase, *label_values: str) -> Any:
        """``metric.labels(*label_values)`` (values in declaration order), looked up once per series."""
        key = (id(metric), label_values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*label_values)
        return child

    # -- what is known at start ---------------------------------------------------------------------
    def set_scorer_scale(self, scorer: str, scale: float) -> None:
        """A scorer whose scores run 0..scale (e.g. 0..10): observed as score / scale."""
        self._scales[scorer] = check_scale(scale)
        for key in [key for key in self._run_series if key[0] == scorer]:
            del self._run_series[key]  # their scale changed

    def register_scorer(
        self,
        scorer: str,
        *,
        kind: str,
        direction: str,
        scale: float = 1.0,
        scope: str = "span",
        late_spans: bool = False,
        judge_model: JudgeModel | str | None = None,
    ) -> None:
        """A configured scorer: its info series (kind, direction, scope) and its scale; ``late_spans``: its stage counts
        spans that arrive for a trace it already scored (the series at 0 from the start); ``judge_model``: the judge
        its prompt steps call, whose cost for it starts at 0 (a judge with no price, the stand-in, costs nothing:
        the dashboards' cost panels read 0, not "no data")."""
        check_label(direction, ("higher", "lower"), "score direction")
        check_label(scope, SCOPES, "scope")
        self.set_scorer_scale(scorer, scale)
        self.runs.scorer_info.labels(scorer=scorer, kind=kind, direction=direction, scope=scope).set(1)
        if late_spans:
            self._child(self.traces.late_spans, scorer)
        if judge_model is not None:
            label = self.register_judge(judge_model)
            for source in ("estimated", "provider"):
                self._child(self.judges.cost, label, scorer, source)

    def register_judge(self, judge_model: JudgeModel | str) -> str:
        """Create a judge's series at zero (calls by outcome, paused), so rates and alerts see them early."""
        label = judge_model_label(judge_model)
        if label in self._registered_judges:  # every judge call passes here: no lock once registered
            return label
        with self._judges_lock:
            if label in self._registered_judges:
                return label
            self._registered_judges.add(label)
        judges = self.judges
        for outcome in JUDGE_CALL_OUTCOMES:
            judges.calls.labels(judge_model=label, outcome=outcome)
        judges.paused.labels(judge_model=label)
        for state in JUDGE_STATES:
            judges.state.labels(judge_model=label, state=state).set(1 if state == "closed" else 0)
        judges.held_runs.labels(judge_model=label)
        judges.oldest_hold.labels(judge_model=label)
        judges.spend.labels(judge_model=label)  # nothing spent yet; every priced call moves it
        return label

    def track_judge_pause(self, judge_model: JudgeModel | str, reason: Callable[[], str | None]) -> None:
        """The reason of the judge's current pause (``None``: not paused), read from its gate at scrape time."""
        label = self.register_judge(judge_model)
        for each in JUDGE_PAUSE_REASONS:
            self._child(self.judges.pause_reason, label, each).set_function(lambda each=each: float(reason() == each))

    def register_redactions(self, judge: str, entities: Iterable[str]) -> None:
        """A judge that redacts: its series at zero for every entity it may replace (its configured entities:
        the label's values are bounded by them)."""
        for entity in entities:
            self._child(self.judges.redactions, judge, entity)

    def track_judge_holds(
        self, judge_model: JudgeModel | str, held: Callable[[], int], oldest_s: Callable[[], float]
    ) -> None:
        """Held runs and the oldest hold's age, read from the judge's gate at scrape time."""
        label = self.register_judge(judge_model)
        self._child(self.judges.held_runs, label).set_function(lambda: float(held()))
        self._child(self.judges.oldest_hold, label).set_function(lambda: float(oldest_s()))

    def register_exporter(
        self, name: str, pending: Callable[[], int] | None = None, *, drop_reasons: Iterable[str] = ()
    ) -> None:
        """An exporter's series: up (1 until flushes fail), flush failures at 0, dropped items at 0 per reason
        it can drop for, and its pending items read at scrape time from ``pending`` when it can tell."""
        exporters = self.exporters
        exporters.up.labels(exporter=name).set(1)
        exporters.flush_failures.labels(exporter=name)
        for reason in drop_reasons:
            exporters.dropped.labels(exporter=name, reason=reason)
        if pending is not None:
            exporters.pending.labels(exporter=name).set_function(lambda: float(pending()))

    def track_exporter_signal(self, name: str, signal: str, disabled: Callable[[], bool]) -> None:
        """An exporter's optional signal: 1 while it is off, read at scrape time."""
        self.exporters.signal_disabled.labels(exporter=name, signal=signal).set_function(
            lambda: 1.0 if disabled() else 0.0
        )

    # -- ingest ---------------------------------------------------------------------------------------
    def record_consumed(self, topic: str, spans_seen: int) -> None:
        self._child(self.ingest.records_consumed, topic).inc()
        if spans_seen:
            self.ingest.spans_seen.inc(spans_seen)

    def record_sampled_out(self, topic: str) -> None:
        self._child(self.ingest.records_sampled_out, topic).inc()

    def spans_skipped(self, reason: IngestSkipReason, n: int) -> None:
        check_label(reason, SPAN_SKIP_REASONS, "span skip reason")
        if n:
            self._child(self.ingest.spans_skipped, reason).inc(n)

    def dead_lettered(self, reason: str, n: int = 1) -> None:
        self.ingest.dead_letters.add(reason, n)

    def dead_letter_refused(self, reason: str, n: int = 1) -> None:
        self._child(self.ingest.dead_letters_refused, reason).inc(n)

    def limit_hit(self, limit: LimitName, n: int = 1) -> None:
        self._child(self.ingest.limit_hits, limit).inc(n)

    def consumer_lag(self, topic: str, partition: int, lag: int | None) -> None:
        # Not through _child: a revoked partition's series is removed, and a kept child would outlive it.
        if lag is None:
            with contextlib.suppress(KeyError):
                self.ingest.consumer_lag.remove(topic, str(partition))
        else:
            self.ingest.consumer_lag.labels(topic=topic, partition=str(partition)).set(max(0, lag))

    # -- whole traces ---------------------------------------------------------------------------------
    def trace_buffer(self, traces: int, span_bytes: int) -> None:
        self.traces.buffered.set(traces)
        self.traces.buffer_bytes.set(span_bytes)

    def trace_ready(self, reason: ReadyReason, waited_s: float) -> None:
        self._child(self.traces.ready, reason).inc()
        self._child(self.traces.assembly_wait, reason).observe(max(0.0, waited_s))

    def late_spans(self, scorer: str, n: int) -> None:
        self._child(self.traces.late_spans, scorer).inc(n)

    # -- content from the logs topics -----------------------------------------------------------------
    def log_content(self, outcome: LogContentOutcome, n: int = 1) -> None:
        check_label(outcome, LOG_CONTENT_OUTCOMES, "log content outcome")
        if n:
            self._child(self.content.log_content, outcome).inc(n)

    def content_waits(self, outcome: ContentWaitOutcome, n: int = 1) -> None:
        check_label(outcome, CONTENT_WAIT_OUTCOMES, "content wait outcome")
        if n:
            self._child(self.content.waits, outcome).inc(n)

    def content_join_held(self, records: int, held_bytes: int) -> None:
        self.content.held_records.set(records)
        self.content.held_bytes.set(held_bytes)

    # -- conversations --------------------------------------------------------------------------------
    def session_turns(self, outcome: SessionTurnOutcome, n: int = 1) -> None:
        check_label(outcome, SESSION_TURN_OUTCOMES, "session turn outcome")
        if n:
            self._child(self.sessions.turns, outcome).inc(n)

    def session_buffer(self, sessions: int, turn_bytes: int) -> None:
        self.sessions.open.set(sessions)
        self.sessions.buffered_bytes.set(turn_bytes)

    def session_closed(self, reason: SessionCloseReason, turns: int) -> None:
        check_label(reason, SESSION_CLOSE_REASONS, "session close reason")
        self._child(self.sessions.closed, reason).inc()
        self.sessions.window_turns.observe(turns)

    def session_restored(self, topic: str, partition: int, seconds: float, records: int) -> None:
        self.sessions.restore.observe(max(0.0, seconds))

    # -- runs -----------------------------------------------------------------------------------------
    def runs_skipped(
        self,
        scorer: str,
        agent: str,
        outcome: SkipOutcome,
        n: int,
        *,
        judge: str = "",
        shed_reason: ShedReason = "spend_cap",
    ) -> None:
        """Skipped runs by outcome (scorer ``""`` when not per scorer); shed runs also by judge and reason."""
        check_label(outcome, SKIP_OUTCOMES, "skip outcome")
        if outcome == "shed":
            check_label(shed_reason, SHED_REASONS, "shed reason")
        if not n:
            return
        if outcome == "shed":
            self._child(self.judges.shed, self.register_judge(judge or "unknown"), shed_reason).inc(n)
        self._child(self.runs.scorer_runs, scorer, bounded_label(agent), outcome).inc(n)

    def run_finished(self, run: ScoredRun) -> None:
        """Everything a finished run tells: outcome, duration, score and end-to-end lag (both normalised or
        clamped), missing parts. Its judge calls were counted as each ended (``judge_call_finished``): a run's
        record misses the calls of runs that are shed, time out or are cancelled, and the metrics must match
        the provider's bill."""
        # The runtime's agent labels are bounded already (AgentLabels); a run labelled elsewhere is bounded here.
        scorer, agent, outcome = run.scorer_id, bounded_label(run.agent_label), run.outcome
        series = self._run_series.get((scorer, agent, outcome))
        if series is None:
            series = self._series_of_runs(scorer, agent, outcome)
        target = run.request.target
        exemplar = _exemplar(target.trace_id)
        series.runs.inc(1, exemplar=exemplar)
        duration_s = (run.finished_unix_nano - run.started_unix_nano) / 1e9
        if duration_s >= 0:
            series.duration.observe(duration_s)
        result = run.result
        if outcome == "scored" and result is not None and result.score is not None:
            value = normalise_score(result.score, series.scale)
            if value is not None:
                if series.score is None:
                    series.score = self._child(self.runs.score, scorer, agent)
                series.score.observe(value, exemplar=exemplar)
            span_end = target.end_time_unix_nano
            if span_end > 0:  # unknown span end: no lag to tell; clock skew clamps to 0
                lag_s = max(0.0, (self._clock_ns() - span_end) / 1e9)
                # A conversation's score waits idle_s after its last turn by design: its own histogram, so that the
                # per-run latency (and its alerts) keep meaning the pipeline's lag.
                if run.request.session is not None:
                    if series.session_delay is None:
                        series.session_delay = self._child(self.sessions.delay, scorer)
                    latency = series.session_delay
                else:
                    if series.latency is None:
                        series.latency = self._child(self.runs.score_latency, scorer)
                    latency = series.latency
                latency.observe(lag_s, exemplar=exemplar)
        if run.degraded:
            self._child(self.runs.degraded, scorer, agent, ",".join(run.missing)).inc()

    def _series_of_runs(self, scorer: str, agent: str, outcome: str) -> _RunSeries:
        """The series a run of ``scorer`` on ``agent`` ending in ``outcome`` updates, looked up once (labels are
        bounded: scorers are configured, agents capped by ``max_agent_labels``, outcomes fixed)."""
        check_label(outcome, RUN_OUTCOMES, "scorer outcome")
        runs = self.runs
        series = self._run_series[(scorer, agent, outcome)] = _RunSeries(
            runs=self._child(runs.scorer_runs, scorer, agent, outcome),
            duration=self._child(runs.duration, scorer, outcome),
            scale=self._scales.get(scorer, 1.0),
        )
        return series

    def runs_in_flight(self, n: int) -> None:
        self.runs.in_flight.set(n)

    # -- judges ---------------------------------------------------------------------------------------
    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        """One judge HTTP call ended (``JudgeCallObserver``): the call by outcome, its duration, its tokens
        (``status`` success when its answer was used), estimated and provider-reported cost."""
        judges = self.judges
        label = self.register_judge(model)
        self._child(judges.calls, label, call.outcome).inc()
        self._child(judges.call_duration, label, call.outcome).observe(max(0.0, call.duration_s))
        scorer = request.scorer
        usage = call.usage
        if usage is not None:
            status = "success" if call.outcome == "ok" else "failed"
            for field, token_type in USAGE_FIELDS:
                tokens: int | None = getattr(usage, field)
                if tokens:
                    self._child(judges.tokens, label, scorer, token_type, status).inc(tokens)
        estimated = call.estimated_cost_usd
        if estimated is not None and math.isfinite(estimated) and estimated >= 0:
            self._child(judges.cost, label, scorer, "estimated").inc(estimated)
        cost = call.provider_cost
        if cost is not None and cost.unit.upper() == "USD" and math.isfinite(cost.amount) and cost.amount >= 0:
            self._child(judges.cost, label, scorer, "provider").inc(cost.amount)

    def judge_structured_output(self, judge: str, shape: str) -> None:
        """``judge_structured_output`` one-hot: the shape the judge's calls use, once known."""
        check_label(shape, STRUCTURED_OUTPUT_SHAPES, "structured-output shape")
        label = self.register_judge(judge)
        for each in STRUCTURED_OUTPUT_SHAPES:
            self._child(self.judges.structured_output, label, each).set(1 if each == shape else 0)

    def judge_state_changed(self, judge: str, state: JudgeState) -> None:
        """``judge_state`` one-hot, and ``judge_paused`` 1 in every state that holds calls."""
        check_label(state, JUDGE_STATES, "judge state")
        label = self.register_judge(judge)
        for each in JUDGE_STATES:
            self._child(self.judges.state, label, each).set(1 if each == state else 0)
        self._child(self.judges.paused, label).set(0 if state == "closed" else 1)

    def judge_spend(self, judge: str, spent_usd: float, cap_usd: float | None) -> None:
        """Spend within the current cap window (and the cap, when one is configured)."""
        label = self.register_judge(judge)
        self._child(self.judges.spend, label).set(spent_usd)
        if cap_usd is not None:
            self._child(self.judges.spend_cap, label).set(cap_usd)

    def judge_hold_ended(self, judge: str, seconds: float) -> None:
        self._child(self.judges.hold_duration, self.register_judge(judge)).observe(max(0.0, seconds))

    def redacted(self, judge: str, counts: Mapping[str, int]) -> None:
        for entity, n in counts.items():
            self._child(self.judges.redactions, judge, entity).inc(n)

    # -- exporters ------------------------------------------------------------------------------------
    def exporter_flushed(self, name: str, *, confirmed: bool, up: bool) -> None:
        if not confirmed:
            self._child(self.exporters.flush_failures, name).inc()
        self._child(self.exporters.up, name).set(1 if up else 0)

    def exporter_dropped(self, name: str, reason: str, n: int = 1) -> None:
        self._child(self.exporters.dropped, name, reason).inc(n)

    # -- human feedback and the judge canary -----------------------------------------------------------
    def set_agreement_floor(self, scorer: str, floor: float) -> None:
        """The floor ``JudgeDisagreesWithHumans`` holds ``scorer``'s agreement to (and its counters at 0)."""
        alignment = self.alignment
        alignment.min_agreement.labels(scorer=scorer).set(floor)
        for agreed in ("true", "false"):
            self._child(alignment.pairs, scorer, agreed)
        self._child(alignment.unmatched, scorer)

    def set_canary_bounds(self, scorer: str, min_agreement: float, max_drift: float) -> None:
        """What ``JudgeDrift`` holds ``scorer``'s canary to (and its counters at 0)."""
        alignment = self.alignment
        alignment.canary_min_agreement.labels(scorer=scorer).set(min_agreement)
        alignment.canary_max_drift.labels(scorer=scorer).set(max_drift)
        for outcome in ("scored", "failed"):
            self._child(alignment.canary_items, scorer, outcome)

    def feedback_received(self, outcome: FeedbackOutcome) -> None:
        check_label(outcome, FEEDBACK_OUTCOMES, "feedback outcome")
        self._child(self.alignment.records, outcome).inc()

    def feedback_paired(self, scorer: str, agreed: bool) -> None:
        self._child(self.alignment.pairs, scorer, "true" if agreed else "false").inc()

    def feedback_unmatched(self, scorer: str, n: int) -> None:
        if n:
            self._child(self.alignment.unmatched, scorer).inc(n)

    def feedback_held(self, feedback: int, scores: int) -> None:
        self._child(self.alignment.held, "feedback").set(feedback)
        self._child(self.alignment.held, "scores").set(scores)

    def judge_human_agreement(self, scorer: str, stats: AgreementStats) -> None:
        alignment = self.alignment
        self._child(alignment.agreement, scorer).set(_or_nan(stats.share))
        self._child(alignment.kappa, scorer).set(_or_nan(stats.kappa))
        self._child(alignment.mae, scorer).set(_or_nan(stats.mae))
        self._child(alignment.window_pairs, scorer).set(stats.pairs)

    def canary_finished(
        self, scorer: str, stats: AgreementStats, mean_score: float | None, failed: int, baseline: float | None
    ) -> None:
        alignment = self.alignment
        self._child(alignment.canary_items, scorer, "scored").inc(stats.pairs)
        self._child(alignment.canary_items, scorer, "failed").inc(failed)
        if stats.pairs:  # a round the judge answered nothing of leaves the last values (the failures say why)
            self._child(alignment.canary_agreement, scorer).set(_or_nan(stats.share))
            self._child(alignment.canary_score, scorer).set(_or_nan(mean_score))
        if baseline is not None:
            self._child(alignment.canary_baseline, scorer).set(baseline)


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def _exemplar(trace_id: str | None) -> dict[str, str] | None:
    return {"trace_id": trace_id} if trace_id else None
