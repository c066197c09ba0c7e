"""What a destination's score carries besides the number, read once from a scored run: the score's label and
kind, the judge's models, calls, tokens and cost.

Langfuse and Datadog file a score as numeric, boolean or categorical; the sidecar's scorers return a number,
and a custom judge (an ``llm-judge`` scorer) also a label (``pass``/``fail`` for a boolean output, the
category otherwise). :func:`score_kind` decides from the label alone, so every destination decides alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from sidecar.core import ScoredRun
from sidecar.core.runs import SpanTarget
from sidecar.scoring.types import STEP_NAMES, JudgeExecution, JudgeStepRecord

__all__ = [
    "BOOLEAN_LABELS",
    "ENVIRONMENT_ATTRIBUTES",
    "JudgeFacts",
    "ScoreKind",
    "clip",
    "judge_facts",
    "score_kind",
    "score_label",
    "span_environment",
]

ScoreKind = Literal["numeric", "boolean", "categorical"]
# A boolean custom judge labels its scores pass (1) or fail (0).
BOOLEAN_LABELS: dict[str, bool] = {"pass": True, "fail": False}
# The resource attributes a trace's deployment environment comes from, newest convention first: destinations
# that file scores by environment (Langfuse environments, Datadog's env tag) declare them, so ingest keeps them.
ENVIRONMENT_ATTRIBUTES: Final = ("deployment.environment.name", "deployment.environment")


def clip(text: str, limit: int) -> str:
    """``text`` within a destination's limit on a score's explanation (``limit`` characters): cut, its last
    character an ellipsis, when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def span_environment(target: SpanTarget) -> str | None:
    """The scored span's environment as its resource names it (as ingest kept it), if any."""
    kept = dict(target.resource_attributes)
    for name in ENVIRONMENT_ATTRIBUTES:
        value = kept.get(name)
        if value is not None and str(value):
            return str(value)
    return None


def score_label(run: ScoredRun) -> str | None:
    """The score's label (``ScorerRunResult.label``, given by custom judges), or ``None``."""
    label = run.result.label if run.result is not None else None
    return label or None


def score_kind(label: str | None) -> ScoreKind:
    if label is None:
        return "numeric"
    return "boolean" if label in BOOLEAN_LABELS else "categorical"


@dataclass(frozen=True, slots=True)
class JudgeFacts:
    models: tuple[str, ...]  # provider/model as called, distinct, in call order
    calls: int
    input_tokens: int
    output_tokens: int
    estimated_cost_usd: float | None  # the sidecar's estimate (litellm's price list)
    cost_usd: float | None  # what the provider reported, in USD

    @property
    def model(self) -> str:
        return ", ".join(self.models)

    def metadata(self) -> dict[str, Any]:
        """The facts under the names every destination's metadata uses (a cost nobody knows is left out)."""
        facts: dict[str, Any] = {
            "judge_model": self.model,
            "judge_calls": self.calls,
            "judge_input_tokens": self.input_tokens,
            "judge_output_tokens": self.output_tokens,
            "judge_estimated_cost_usd": self.estimated_cost_usd,
            "judge_cost_usd": self.cost_usd,
        }
        return {k: v for k, v in facts.items() if v is not None}


def _executions(run: ScoredRun) -> list[JudgeExecution]:
    judge = run.result.judge if run.result is not None else None
    if judge is None:
        return []
    out: list[JudgeExecution] = []
    for step in STEP_NAMES:
        record: JudgeStepRecord | None = getattr(judge, step)
        if record is not None:
            out.extend(record.executions)
    return out


def judge_facts(run: ScoredRun) -> JudgeFacts | None:
    """The judge calls of the run, summed; ``None`` for a run that called no judge (a code scorer)."""
    executions = _executions(run)
    if not executions:
        return None
    models = tuple(
        dict.fromkeys(
            f"{e.judge_provider}/{e.judge_model_id}" if e.judge_provider else e.judge_model_id for e in executions
        )
    )
    usages = [e.usage for e in executions if e.usage is not None]
    estimates = [e.estimated_cost_usd for e in executions if e.estimated_cost_usd is not None]
    reported = [
        e.cost.amount
        for e in executions
        if e.status == "success" and e.cost is not None and e.cost.unit.upper() == "USD"
    ]
    return JudgeFacts(
        models=models,
        calls=sum(e.model_call_count for e in executions),
        input_tokens=sum(u.input_tokens or 0 for u in usages),
        output_tokens=sum(u.output_tokens or 0 for u in usages),
        estimated_cost_usd=float(sum(estimates)) if estimates else None,
        cost_usd=float(sum(reported)) if reported else None,
    )
