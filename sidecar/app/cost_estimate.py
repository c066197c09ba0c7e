"""What a configuration will cost before it runs: judge calls per 1,000 traces and USD per hour.

``scoring-sidecar validate --traffic 50/s`` prints it. The figures are estimates, and say so: judge calls
per run come from each configured scorer's facts (its kind's ``@scorer_kind(judge_calls_per_run=...)`` as its
options set it; a ``python:`` scorer counts its prompt steps), one scored span per trace (an agent run)
unless told otherwise, sampling as configured, and a token size per call (default 1,500 input and 300 output
tokens: a judge prompt quoting a short agent exchange) priced with the litellm price table, the one the
metrics' estimated cost uses. A scorer whose options write its own prompt text (a judge written in YAML: its
instructions, its template, its answer's schema) adds that text's tokens to each call's input, so a long
policy in a template shows in the estimate.

A conversation scorer (``targets.scope: session``) runs once per conversation, not per trace: each trace is a
turn, so its runs are ``1 / turns_per_conversation`` per trace (one window per conversation: a conversation
that falls quiet for ``sessions.idle_s`` and resumes is scored again), and its prompt quotes every turn, so
each call's input is ``turns_per_conversation`` times the per-call size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.app.scorer_factory import facts_for
from sidecar.runtime.stages import facts_of
from sidecar.scoring import Scorer
from sidecar.scoring.judge.pricing import estimate_cost_usd
from sidecar.scoring.types import JudgeUsage
from sidecar.settings import EvalSettings

__all__ = ["ScorerCost", "estimate_costs", "parse_traffic", "render_costs"]

_TRAFFIC = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*/\s*(?P<unit>s|sec|m|min|h|hour)\s*$")
_PER_SECOND = {"s": 1.0, "sec": 1.0, "m": 1 / 60, "min": 1 / 60, "h": 1 / 3600, "hour": 1 / 3600}
DEFAULT_TURNS_PER_CONVERSATION = 5.0


def parse_traffic(text: str) -> float:
    """``50/s``, ``3000/min``, ``1e5/h`` style rates → traces per second. Raises ``ValueError``."""
    match = _TRAFFIC.match(text)
    if match is None:
        raise ValueError(f"--traffic {text!r}: write a rate such as 50/s, 3000/min or 100000/h")
    return float(match["n"]) * _PER_SECOND[match["unit"]]


@dataclass(frozen=True)
class ScorerCost:
    scorer: str
    judge: str | None  # the judge model (provider/model), None for code scorers
    calls_per_run: float
    input_tokens_per_call: int
    sampling: float
    calls_per_1000_traces: float
    usd_per_hour: float | None  # None: no judge, or the model has no known price
    per_conversation: bool = False  # a conversation scorer: runs once per conversation of several traces


def estimate_costs(
    settings: EvalSettings,
    scorers: Mapping[str, Scorer],
    *,
    traces_per_s: float,
    input_tokens: int = 1500,
    output_tokens: int = 300,
    spans_per_trace: float = 1.0,
    turns_per_conversation: float = DEFAULT_TURNS_PER_CONVERSATION,
) -> list[ScorerCost]:
    rows = []
    for scorer_settings in settings.scorers:
        scorer = scorers[scorer_settings.id]
        judge = settings.judges[scorer_settings.judge].to_judge_model() if scorer_settings.judge else None
        facts = facts_for(scorer_settings, scorer)
        calls = facts.judge_calls_per_run if judge is not None else 0.0
        per_conversation = facts_of(scorer_settings.targets.scope).unit == "conversation"
        runs_per_trace = 1 / turns_per_conversation if per_conversation else spans_per_trace
        per_1000 = 1000 * runs_per_trace * scorer_settings.sampling * calls
        quoted = round(input_tokens * turns_per_conversation) if per_conversation else input_tokens
        tokens_in = quoted + facts.prompt_tokens
        call_usage = JudgeUsage(input_tokens=tokens_in, output_tokens=output_tokens)
        per_call = estimate_cost_usd(judge.litellm_model, call_usage) if judge is not None else None
        hourly = per_call * per_1000 / 1000 * traces_per_s * 3600 if per_call is not None and calls else None
        rows.append(
            ScorerCost(
                scorer=scorer_settings.id,
                judge=judge.litellm_model if judge is not None else None,
                calls_per_run=calls,
                input_tokens_per_call=tokens_in,
                sampling=scorer_settings.sampling,
                calls_per_1000_traces=per_1000,
                usd_per_hour=hourly,
                per_conversation=per_conversation,
            )
        )
    return rows


def render_costs(
    rows: list[ScorerCost],
    *,
    traces_per_s: float,
    input_tokens: int,
    output_tokens: int,
    caps: Mapping[str, tuple[float, str]] | None = None,
    turns_per_conversation: float = DEFAULT_TURNS_PER_CONVERSATION,
) -> str:
    """The table; ``caps`` maps a judge model to its (spend cap in USD/hour, on_spend_cap policy)."""
    lines = [
        f"estimated judge load at {traces_per_s:g} traces/s (one scored span per trace, "
        f"{input_tokens} input + {output_tokens} output tokens per call, plus a custom judge's own prompt, list "
        "prices):",
    ]
    if any(row.per_conversation for row in rows):
        lines.append(
            f"  (*) once per conversation of {turns_per_conversation:g} traces (turns), its prompt quoting every turn "
            "(--turns-per-conversation)"
        )
    width = max([24, *(len(row.scorer) + row.per_conversation * 4 for row in rows)])
    lines.append(
        f"  {'scorer':<{width}} {'judge':<28} {'tokens in':>9} {'calls/run':>9} {'sampling':>8} "
        f"{'calls/1000 traces':>17} {'USD/hour':>10}"
    )
    for row in rows:
        cost = "-" if row.usd_per_hour is None else f"{row.usd_per_hour:.2f}"
        if row.judge is not None and row.calls_per_run and row.usd_per_hour is None:
            cost = "no price"
        tokens = str(row.input_tokens_per_call) if row.calls_per_run else "-"
        name = f"{row.scorer} (*)" if row.per_conversation else row.scorer
        lines.append(
            f"  {name:<{width}} {row.judge or '(code)':<28} {tokens:>9} {row.calls_per_run:>9g} {row.sampling:>8g} "
            f"{row.calls_per_1000_traces:>17g} {cost:>10}"
        )
    total = sum(r.usd_per_hour or 0.0 for r in rows)
    calls_per_s = sum(r.calls_per_1000_traces for r in rows) * traces_per_s / 1000
    lines.append(f"  total: {calls_per_s:.1f} judge calls/s, about {total:.2f} USD/hour ({total * 24:.2f} USD/day)")
    for judge, (cap, policy) in sorted((caps or {}).items()):
        spend = sum(r.usd_per_hour or 0.0 for r in rows if r.judge == judge)
        if spend > cap:
            effect = (
                f"about {100 * (1 - cap / spend):.0f} % of its runs would be shed"
                if policy == "shed"
                else "its runs would wait (lag grows without bound)"
            )
            lines.append(f"  warning: {judge} would spend {spend:.2f} USD/hour, over its cap of {cap:g}: {effect}")
    return "\n".join(lines)
