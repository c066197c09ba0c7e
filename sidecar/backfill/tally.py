"""What a backfill did, counted from the service's event stream: runs by outcome, judge calls, tokens and the
estimated cost (the same local price estimate as ``scoring_sidecar_judge_cost_usd_total{source="estimated"}``).
The estimate's measurement and the summary read it; the progress bar shows it beside the records done."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver, SkipOutcome
from sidecar.scoring.judge.errors import ShedReason
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall

__all__ = ["BackfillTally", "JudgeTotals"]


@dataclass(frozen=True, slots=True)
class JudgeTotals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0

    def __sub__(self, other: JudgeTotals) -> JudgeTotals:
        return JudgeTotals(
            self.calls - other.calls,
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.usd - other.usd,
        )


class BackfillTally(ServiceObserver):
    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()  # scored, failed, not_scorable, shed
        self._judge = JudgeTotals()

    @property
    def judge(self) -> JudgeTotals:
        return self._judge

    def run_finished(self, run: ScoredRun) -> None:
        self.runs[run.outcome] += 1

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
            self.runs["shed"] += n

    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        usage = call.usage
        self._judge = JudgeTotals(
            self._judge.calls + 1,
            self._judge.input_tokens + ((usage.input_tokens or 0) if usage is not None else 0),
            self._judge.output_tokens + ((usage.output_tokens or 0) if usage is not None else 0),
            self._judge.usd + (call.estimated_cost_usd or 0.0),
        )
