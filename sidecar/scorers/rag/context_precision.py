"""Mastra's context-precision scorer (``createContextPrecisionScorer``), ported.

analyze (prompt: is each context piece useful for the answer?) → generate_score (function: the mean
average precision of the verdicts in context order × scale) → generate_reason (prompt). The context
comes from the shared lookup (``sidecar.scorers.context``); no context, or an empty one, is not scorable.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sidecar.scorers.context import (
    NO_CONTEXT_REASON,
    ContextExtractor,
    NonEmptyContext,
    RetrievedContext,
    find_context,
    js_json,
)
from sidecar.scorers.options import options_as
from sidecar.scorers.rag.context_precision_prompts import INSTRUCTIONS, create_analyze_prompt, create_reason_prompt
from sidecar.scorers.rag.rag_common import options_version
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.verdicts import JudgeOutput, YesNo
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "EMPTY_CONTEXT_REASON",
    "ContextPrecisionOptions",
    "ContextPrecisionVerdict",
    "ContextPrecisionVerdicts",
    "context_precision_score",
    "create_context_precision_scorer",
]

# Mastra throws "No context available for evaluation" here: an empty retrieval has no order to judge.
EMPTY_CONTEXT_REASON = "the run's retrieved context is empty: there is no ranking to judge"


class ContextPrecisionVerdict(JudgeOutput):
    # Mastra's wire name is snake_case here.
    context_index: int = Field(alias="context_index")
    verdict: YesNo  # "yes": the piece was useful
    reason: str


class ContextPrecisionVerdicts(JudgeOutput):
    verdicts: tuple[ContextPrecisionVerdict, ...]


class ContextPrecisionOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None
    # The same documents for every run; unset: request_context["context"], then the output's tool results.
    context: NonEmptyContext | None = None


def context_precision_score(verdicts: ContextPrecisionVerdicts, *, scale: float = 1) -> float:
    """Mean average precision over the verdicts sorted by ``context_index``, × scale.

    Each useful piece at position k (1-based) adds precision@k = useful pieces so far ÷ k; the sum is divided
    by the number of useful pieces. No verdicts or no useful piece: 0.
    """
    ordered = sorted(verdicts.verdicts, key=lambda v: v.context_index)  # stable, as Array.sort is
    precision_sum = 0.0
    relevant = 0
    for position, verdict in enumerate(ordered, start=1):
        if verdict.verdict == "yes":
            relevant += 1
            precision_sum += relevant / position
    if relevant == 0:
        return 0.0
    return round_to_two_decimals(precision_sum / relevant * scale)


def create_context_precision_scorer(
    *,
    model: str | JudgeModel,
    options: ContextPrecisionOptions | dict[str, Any] | None = None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    opts = options_as(ContextPrecisionOptions, options)
    scale = 1 if opts.scale is None else opts.scale  # Mastra: options.scale ?? 1 (a scale of 0 stays 0)

    def context_of(ctx: StepContext) -> RetrievedContext | None:
        return find_context(ctx.run, options_context=opts.context, extractor=context_extractor)

    def analyze_prompt(ctx: StepContext) -> str | NotScorable:
        found = context_of(ctx)
        if found is None:
            return not_scorable(NO_CONTEXT_REASON)
        if not found.pieces:
            return not_scorable(EMPTY_CONTEXT_REASON)
        return create_analyze_prompt(
            input=get_user_message_from_run_input(ctx.run.input) or "",
            output=get_assistant_message_from_run_output(ctx.run.output) or "",
            context=found.pieces,
        )

    def generate_score(ctx: StepContext) -> float:
        return context_precision_score(ctx.results.analyze_step_result, scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        verdicts: ContextPrecisionVerdicts = ctx.results.analyze_step_result
        return create_reason_prompt(
            input=get_user_message_from_run_input(ctx.run.input) or "",
            output=get_assistant_message_from_run_output(ctx.run.output) or "",
            context=found.pieces if found else (),
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            verdicts_json=js_json([v.model_dump(by_alias=True) for v in verdicts.verdicts]),
        )

    return (
        create_scorer(
            id="context-precision-scorer",
            name="Context Precision Scorer",
            description=(
                "A scorer that evaluates the relevance and precision of retrieved context nodes for generating "
                "expected outputs"
            ),
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .analyze(
            description="Evaluate the relevance of each context piece for generating the expected output",
            create_prompt=analyze_prompt,
            output_schema=ContextPrecisionVerdicts,
        )
        .generate_score(generate_score)
        .generate_reason(description="Reason about the context precision results", create_prompt=reason_prompt)
        .with_version(options_version(opts))
    )


@scorer_kind(
    "context-precision",
    options=ContextPrecisionOptions,
    needs_judge=True,
    description="whether the retrieved context pieces that helped the response come first (mean average precision)",
    judge_calls_per_run=2,
    needs=("input", "output", "context"),
)
def _context_precision_kind(judge: JudgeModel | None, options: ContextPrecisionOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_context_precision_scorer(model=judge, options=options)
