"""Eval results: per-item records, per-scorer tallies (an observer of the run stream), the summary table."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver
from sidecar.core.wording import counted
from sidecar.eval.dataset import EvalItem
from sidecar.eval.thresholds import Threshold
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall

__all__ = [
    "EXIT_BREACHED",
    "EXIT_OK",
    "EXIT_RUNS_FAILED",
    "EvalReport",
    "EvalTally",
    "ItemResult",
    "Progress",
    "ScorerTally",
    "render_report",
    "write_results",
]

# eval's exit statuses (2, an invalid configuration, dataset or option, is decided before anything is scored).
EXIT_OK = 0  # every run scored (or not scorable) and every threshold holds
EXIT_BREACHED = 1  # a threshold breached
EXIT_RUNS_FAILED = 3  # thresholds hold (or none given) but runs failed: the averages leave those items out


@dataclass(frozen=True)
class ItemResult:
    item: EvalItem
    scorer_id: str
    outcome: str  # scored | failed | not_scorable
    score: float | None
    record: dict[str, Any]


@dataclass
class ScorerTally:
    scorer_id: str
    scale: float = 1.0
    scored: int = 0
    failed: int = 0
    not_scorable: int = 0
    score_sum: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    # Scored runs by their label, for scorers that name their scores (a custom judge's categories, pass/fail).
    labels: dict[str, int] = field(default_factory=dict)

    @property
    def average(self) -> float | None:
        return self.score_sum / self.scored if self.scored else None

    @property
    def normalised(self) -> float | None:
        average = self.average
        return None if average is None else min(1.0, max(0.0, average / self.scale))


class EvalTally(ServiceObserver):
    """Counts what the run stream reports, per scorer: outcomes and scores from finished runs, tokens and
    cost from every judge call as it ends (failed runs' calls included: what the provider bills)."""

    def __init__(self, scales: dict[str, float]) -> None:
        self.tallies = {scorer: ScorerTally(scorer, scale=scale) for scorer, scale in scales.items()}

    def expect(self, scales: dict[str, float]) -> None:
        """The scorers that will run (known once the items are: runs found in records come after the assembly)."""
        self.tallies = {scorer: ScorerTally(scorer, scale=scale) for scorer, scale in scales.items()}

    def run_finished(self, run: ScoredRun) -> None:
        tally = self.tallies[run.scorer_id]
        result = run.result
        if run.outcome == "scored" and result is not None and result.score is not None:
            tally.scored += 1
            tally.score_sum += result.score
            if result.label is not None:
                tally.labels[result.label] = tally.labels.get(result.label, 0) + 1
        elif run.outcome == "not_scorable":
            tally.not_scorable += 1
        else:
            tally.failed += 1

    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        tally = self.tallies.get(request.scorer)
        if tally is None:
            return
        usage = call.usage
        if usage is not None:
            tally.input_tokens += usage.input_tokens or 0
            tally.output_tokens += usage.output_tokens or 0
        provider = call.provider_cost
        if provider is not None and provider.unit.upper() == "USD":
            tally.cost_usd += provider.amount  # what the provider reported beats our estimate
        elif call.estimated_cost_usd is not None and math.isfinite(call.estimated_cost_usd):
            tally.cost_usd += call.estimated_cost_usd


@dataclass
class EvalReport:
    tallies: dict[str, ScorerTally]
    results: list[ItemResult]
    thresholds: dict[str, Threshold]
    elapsed_s: float
    items: int
    judge_labels: list[str] = field(default_factory=list)
    # What the judges went through (JudgeHealth.explain): the reason behind failed runs, in words.
    judge_notes: list[str] = field(default_factory=list)
    # Scorers no item of the dataset was for (a conversation dataset and single-turn scorers), each with why.
    skipped: list[str] = field(default_factory=list)

    def breaches(self) -> list[str]:
        return [
            scorer
            for scorer, threshold in self.thresholds.items()
            if scorer in self.tallies and not threshold.holds(self.tallies[scorer].normalised)
        ]

    @property
    def failed(self) -> int:
        return sum(tally.failed for tally in self.tallies.values())

    @property
    def runs(self) -> int:
        return len(self.results)

    def exit_status(self, *, allow_failures: bool = False) -> int:
        """1 when a threshold is breached; else 3 when runs failed (0 with ``allow_failures``); else 0."""
        if self.breaches():
            return EXIT_BREACHED
        return EXIT_RUNS_FAILED if self.failed and not allow_failures else EXIT_OK


def write_results(report: EvalReport, out: TextIO) -> int:
    """One JSON line per (item, scorer), in dataset order then scorer order. Returns the number of lines."""
    for result in report.results:
        out.write(json.dumps(result.record, ensure_ascii=False, allow_nan=False) + "\n")
    return len(report.results)


def render_report(report: EvalReport, *, allow_failures: bool = False) -> str:
    lines = [
        f"{counted(report.items, 'item')} x {counted(len(report.tallies), 'scorer')} in {report.elapsed_s:.1f}s"
        + (f" (judges: {', '.join(report.judge_labels)})" if report.judge_labels else ""),
        f"{'scorer':<22} {'avg':>6} {'scored':>6} {'failed':>6} {'not scorable':>12} {'tokens in':>10} "
        f"{'tokens out':>10} {'est. cost':>10}  threshold",
    ]
    total_in = total_out = 0
    total_cost = 0.0
    breaches = set(report.breaches())
    for scorer, tally in report.tallies.items():
        average = tally.average
        threshold = report.thresholds.get(scorer)
        if threshold is None:
            verdict = "-"
        else:
            shown = "no score" if tally.normalised is None else f"{tally.normalised:.2f}"
            verdict = f"{threshold} {'FAIL (' + shown + ')' if scorer in breaches else 'ok'}"
        lines.append(
            f"{scorer:<22} {'-' if average is None else f'{average:.3f}':>6} {tally.scored:>6} {tally.failed:>6} "
            f"{tally.not_scorable:>12} {tally.input_tokens:>10} {tally.output_tokens:>10} "
            f"{'$' + format(tally.cost_usd, '.4f'):>10}  {verdict}"
        )
        total_in += tally.input_tokens
        total_out += tally.output_tokens
        total_cost += tally.cost_usd
    for scorer, tally in report.tallies.items():
        if tally.labels:
            counts = ", ".join(f"{label} {count}" for label, count in sorted(tally.labels.items(), key=_most_first))
            lines.append(f"{scorer} labels: {counts}")
    lines.append(f"judge tokens {total_in} in / {total_out} out, estimated cost ${total_cost:.4f}")
    failed = report.failed
    if failed:
        lines.append(
            f"{counted(failed, 'run')} failed"
            + (":" if report.judge_notes else " (the judges answered every call: see each result's error, --output)")
        )
    lines.extend(f"  {note}" for note in report.judge_notes)
    lines.extend(report.skipped)
    if breaches:
        lines.append(f"THRESHOLD BREACHED: {', '.join(sorted(breaches))}")
    if failed:
        runs = f"{failed} of {counted(report.runs, 'run')}" if report.runs else counted(failed, "run")
        lines.append(
            f"RUNS FAILED: {runs} (accepted: --allow-failures)"
            if allow_failures
            else f"RUNS FAILED: {runs} {'has' if failed == 1 else 'have'} no score (the averages leave them out); "
            "--allow-failures accepts them"
        )
    return "\n".join(lines)


def _most_first(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


class Progress:
    """A progress bar with ETA on a terminal; plain lines (every 10 %) otherwise. Writes to ``out``."""

    def __init__(self, out: TextIO, *, tty: bool | None = None, width: int = 30) -> None:
        self._out = out
        self._tty = out.isatty() if tty is None else tty
        self._width = width
        self._started = time.monotonic()
        self._last_decile = -1

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self._started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("nan")
        eta_text = f"ETA {eta:.0f}s" if math.isfinite(eta) else "ETA ?"
        if self._tty:
            filled = int(self._width * done / total) if total else self._width
            bar = "#" * filled + "." * (self._width - filled)
            end = "\n" if done >= total else ""
            self._out.write(f"\r[{bar}] {done}/{total} runs {elapsed:.0f}s {eta_text} ")
            self._out.write(end)
            self._out.flush()
            return
        decile = (10 * done) // total if total else 10
        if decile > self._last_decile or done == total:
            self._last_decile = decile
            self._out.write(f"progress: {done}/{total} runs ({100 * done // max(total, 1)}%), {eta_text}\n")
            self._out.flush()
