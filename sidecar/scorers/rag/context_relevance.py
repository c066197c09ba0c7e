"""Mastra's context-relevance scorer (``createContextRelevanceScorerLLM``), ported.

analyze (prompt: each context piece's relevance level, whether the answer used it, missing context) →
generate_score (function: weighted relevance less penalties, × scale) → generate_reason (prompt).
The context comes from the shared lookup (``sidecar.scorers.context``): none at all is not scorable; an
empty one (retrieval found nothing) scores ``1 × scale`` as in Mastra.
"""

from __future__ import annotations

from typing import Any, Literal

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
from sidecar.scorers.rag.context_relevance_prompts import (
    INSTRUCTIONS,
    NO_CONTEXT_PLACEHOLDER,
    create_analyze_prompt,
    create_no_context_reason_prompt,
    create_reason_prompt,
)
from sidecar.scorers.rag.rag_common import options_version
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "RELEVANCE_WEIGHTS",
    "ContextEvaluation",
    "ContextRelevanceAnalysis",
    "ContextRelevanceOptions",
    "ContextRelevancePenalties",
    "context_relevance_score",
    "create_context_relevance_scorer_llm",
]

RelevanceLevel = Literal["high", "medium", "low", "none"]
RELEVANCE_WEIGHTS: dict[RelevanceLevel, float] = {"high": 1.0, "medium": 0.7, "low": 0.3, "none": 0.0}


class ContextEvaluation(JudgeOutput):
    context_index: int = Field(alias="context_index")  # Mastra's wire name is snake_case here
    context_piece: str
    relevance_level: RelevanceLevel
    was_used: bool
    reasoning: str


class ContextRelevanceAnalysis(JudgeOutput):
    evaluations: tuple[ContextEvaluation, ...]
    missing_context: tuple[str, ...] = ()
    overall_assessment: str


class ContextRelevancePenalties(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    unused_high_relevance_context: float = 0.1  # per highly relevant piece the answer did not use
    missing_context_per_item: float = 0.15  # per item of missing context…
    max_missing_context_penalty: float = 0.5  # …up to this much in all


class ContextRelevanceOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None
    # The same documents for every run; unset: request_context["context"], then the output's tool results.
    context: NonEmptyContext | None = None
    penalties: ContextRelevancePenalties = ContextRelevancePenalties()


def context_relevance_score(
    analysis: ContextRelevanceAnalysis,
    *,
    scale: float = 1,
    penalties: ContextRelevancePenalties | None = None,
) -> float:
    """``max(0, mean relevance weight − unused-high penalty − missing-context penalty) × scale``, rounded.

    Relevance weights: high 1, medium 0.7, low 0.3, none 0. No evaluations: ``scale`` when nothing is
    missing, else 0 (Mastra returns 1 or 0 there, unscaled).
    """
    rates = penalties or ContextRelevancePenalties()
    evaluations = analysis.evaluations
    if not evaluations:
        return 0.0 if analysis.missing_context else 1.0 * scale
    total_weight = 0.0
    for e in evaluations:  # left to right, as Array.reduce adds (sum() compensates rounding since 3.12)
        total_weight += RELEVANCE_WEIGHTS[e.relevance_level]
    relevance = total_weight / (len(evaluations) * 1.0)
    unused_high = sum(1 for e in evaluations if e.relevance_level == "high" and not e.was_used)
    usage_penalty = unused_high * rates.unused_high_relevance_context
    missing_penalty = min(
        len(analysis.missing_context) * rates.missing_context_per_item, rates.max_missing_context_penalty
    )
    return round_to_two_decimals(max(0.0, relevance - usage_penalty - missing_penalty) * scale)


def create_context_relevance_scorer_llm(
    *,
    model: str | JudgeModel,
    options: ContextRelevanceOptions | dict[str, Any] | None = None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    opts = options_as(ContextRelevanceOptions, options)
    scale = 1 if opts.scale is None else opts.scale  # Mastra: options.scale ?? 1 (a scale of 0 stays 0)

    def context_of(ctx: StepContext) -> RetrievedContext | None:
        return find_context(ctx.run, options_context=opts.context, extractor=context_extractor)

    def analyze_prompt(ctx: StepContext) -> str | NotScorable:
        found = context_of(ctx)
        if found is None:
            return not_scorable(NO_CONTEXT_REASON)
        # An empty retrieval is still judged (Mastra shows a placeholder); its score is fixed below.
        return create_analyze_prompt(
            user_query=get_user_message_from_run_input(ctx.run.input) or "",
            agent_response=get_assistant_message_from_run_output(ctx.run.output) or "",
            context=found.pieces or (NO_CONTEXT_PLACEHOLDER,),
        )

    def generate_score(ctx: StepContext) -> float:
        found = context_of(ctx)
        if found is not None and not found.pieces:
            return 1.0 * scale  # the agent had no context to misuse (Mastra: 1.0 × scale, unrounded)
        return context_relevance_score(ctx.results.analyze_step_result, scale=scale, penalties=opts.penalties)

    def reason_prompt(ctx: StepContext) -> str:
        score = ctx.score if ctx.score is not None else 0.0
        found = context_of(ctx)
        if found is not None and not found.pieces:
            return create_no_context_reason_prompt(score=score)
        analysis: ContextRelevanceAnalysis = ctx.results.analyze_step_result
        return create_reason_prompt(
            user_query=get_user_message_from_run_input(ctx.run.input) or "",
            score=score,
            scale=scale,
            evaluations_json=js_json([e.model_dump(by_alias=True) for e in analysis.evaluations]),
            missing_context=analysis.missing_context,
        )

    return (
        create_scorer(
            id="context-relevance-scorer",
            name="Context Relevance (LLM)",
            description="Evaluates how relevant and useful the provided context was for generating the agent response",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .analyze(
            description="Analyze the relevance and utility of provided context",
            create_prompt=analyze_prompt,
            output_schema=ContextRelevanceAnalysis,
        )
        .generate_score(generate_score)
        .generate_reason(
            description="Generate human-readable explanation of context relevance evaluation",
            create_prompt=reason_prompt,
        )
        .with_version(options_version(opts))
    )


@scorer_kind(
    "context-relevance",
    options=ContextRelevanceOptions,
    needs_judge=True,
    description="how relevant the retrieved context was to the request and whether the response used it",
    judge_calls_per_run=2,
    needs=("input", "output", "context"),
)
def _context_relevance_kind(judge: JudgeModel | None, options: ContextRelevanceOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_context_relevance_scorer_llm(model=judge, options=options)
