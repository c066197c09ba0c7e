"""What a backfill will cost, before it starts: the ``validate --traffic`` estimator
(:func:`sidecar.app.cost_estimate.estimate_costs`) on the window's real record count, with the runs per record
counted in a sample of the window and the tokens per judge call measured on a few of those runs.

- **Runs**: records in the window × the scorer's runs per record in the sample (before sampling) × its
  configured sampling.
- **Judge calls**: runs × the scorer's judge calls per run (its kind's facts, as ``validate`` counts them).
- **Tokens per call**: measured by scoring ``sample_runs`` runs of the sample through the backfill's own judge
  gates (they cost what those runs cost, and are not exported: the backfill scores them again under the same
  ids); without a measurement (``--sample-runs 0``, a code scorer, a judge that did not answer in time), the
  assumption ``--call-tokens`` (default 1,500 in / 300 out), said so in the table.
- **USD**: those tokens at the litellm list prices, as the metrics' estimated cost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.app.cost_estimate import estimate_costs
from sidecar.backfill.sample import WindowSample
from sidecar.backfill.tally import BackfillTally, JudgeTotals
from sidecar.core import ScorerRunRequest
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.scoring import Scorer
from sidecar.settings import Settings

__all__ = ["CallSize", "ScorerEstimate", "estimate_window", "measure_calls", "render_estimate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CallSize:
    """Judge calls measured on ``runs`` sample runs of one scorer."""

    runs: int
    calls: int
    input_tokens: int
    output_tokens: int

    @property
    def tokens_per_call(self) -> tuple[int, int]:
        calls = max(self.calls, 1)
        return round(self.input_tokens / calls), round(self.output_tokens / calls)


@dataclass(frozen=True, slots=True)
class ScorerEstimate:
    scorer: str
    judge: str | None  # provider/model; None for a code scorer
    runs: float
    calls: float
    input_tokens: float
    output_tokens: float
    usd: float | None  # None: no judge, or no known price
    tokens_measured: bool


async def measure_calls(
    scorers: Sequence[ConfiguredScorer],
    sample: WindowSample,
    tally: BackfillTally,
    *,
    runs_per_scorer: int,
    timeout_s: float,
) -> dict[str, CallSize]:
    """Score up to ``runs_per_scorer`` of the sample's runs with each judged scorer (spread over the sample),
    one scorer after another so that ``tally``'s judge counts are that scorer's. A scorer whose runs do not end
    within ``timeout_s`` (a judge down, a key missing) is left unmeasured."""
    sizes: dict[str, CallSize] = {}
    for configured in scorers:
        scorer = configured.scorer
        requests = _spread(sample.requests.get(scorer.id, []), runs_per_scorer)
        if not scorer.has_judge_steps or not requests:
            continue
        before = tally.judge
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*(_attempt(scorer, request, timeout_s) for request in requests))
        except TimeoutError:
            log.warning(
                "measuring %s's judge calls took over %.0f s (is its judge answering?): its estimate assumes "
                "--call-tokens",
                scorer.id,
                timeout_s,
            )
            continue
        spent: JudgeTotals = tally.judge - before
        if spent.calls:
            sizes[scorer.id] = CallSize(len(requests), spent.calls, spent.input_tokens, spent.output_tokens)
    return sizes


async def _attempt(scorer: Scorer, request: ScorerRunRequest, timeout_s: float) -> None:
    await attempt_scorer(scorer, request, timeout_s=timeout_s)


def _spread(requests: list[ScorerRunRequest], n: int) -> list[ScorerRunRequest]:
    if n <= 0 or not requests:
        return []
    if len(requests) <= n:
        return list(requests)
    step = len(requests) / n
    return [requests[int(i * step)] for i in range(n)]


def estimate_window(
    settings: Settings,
    scorers: Mapping[str, Scorer],
    sample: WindowSample,
    records: int,
    sizes: Mapping[str, CallSize],
    *,
    assumed_tokens: tuple[int, int],
) -> list[ScorerEstimate]:
    """One row per chosen scorer: the estimator at one "trace" per record of the window, with the sample's runs
    per record as its scored spans per trace."""
    rows = []
    for scorer_settings in settings.scorers:
        size = sizes.get(scorer_settings.id)
        tokens_in, tokens_out = size.tokens_per_call if size is not None else assumed_tokens
        per_record = sample.runs_per_record(scorer_settings.id)
        [cost] = estimate_costs(
            settings.model_copy(update={"scorers": (scorer_settings,)}),
            scorers,
            traces_per_s=1.0,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            spans_per_trace=per_record,
        )
        calls = cost.calls_per_1000_traces * records / 1000
        rows.append(
            ScorerEstimate(
                scorer=scorer_settings.id,
                judge=cost.judge,
                runs=per_record * scorer_settings.sampling * records,
                calls=calls,
                input_tokens=calls * tokens_in,
                output_tokens=calls * tokens_out,
                # At one record per second, USD per hour is 3600 records' worth.
                usd=None if cost.usd_per_hour is None else cost.usd_per_hour / 3600 * records,
                tokens_measured=size is not None,
            )
        )
    return rows


def render_estimate(
    rows: Sequence[ScorerEstimate],
    sample: WindowSample,
    sizes: Mapping[str, CallSize],
    *,
    records: int,
    assumed_tokens: tuple[int, int],
) -> list[str]:
    lines = [
        f"estimate for {records} records (runs per record counted in {sample.records} records of the window; "
        "judge calls per run from each scorer's kind, as validate --traffic counts them):",
        f"  {'scorer':<24} {'judge':<26} {'runs':>8} {'judge calls':>11} {'tokens in':>11} {'tokens out':>10} "
        f"{'USD':>9}  tokens per call",
    ]
    for row in rows:
        usd = "-" if row.judge is None else ("no price" if row.usd is None else f"{row.usd:.4f}")
        size = sizes.get(row.scorer)
        if row.judge is None:
            source = "-"
        elif size is not None:
            per_call = size.tokens_per_call
            source = f"{per_call[0]}/{per_call[1]} measured on {size.runs} runs ({size.calls} calls)"
        else:
            source = f"{assumed_tokens[0]}/{assumed_tokens[1]} assumed (--call-tokens)"
        lines.append(
            f"  {row.scorer:<24} {row.judge or '(code)':<26} {row.runs:>8.0f} {row.calls:>11.0f} "
            f"{row.input_tokens:>11.0f} {row.output_tokens:>10.0f} {usd:>9}  {source}"
        )
    total_usd = sum(r.usd or 0.0 for r in rows)
    lines.append(
        f"  total: {sum(r.runs for r in rows):.0f} runs, {sum(r.calls for r in rows):.0f} judge calls, "
        f"{sum(r.input_tokens for r in rows):.0f} input + {sum(r.output_tokens for r in rows):.0f} output tokens, "
        f"about {total_usd:.4f} USD at list prices"
    )
    return lines
