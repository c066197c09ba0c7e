"""What ``preview`` prints: per run the scored span, the prompt (traced content shortened), the judge's raw
answer, the score, label and reason, tokens and cost; then the distribution over the runs."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.preview.runs import PreviewRun
from sidecar.scoring.types import JudgeExecution, ScorerRunResult, to_json_value

__all__ = ["JudgeStep", "PreviewOutcome", "render_distribution", "render_outcome", "shorten_quotes", "steps_of"]

_QUOTE = re.compile(r"(<untrusted_(\w+)>\n)(.*?)(\n</untrusted_\2>)", re.DOTALL)
_BAR = 30


@dataclass(frozen=True, slots=True)
class JudgeStep:
    """One prompt step as the judge saw and answered it."""

    step: str
    prompt: str
    answer: str | None  # the judge's answer (its JSON, or the raw text it could not use); None: not called
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class PreviewOutcome:
    run: PreviewRun
    outcome: str  # scored | failed | not_scorable | rendered (--show-prompt-only)
    steps: tuple[JudgeStep, ...] = ()
    score: float | None = None
    label: str | None = None
    reason: str | None = None
    problem: str | None = None  # why it failed or is not scorable

    @property
    def input_tokens(self) -> int:
        return sum(step.input_tokens for step in self.steps)

    @property
    def output_tokens(self) -> int:
        return sum(step.output_tokens for step in self.steps)

    @property
    def cost_usd(self) -> float:
        return sum(step.cost_usd for step in self.steps)


def steps_of(result: ScorerRunResult | None) -> tuple[JudgeStep, ...]:
    """Every judge execution of a run, in step order."""
    judge = result.judge if result is not None else None
    return tuple(_step(execution) for execution in (judge.executions() if judge is not None else ()))


def _step(execution: JudgeExecution) -> JudgeStep:
    usage = execution.usage
    answer: str | None
    if execution.status == "success":
        value = to_json_value(execution.output)
        answer = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        error = None
    else:
        answer = execution.raw_output
        error = f"{execution.error.name}: {execution.error.message}"
    cost = execution.estimated_cost_usd
    return JudgeStep(
        step=execution.step or "?",
        prompt=execution.prompt,
        answer=answer,
        error=error,
        input_tokens=(usage.input_tokens or 0) if usage is not None else 0,
        output_tokens=(usage.output_tokens or 0) if usage is not None else 0,
        cost_usd=cost if cost is not None and math.isfinite(cost) else 0.0,
    )


def shorten_quotes(prompt: str, limit: int) -> str:
    """The prompt with each quoted piece of traced content cut to ``limit`` characters (the template's own text
    stays whole: it is what the author is checking)."""

    def cut(match: re.Match[str]) -> str:
        content = match.group(3)
        if len(content) > limit:
            content = f"{content[:limit]}… (+{len(content) - limit} chars)"
        return f"{match.group(1)}{content}{match.group(4)}"

    return _QUOTE.sub(cut, prompt)


def _indented(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) or prefix


def render_outcome(index: int, total: int, outcome: PreviewOutcome, *, limit: int) -> str:
    request = outcome.run.request
    target = request.target
    agent = target.agent_name or target.agent_id or "unknown agent"
    session = request.session
    if session is not None:
        count = len(session.turns)
        lines = [
            f"── run {index}/{total}: conversation {session.conversation_id}, {count} turn{'s' if count != 1 else ''} "
            f"(session scope, closed: {session.close_reason}{'' if session.complete else ', incomplete'})",
            f"   {agent} · last turn: trace {target.trace_id} span {target.span_id} · from {outcome.run.where}",
        ]
    else:
        lines = [
            f"── run {index}/{total}: trace {target.trace_id} span {target.span_id} ({request.scope} scope)",
            f"   {agent} · span {target.span_name!r} · from {outcome.run.where}",
        ]
    for step in outcome.steps:
        lines.append(f"   prompt ({step.step}):")
        lines.append(_indented(shorten_quotes(step.prompt, limit), "     │ "))
        if step.answer is not None or step.error is not None:
            lines.append(f"   judge answered: {_one_line(step.answer) if step.answer is not None else '(nothing)'}")
        if step.error is not None:
            lines.append(f"   judge error: {step.error}")
    if outcome.outcome == "rendered":
        lines.append("   (--show-prompt-only: no judge called)")
    elif outcome.outcome == "scored":
        label = f" · label {outcome.label}" if outcome.label is not None else ""
        lines.append(f"   score {_number(outcome.score)}{label}")
        if outcome.reason:
            lines.append(f"   reason: {_one_line(outcome.reason)}")
    else:
        lines.append(f"   {outcome.outcome.replace('_', ' ')}: {outcome.problem or 'no detail'}")
    if outcome.steps and outcome.outcome != "rendered":
        lines.append(
            f"   tokens {outcome.input_tokens} in / {outcome.output_tokens} out · est. cost ${outcome.cost_usd:.6f}"
        )
    return printable("\n".join(lines))


# Control characters but the line break and the tab: traced content may hold terminal escapes that would hide or
# rewrite what the operator reads.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe for a terminal: each control character (an escape sequence's start) written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render_distribution(outcomes: Sequence[PreviewOutcome], *, scale: float) -> str:
    """How the runs came out: outcomes, tokens and cost, the labels' shares, the scores' spread."""
    counts = Counter(o.outcome for o in outcomes)
    if counts.get("rendered") == len(outcomes):
        return f"{len(outcomes)} prompts rendered; no judge called, no cost"
    scored = [o for o in outcomes if o.outcome == "scored" and o.score is not None]
    lines = [
        f"{len(outcomes)} runs: {counts.get('scored', 0)} scored, {counts.get('failed', 0)} failed, "
        f"{counts.get('not_scorable', 0)} not scorable; judge tokens {sum(o.input_tokens for o in outcomes)} in / "
        f"{sum(o.output_tokens for o in outcomes)} out, est. cost ${sum(o.cost_usd for o in outcomes):.6f}"
    ]
    labels = Counter(o.label for o in scored if o.label is not None)
    if labels:
        shares = ", ".join(
            f"{label} {count} ({100 * count / len(scored):.0f}%)"
            for label, count in sorted(labels.items(), key=lambda item: (-item[1], item[0]))
        )
        lines.append(f"labels: {shares}")
    if scored:
        values = [o.score for o in scored if o.score is not None]
        mean = sum(values) / len(values)
        lines.append(f"scores: min {_number(min(values))} · mean {_number(mean)} · max {_number(max(values))}")
        lines.extend(_histogram(values, scale))
    return "\n".join(lines)


def _histogram(values: Sequence[float], scale: float, buckets: int = 5) -> list[str]:
    counts = [0] * buckets
    for value in values:
        share = min(1.0, max(0.0, value / scale)) if scale > 0 else 0.0
        counts[min(buckets - 1, int(share * buckets))] += 1
    most = max(counts) or 1
    lines = []
    for i, count in enumerate(counts):
        low, high = scale * i / buckets, scale * (i + 1) / buckets
        bar = "█" * round(_BAR * count / most)
        lines.append(f"  {low:>5.2f}–{high:<5.2f} {bar} {count}")
    return lines
