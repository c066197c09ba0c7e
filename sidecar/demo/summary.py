"""The demo's live table: an observer of the service's event stream, rendered every ``--interval``."""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sidecar.app.judge_health import JudgeHealth
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver, SkipOutcome
from sidecar.scoring.agreement import AgreementStats
from sidecar.scoring.judge.errors import ShedReason
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall
from sidecar.settings import EvalSettings

__all__ = [
    "LATENCY_WINDOW_S",
    "PRICE_REFERENCE_MODEL",
    "DemoSummary",
    "lower_is_better",
    "percentile",
    "render_summary",
]

PRICE_REFERENCE_MODEL = "openai/gpt-4o-mini"  # what the stand-in's tokens would cost with a small real model
# Latency percentiles cover this recent window, so the table shows how the pipeline is doing now.
LATENCY_WINDOW_S = 60.0


def lower_is_better(settings: EvalSettings) -> frozenset[str]:
    """The ids of the configured scorers whose kind reads lower as better (toxicity, bias, hallucination)."""
    return frozenset(
        scorer.id for scorer in settings.scorers if scorer.prebuilt is not None and scorer.prebuilt.direction == "lower"
    )


def percentile(q: float, values: Sequence[float]) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank); ``None`` without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class _Cell:
    scored: int = 0
    failed: int = 0
    not_scorable: int = 0
    shed: int = 0
    score_sum: float = 0.0

    @property
    def average(self) -> float | None:
        return self.score_sum / self.scored if self.scored else None


class _Window:
    """Samples of the last ``LATENCY_WINDOW_S`` seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, value: float) -> None:
        self._samples.append((self._clock(), value))

    def values(self) -> list[float]:
        horizon = self._clock() - LATENCY_WINDOW_S
        while self._samples and self._samples[0][0] < horizon:
            self._samples.popleft()
        return [value for _, value in self._samples]


@dataclass
class DemoSummary(ServiceObserver):
    """What the service reported so far (counts since the start; latencies over the last minute)."""

    clock: Callable[[], float] = time.monotonic
    wall_clock_ns: Callable[[], int] = time.time_ns
    cells: dict[tuple[str, str], _Cell] = field(default_factory=dict)  # (agent, scorer) →
    records_consumed: int = 0
    spans_seen: int = 0
    dead_letters: int = 0
    in_flight: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    judge_calls: Counter[str] = field(default_factory=Counter)  # outcome →
    # Scorers whose averages read the other way round: the table says so, or 0.00 toxicity looks like a fault.
    lower_is_better: frozenset[str] = frozenset()
    # The reason behind failures, holds and sheds, in words: a count alone does not say what to fix.
    health: JudgeHealth = field(init=False)
    # The judge's agreement with the demo's reviewer (docs/feedback.md), per scorer, as the gauges say it.
    agreement: dict[str, AgreementStats] = field(default_factory=dict)
    # The judge canary's last round per scorer: its agreement with the labels, over how many items, the baseline.
    canary: dict[str, tuple[float, int, float | None]] = field(default_factory=dict)
    _score_latency: dict[str, _Window] = field(default_factory=dict)  # scorer →
    _judge_latency: _Window | None = None

    def __post_init__(self) -> None:
        self.health = JudgeHealth(clock=self.clock)

    def cell(self, agent: str, scorer: str) -> _Cell:
        return self.cells.setdefault((agent, scorer), _Cell())

    @property
    def judge_errors(self) -> int:
        return sum(n for outcome, n in self.judge_calls.items() if outcome != "ok")

    def judge_latencies(self) -> list[float]:
        return self._judge_latency.values() if self._judge_latency is not None else []

    def score_latencies(self) -> dict[str, list[float]]:
        return {scorer: window.values() for scorer, window in sorted(self._score_latency.items())}

    # -- ServiceObserver ------------------------------------------------------------------------------
    def record_consumed(self, topic: str, spans_seen: int) -> None:
        self.records_consumed += 1
        self.spans_seen += spans_seen

    def dead_lettered(self, reason: str, n: int = 1) -> None:
        self.dead_letters += n

    def runs_in_flight(self, n: int) -> None:
        self.in_flight = n

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
        if outcome == "shed":
            self.cell(agent, scorer).shed += n

    def run_finished(self, run: ScoredRun) -> None:
        cell = self.cell(run.agent_label, run.scorer_id)
        result = run.result
        if run.outcome == "scored" and result is not None and result.score is not None:
            cell.scored += 1
            cell.score_sum += result.score
            span_end = run.request.target.end_time_unix_nano
            if span_end > 0:
                window = self._score_latency.setdefault(run.scorer_id, _Window(self.clock))
                window.add(max(0.0, (self.wall_clock_ns() - span_end) / 1e9))
        elif run.outcome == "not_scorable":
            cell.not_scorable += 1
        else:
            cell.failed += 1

    def judge_human_agreement(self, scorer: str, stats: AgreementStats) -> None:
        self.agreement[scorer] = stats

    def canary_finished(
        self, scorer: str, stats: AgreementStats, mean_score: float | None, failed: int, baseline: float | None
    ) -> None:
        if stats.share is not None:
            self.canary[scorer] = (stats.share, stats.pairs, baseline)

    def judge_state_changed(self, judge: str, state: str) -> None:
        self.health.judge_state_changed(judge, state)

    def judge_refused(self, judge: str, reason: ShedReason) -> None:
        self.health.judge_refused(judge, reason)

    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        self.health.judge_call_finished(model, request, call)
        self.judge_calls[call.outcome] += 1
        if self._judge_latency is None:
            self._judge_latency = _Window(self.clock)
        self._judge_latency.add(call.duration_s)
        if call.usage is not None:
            self.tokens_in += call.usage.input_tokens or 0
            self.tokens_out += call.usage.output_tokens or 0
        if call.estimated_cost_usd is not None and math.isfinite(call.estimated_cost_usd):
            self.cost_usd += call.estimated_cost_usd


def _reference_cost(tokens_in: float, tokens_out: float) -> float | None:
    from sidecar.scoring.judge.pricing import price_entry

    entry = price_entry(PRICE_REFERENCE_MODEL)
    if entry is None:
        return None
    return tokens_in * float(entry.get("input_cost_per_token") or 0) + tokens_out * float(
        entry.get("output_cost_per_token") or 0
    )


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def render_summary(
    summary: DemoSummary,
    *,
    elapsed_s: float,
    produced: int,
    judge_label: str,
    stand_in: bool,
    final: bool = False,
) -> str:
    title = "final summary" if final else "summary"
    lines = [
        f"── {title} after {elapsed_s:.0f}s: {produced} traces produced, {summary.records_consumed:.0f} records "
        f"consumed, {summary.spans_seen:.0f} spans seen"
        + ("" if final else f", {summary.in_flight:.0f} runs in flight"),
    ]
    # Columns as wide as their longest name (conversation-completeness is 25 characters).
    a = max([18, *(len(agent) for agent, _ in summary.cells)])
    w = max([20, *(len(scorer) for _, scorer in summary.cells)])
    lines.append(
        f"{'agent':<{a}} {'scorer':<{w}} {'scored':>6} {'failed':>6} {'not scorable':>12} {'shed':>5} {'avg':>5}"
    )
    for (agent, scorer), cell in sorted(summary.cells.items()):
        average = cell.average
        lines.append(
            f"{agent:<{a}} {scorer:<{w}} {cell.scored:>6.0f} {cell.failed:>6.0f} {cell.not_scorable:>12.0f} "
            f"{cell.shed:>5.0f} {'-' if average is None else f'{average:.2f}':>5}"
        )
    if not summary.cells:
        lines.append("(no scores yet)")
    lower = sorted(summary.lower_is_better & {scorer for _, scorer in summary.cells})
    if lower:
        lines.append(f"lower is better for {', '.join(lower)}; higher for the others")
    calls = sum(summary.judge_calls.values())
    if stand_in:
        reference = _reference_cost(summary.tokens_in, summary.tokens_out)
        cost = (
            f"est. cost $0 (stand-in); ${reference:.4f} at {PRICE_REFERENCE_MODEL} prices"
            if reference is not None
            else "est. cost $0 (stand-in)"
        )
    else:
        cost = f"est. cost ${summary.cost_usd:.4f}"
    lines.append(
        f"judge {judge_label}: {calls:.0f} calls, {summary.judge_errors:.0f} errors, "
        f"tokens {summary.tokens_in:.0f} in / {summary.tokens_out:.0f} out, {cost}"
    )
    judge_q = [percentile(q, summary.judge_latencies()) for q in (0.5, 0.95, 0.99)]
    lines.append(
        f"judge call latency (last {LATENCY_WINDOW_S:.0f}s): p50 {_seconds(judge_q[0])}  p95 {_seconds(judge_q[1])}  "
        f"p99 {_seconds(judge_q[2])}"
    )
    for scorer, latencies in summary.score_latencies().items():
        q = [percentile(x, latencies) for x in (0.5, 0.95, 0.99)]
        lines.append(
            f"score latency (span end → export, last {LATENCY_WINDOW_S:.0f}s) {scorer}: p50 {_seconds(q[0])}  "
            f"p95 {_seconds(q[1])}  "
            f"p99 {_seconds(q[2])}"
        )
    agreeing = [
        f"{scorer} {stats.share:.2f} of {stats.pairs} pairs"
        + (f" (kappa {stats.kappa:.2f})" if stats.kappa is not None else "")
        + (f" (MAE {stats.mae:.2f})" if stats.mae is not None else "")
        for scorer, stats in sorted(summary.agreement.items())
        if stats.share is not None
    ]
    if agreeing:
        lines.append(f"judge–human agreement (the demo's reviewer, docs/feedback.md): {', '.join(agreeing)}")
    for scorer, (share, items, baseline) in sorted(summary.canary.items()):
        held = f", baseline {baseline:.2f}" if baseline is not None else ""
        lines.append(f"judge canary of {scorer}: agrees with {share:.2f} of its {items} labelled items{held}")
    lines.append(f"dead letters: {summary.dead_letters:.0f}")
    lines.extend(summary.health.explain())
    return "\n".join(lines)
