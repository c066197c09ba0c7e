"""The metric families, declared in groups by what they describe: the build, runs, judges, exporters,
ingest, whole traces and conversations. Each group registers its families in the registry it is given; names, labels
and help texts are the contract of docs/metrics.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from exporters.prometheus.labels import (
    CONTENT_WAIT_OUTCOMES,
    DEAD_LETTER_REASONS,
    JUDGE_CALL_DURATION_BUCKETS,
    LIMITS,
    LOG_CONTENT_OUTCOMES,
    PREFIX,
    SCORE_BUCKETS,
    SCORE_LATENCY_BUCKETS,
    SESSION_CLOSE_REASONS,
    SESSION_DELAY_BUCKETS,
    SESSION_RESTORE_BUCKETS,
    SESSION_TURN_OUTCOMES,
    SESSION_TURNS_BUCKETS,
    TRACE_READY_REASONS,
    TRACE_WAIT_BUCKETS,
)

__all__ = [
    "ContentJoinFamilies",
    "DeadLetterCounts",
    "ExporterFamilies",
    "IngestFamilies",
    "JudgeFamilies",
    "RunFamilies",
    "SessionFamilies",
    "TraceFamilies",
    "register_build_info",
]

P = PREFIX


def register_build_info(registry: CollectorRegistry, version: str) -> Gauge:
    build_info = Gauge(
        f"{P}_build_info", "Always 1; the version label says which build runs.", ["version"], registry=registry
    )
    build_info.labels(version=version).set(1)
    return build_info


class RunFamilies:
    """Scores and scorer runs: what each finished or skipped run tells, and the configured scorers."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.score = Histogram(
            f"{P}_score",
            "Scores of successful runs, normalised to 0–1 by the scorer's scale.",
            ["scorer", "agent"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.scorer_runs = Counter(
            f"{P}_scorer_runs",
            "Scorer runs (or skipped candidate runs) by outcome.",
            ["scorer", "agent", "outcome"],
            registry=r,
        )
        self.duration = Histogram(
            f"{P}_scorer_run_duration_seconds",
            "Wall time of one scorer run, all steps and judge calls included.",
            ["scorer", "outcome"],
            buckets=JUDGE_CALL_DURATION_BUCKETS,
            registry=r,
        )
        self.score_latency = Histogram(
            f"{P}_score_latency_seconds",
            "End-to-end lag from the scored span's end to the export of its score.",
            ["scorer"],
            buckets=SCORE_LATENCY_BUCKETS,
            registry=r,
        )
        self.scorer_info = Gauge(
            f"{P}_scorer_info",
            "Always 1 per configured scorer: its kind, which way its score is better (higher or lower) and what one "
            "run scores (span, trace or session); alert rules join on it to read a rise of a lower-is-better score "
            "as the regression, and to tell conversation scores from per-run ones.",
            ["scorer", "kind", "direction", "scope"],
            registry=r,
        )
        self.in_flight = Gauge(f"{P}_runs_in_flight", "Scorer runs started and not yet exported.", registry=r)
        self.degraded = Counter(
            f"{P}_degraded_runs",
            "Runs scored without a part the scorer reads (missing: input, output, system, comma-separated): "
            "the score judged the rest.",
            ["scorer", "agent", "missing"],
            registry=r,
        )


class JudgeFamilies:
    """Judge calls as each ends (outcome, duration, tokens, cost), and each judge's gate (state, pause
    reason, holds, spend, shed runs)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.tokens = Counter(
            f"{P}_judge_tokens",
            "Judge tokens by type, counted when each call ends; status: success (the answer was used) or failed.",
            ["judge_model", "scorer", "type", "status"],
            registry=r,
        )
        self.call_duration = Histogram(
            f"{P}_judge_call_duration_seconds",
            "Duration of one judge HTTP call (gen_ai.client.operation.duration buckets).",
            ["judge_model", "outcome"],
            buckets=JUDGE_CALL_DURATION_BUCKETS,
            registry=r,
        )
        self.calls = Counter(
            f"{P}_judge_calls",
            "Judge HTTP calls by outcome, counted when each call ends, whatever becomes of its run.",
            ["judge_model", "outcome"],
            registry=r,
        )
        self.cost = Counter(
            f"{P}_judge_cost_usd",
            "Judge cost in USD: estimated from token prices (every call) or reported by the provider.",
            ["judge_model", "scorer", "source"],
            registry=r,
        )
        self.paused = Gauge(
            f"{P}_judge_paused",
            "1 while calls to this judge are held (circuit open or probing, paused on an auth/quota/model "
            "error), else 0.",
            ["judge_model"],
            registry=r,
        )
        self.state = Gauge(
            f"{P}_judge_state",
            "1 for the judge gate's current state (closed, open, half_open, paused), 0 for the others.",
            ["judge_model", "state"],
            registry=r,
        )
        self.pause_reason = Gauge(
            f"{P}_judge_pause_reason",
            "1 for the reason this judge is paused (authentication, payment_required, permission_denied, "
            "not_found: HTTP 401, 402 or insufficient_quota, 403, 404), also while its re-check call runs; "
            "0 for the others and whenever it is not paused.",
            ["judge_model", "reason"],
            registry=r,
        )
        self.held_runs = Gauge(
            f"{P}_judge_held_runs",
            "Runs waiting for this judge to recover (circuit open, paused, held at the spend cap); their "
            "records stay uncommitted.",
            ["judge_model"],
            registry=r,
        )
        self.oldest_hold = Gauge(
            f"{P}_judge_oldest_hold_seconds",
            "How long the longest-waiting held run has waited for this judge (0 without holds).",
            ["judge_model"],
            registry=r,
        )
        self.hold_duration = Histogram(
            f"{P}_judge_hold_seconds",
            "Length of each finished hold: a run's wait for the judge to recover.",
            ["judge_model"],
            buckets=SCORE_LATENCY_BUCKETS,
            registry=r,
        )
        self.spend = Gauge(
            f"{P}_judge_spend_usd",
            "Judge spend in USD within the current spend-cap window.",
            ["judge_model"],
            registry=r,
        )
        self.spend_cap = Gauge(
            f"{P}_judge_spend_cap_usd", "The configured spend cap in USD per window.", ["judge_model"], registry=r
        )
        self.structured_output = Gauge(
            f"{P}_judge_structured_output",
            "1 for the structured-output shape this judge's calls use (json_schema, json_object, prompt) once "
            "known: its setting, or what structured_output: auto learnt the server takes; 0 for the others.",
            ["judge_model", "shape"],
            registry=r,
        )
        self.shed = Counter(
            f"{P}_judge_shed",
            "Scorer runs shed before reaching the judge, by reason.",
            ["judge_model", "reason"],
            registry=r,
        )
        self.redactions = Counter(
            f"{P}_redactions",
            "Values of personal data replaced in runs before the judge read them (judge: its key under judges), "
            "by entity.",
            ["judge", "entity"],
            registry=r,
        )


class ExporterFamilies:
    """The sinks: confirmed checkpoints, pending and dropped items, optional signals turned off."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.up = Gauge(
            f"{P}_exporter_up",
            "1 while the exporter confirms its exports at checkpoints; 0 after 3 unconfirmed flushes in a row.",
            ["exporter"],
            registry=r,
        )
        self.flush_failures = Counter(
            f"{P}_exporter_flush_failures",
            "Checkpoint flushes the exporter did not confirm (an export failed or timed out): nothing committed.",
            ["exporter"],
            registry=r,
        )
        self.pending = Gauge(
            f"{P}_exporter_pending_items",
            "Items handed to the exporter and not yet confirmed (queued, in flight or kept for a resend).",
            ["exporter"],
            registry=r,
        )
        self.signal_disabled = Gauge(
            f"{P}_exporter_signal_disabled",
            "1 while an optional signal of the exporter is off because its receiver does not take it (OTLP "
            "evaluation log records: set exporters.otlp.events: span for such a receiver), else 0.",
            ["exporter", "signal"],
            registry=r,
        )
        self.dropped = Counter(
            f"{P}_exporter_dropped",
            "Items the exporter gave up on, logged with their score id: the destination can never take them "
            "(reason: rejected), or their span never reached it (span_not_found).",
            ["exporter", "reason"],
            registry=r,
        )


class DeadLetterCounts(Collector):
    """``scoring_sidecar_dead_letters_total{reason}``, every known reason exported from the first scrape
    on (zero included), so ``rate()`` and alert rules see the series at once."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._counts: dict[str, float] = dict.fromkeys(DEAD_LETTER_REASONS, 0.0)

    def add(self, reason: str, n: float) -> None:
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0.0) + n

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            counts = dict(self._counts)
        family = CounterMetricFamily(
            self._name,
            "Dead letters sent to the dead-letter topic (one per record and reason), by reason.",
            labels=["reason"],
        )
        for reason in sorted(counts):
            family.add_metric([reason], counts[reason])
        yield family

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(self._name, "", labels=["reason"])


class IngestFamilies:
    """Records and spans in: consumed, decoded, set aside, dead-lettered, and the consumer's lag."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.consumer_lag = Gauge(
            f"{P}_consumer_lag_records",
            "Records between the committed offset and the partition's high watermark.",
            ["topic", "partition"],
            registry=r,
        )
        self.records_consumed = Counter(f"{P}_records_consumed", "Kafka records consumed.", ["topic"], registry=r)
        self.spans_seen = Counter(f"{P}_spans_seen", "Spans decoded from consumed records.", registry=r)
        self.records_sampled_out = Counter(
            f"{P}_records_sampled_out",
            "Records whose key names a trace that every scorer samples out: done without being decoded.",
            ["topic"],
            registry=r,
        )
        self.spans_skipped = Counter(
            f"{P}_spans_skipped",
            "Candidate spans deliberately not scored at ingest, by reason.",
            ["reason"],
            registry=r,
        )
        self.dead_letters = DeadLetterCounts(f"{P}_dead_letters")
        r.register(self.dead_letters)
        self.dead_letters_refused = Counter(
            f"{P}_dead_letters_refused",
            "Dead letters the broker (or the producer) refused for good, by reason: each logged at ERROR, its record "
            "committed without it.",
            ["reason"],
            registry=r,
        )
        self.limit_hits = Counter(
            f"{P}_limit_hits",
            "Bounds on traced input hit, by limit (docs/limits.md): dead_letter_bytes (a dead letter cut to "
            "kafka.max_request_size), agent_label_chars (an agent name too long for a label), agent_labels (an "
            "agent past runtime.max_agent_labels, labelled other), runs_per_record (a record's runs past "
            "runtime.max_runs_per_record).",
            ["limit"],
            registry=r,
        )
        for reason in DEAD_LETTER_REASONS:
            self.dead_letters_refused.labels(reason)
        for limit in LIMITS:
            self.limit_hits.labels(limit)


class TraceFamilies:
    """Whole traces (``scope: trace``): the buffer, why and when each trace was taken out, late spans."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.buffered = Gauge(
            f"{P}_traces_buffered", "Traces waiting to be done before their trace-scope runs start.", registry=r
        )
        self.buffer_bytes = Gauge(f"{P}_trace_buffer_bytes", "Encoded size of the buffered traces' spans.", registry=r)
        self.ready = Counter(
            f"{P}_traces_ready",
            "Buffered traces taken out to be scored, by why: root_idle (root ended, then quiet for idle_s), "
            "max_wait (max_wait_s since the first span: scored incomplete), evicted (past max_trace_bytes), "
            "window_end (a backfill's window read to its end).",
            ["reason"],
            registry=r,
        )
        for reason in TRACE_READY_REASONS:
            self.ready.labels(reason=reason)
        self.assembly_wait = Histogram(
            f"{P}_trace_assembly_wait_seconds",
            "Time from a trace's first span arriving to the trace being taken out to be scored.",
            ["reason"],
            buckets=TRACE_WAIT_BUCKETS,
            registry=r,
        )
        self.late_spans = Counter(
            f"{P}_late_spans",
            "Spans that arrived for a trace the trace-scope scorer had already scored (not scored again).",
            ["scorer"],
            registry=r,
        )


class ContentJoinFamilies:
    """Content sent as OTLP log events (``kafka.log_topics``), joined to its spans: what became of it, what became of
    the LLM call spans that waited for it, and what the join holds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.log_content = Counter(
            f"{P}_log_content",
            "Spans' content read from log records, by outcome: joined (laid on its span), expired (no span took it "
            "within join_wait_s), evicted (let go at max_bytes), no_span (written outside a span), sampled_out.",
            ["outcome"],
            registry=r,
        )
        for outcome in LOG_CONTENT_OUTCOMES:
            self.log_content.labels(outcome=outcome)
        self.waits = Counter(
            f"{P}_content_waits",
            "LLM call spans without content of their own that waited for it from the logs topics, by outcome: "
            "joined, timed_out (join_wait_s passed: scored as they came), evicted (handed on at max_bytes).",
            ["outcome"],
            registry=r,
        )
        for outcome in CONTENT_WAIT_OUTCOMES:
            self.waits.labels(outcome=outcome)
        self.held_records = Gauge(
            f"{P}_content_join_records", "Span records waiting for their content from the logs topics.", registry=r
        )
        self.held_bytes = Gauge(
            f"{P}_content_join_bytes", "Bytes the content join holds: span records waiting and content.", registry=r
        )


class SessionFamilies:
    """Conversations (``scope: session``): turns by outcome, the windows held, why and how big each closed, the
    delay of their scores, the restores."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.turns = Counter(
            f"{P}_session_turns",
            "Turns of conversations by outcome: published (stage 1), no_conversation and sampled_out (not published), "
            "buffered, duplicate and late (stage 2).",
            ["outcome"],
            registry=r,
        )
        for outcome in SESSION_TURN_OUTCOMES:
            self.turns.labels(outcome=outcome)
        self.open = Gauge(
            f"{P}_sessions_open", "Windows of conversations held (open, or closed and waiting for runs).", registry=r
        )
        self.buffered_bytes = Gauge(
            f"{P}_session_buffered_bytes", "Bytes of the turn summaries held (against sessions.max_bytes).", registry=r
        )
        self.closed = Counter(
            f"{P}_sessions_closed",
            "Windows closed and scored, by reason: idle (complete), max_duration, max_turns, too_large, evicted "
            "(incomplete).",
            ["reason"],
            registry=r,
        )
        for reason in SESSION_CLOSE_REASONS:
            self.closed.labels(reason=reason)
        self.window_turns = Histogram(
            f"{P}_session_turns_per_window", "Turns per closed window.", buckets=SESSION_TURNS_BUCKETS, registry=r
        )
        self.delay = Histogram(
            f"{P}_session_score_delay_seconds",
            "From the last turn's end to its conversation's score (idle_s included).",
            ["scorer"],
            buckets=SESSION_DELAY_BUCKETS,
            registry=r,
        )
        self.restore = Histogram(
            f"{P}_session_restore_seconds",
            "Time to read an assigned partition of the internal topic from its beginning.",
            buckets=SESSION_RESTORE_BUCKETS,
            registry=r,
        )
