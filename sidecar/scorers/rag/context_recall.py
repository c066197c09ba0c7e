"""Mastra's context-recall scorer (``createContextRecallScorer``), ported. ``eval`` only: it needs a ground truth.

preprocess (prompt: the ground truth's claims) → analyze (prompt: is each claim attributable to the
context?) → generate_score (function: attributable claims ÷ claims × scale) → generate_reason (prompt).
The ground truth is the run's (an ``eval`` dataset's ``ground_truth``); the context comes from the shared
lookup (``sidecar.scorers.context``). A run missing either is not scorable, before any judge call.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
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
from sidecar.scorers.rag.context_recall_prompts import (
    INSTRUCTIONS,
    create_attribution_prompt,
    create_extract_prompt,
    create_reason_prompt,
)
from sidecar.scorers.rag.rag_common import ExtractedClaims, options_version
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.verdicts import JudgeOutput, YesNo
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "NO_GROUND_TRUTH_REASON",
    "ContextRecallOptions",
    "ContextRecallVerdict",
    "ContextRecallVerdicts",
    "context_recall_score",
    "create_context_recall_scorer",
    "ground_truth_text",
]

NO_GROUND_TRUTH_REASON = "no ground truth: context recall compares the context with a reference answer"


class ContextRecallVerdict(JudgeOutput):
    verdict: YesNo  # "yes": the claim is attributable to the context
    reason: str


class ContextRecallVerdicts(JudgeOutput):
    verdicts: tuple[ContextRecallVerdict, ...]


class ContextRecallOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None
    # The same documents for every run; unset: request_context["context"], then the output's tool results.
    context: NonEmptyContext | None = None


def ground_truth_text(ground_truth: Any) -> str | None:
    """The ground truth as Mastra reads it (a string as is, anything else as JSON); ``None`` when it is falsy
    in JavaScript's sense (absent, null, "", 0, false): Mastra then scores 0, we say not scorable."""
    if ground_truth is None or (isinstance(ground_truth, str | bool | int | float) and not ground_truth):
        return None
    return ground_truth if isinstance(ground_truth, str) else js_json(ground_truth)


def context_recall_score(claims: ExtractedClaims, verdicts: ContextRecallVerdicts, *, scale: float = 1) -> float:
    """Attributable ("yes") verdicts ÷ extracted claims × scale, rounded as Mastra rounds; no claims: 0.

    The denominator is the number of claims, not of verdicts (as in Mastra).
    """
    total = len(claims.claims)
    if total == 0:
        return 0.0
    attributed = sum(1 for v in verdicts.verdicts if v.verdict == "yes")
    return round_to_two_decimals(attributed / total * scale)


def create_context_recall_scorer(
    *,
    model: str | JudgeModel,
    options: ContextRecallOptions | dict[str, Any] | None = None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    opts = options_as(ContextRecallOptions, options)
    scale = opts.scale or 1  # falsy → 1, as in Mastra

    def context_of(ctx: StepContext) -> RetrievedContext | None:
        return find_context(ctx.run, options_context=opts.context, extractor=context_extractor)

    def extract_prompt(ctx: StepContext) -> str | NotScorable:
        ground_truth = ground_truth_text(ctx.run.ground_truth)
        if ground_truth is None:
            return not_scorable(NO_GROUND_TRUTH_REASON)
        if context_of(ctx) is None:
            return not_scorable(NO_CONTEXT_REASON)
        return create_extract_prompt(ground_truth=ground_truth)

    def attribution_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        claims: ExtractedClaims = ctx.results.preprocess_step_result
        return create_attribution_prompt(claims=claims.claims, context=found.pieces if found else ())

    def generate_score(ctx: StepContext) -> float:
        return context_recall_score(ctx.results.preprocess_step_result, ctx.results.analyze_step_result, scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        verdicts: ContextRecallVerdicts = ctx.results.analyze_step_result
        return create_reason_prompt(
            ground_truth=ground_truth_text(ctx.run.ground_truth) or "",
            context=found.pieces if found else (),
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            verdicts_json=js_json([v.model_dump(by_alias=True) for v in verdicts.verdicts]),
        )

    return (
        create_scorer(
            id="context-recall-scorer",
            name="Context Recall Scorer",
            description=(
                "A scorer that evaluates how well retrieved context covers the claims in a ground-truth "
                "reference answer"
            ),
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(
            description="Extract atomic claims from the ground-truth answer",
            create_prompt=extract_prompt,
            output_schema=ExtractedClaims,
        )
        .analyze(
            description="Check if each ground-truth claim is attributable to the retrieval context",
            create_prompt=attribution_prompt,
            output_schema=ContextRecallVerdicts,
        )
        .generate_score(generate_score)
        .generate_reason(description="Explain the context recall evaluation results", create_prompt=reason_prompt)
        .with_version(options_version(opts))
    )


@scorer_kind(
    "context-recall",
    options=ContextRecallOptions,
    needs_judge=True,
    description="share of the ground truth's claims that the retrieved context covers",
    judge_calls_per_run=3,
    needs=("context", "ground_truth"),
    eval_only="needs a ground truth (a reference answer) to measure what the context covers, and live traces carry "
    "none; score it with `eval` on a dataset with ground_truth",
)
def _context_recall_kind(judge: JudgeModel | None, options: ContextRecallOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_context_recall_scorer(model=judge, options=options)
