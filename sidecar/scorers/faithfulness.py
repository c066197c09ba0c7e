"""Mastra's faithfulness scorer (``createFaithfulnessScorer``), ported.

preprocess (prompt: the answer's claims) → analyze (prompt: a verdict per claim against the context) →
generate_score (function: supported verdicts ÷ all verdicts × scale) → generate_reason (prompt).
The context comes from the shared lookup (``sidecar.scorers.context``); a run with none is not scorable
before any judge call. docs/scorers-context.md lists what differs from Mastra.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.context import NO_CONTEXT_REASON, ContextExtractor, RetrievedContext, find_context, js_json
from sidecar.scorers.faithfulness_prompts import (
    INSTRUCTIONS,
    create_analyze_prompt,
    create_extract_prompt,
    create_reason_prompt,
)
from sidecar.scorers.judging import ExtractedClaims, JudgeOutput, YesNoUnsure, options_version
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "FaithfulnessOptions",
    "FaithfulnessVerdict",
    "FaithfulnessVerdicts",
    "create_faithfulness_scorer",
    "faithfulness_score",
]


class FaithfulnessVerdict(JudgeOutput):
    claim: str | None = None  # asked for (it helps the reason step), not required: Mastra's schema lacks it
    verdict: YesNoUnsure
    reason: str


class FaithfulnessVerdicts(JudgeOutput):
    verdicts: tuple[FaithfulnessVerdict, ...]


class FaithfulnessOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None
    # The same documents for every run; unset: request_context["context"], then the output's tool results.
    context: tuple[str, ...] | None = None


def faithfulness_score(verdicts: FaithfulnessVerdicts, *, scale: float = 1) -> float:
    """Supported ("yes") verdicts ÷ all verdicts × scale, rounded as Mastra rounds; no verdicts: 0."""
    total = len(verdicts.verdicts)
    if total == 0:
        return 0.0
    supported = sum(1 for v in verdicts.verdicts if v.verdict == "yes")
    return round_to_two_decimals(supported / total * scale)


def create_faithfulness_scorer(
    *,
    model: str | JudgeModel,
    options: FaithfulnessOptions | dict[str, Any] | None = None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    opts = options if isinstance(options, FaithfulnessOptions) else FaithfulnessOptions.model_validate(options or {})
    scale = opts.scale or 1  # falsy → 1, as in Mastra

    def context_of(ctx: StepContext) -> RetrievedContext | None:
        return find_context(ctx.run, options_context=opts.context, extractor=context_extractor)

    def extract_prompt(ctx: StepContext) -> str | NotScorable:
        # The lookup runs first: a run without context costs no judge call.
        if context_of(ctx) is None:
            return not_scorable(NO_CONTEXT_REASON)
        return create_extract_prompt(output=get_assistant_message_from_run_output(ctx.run.output) or "")

    def analyze_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        claims: ExtractedClaims = ctx.results.preprocess_step_result
        return create_analyze_prompt(claims=claims.claims, context=found.pieces if found else ())

    def generate_score(ctx: StepContext) -> float:
        return faithfulness_score(ctx.results.analyze_step_result, scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        verdicts: FaithfulnessVerdicts = ctx.results.analyze_step_result
        return create_reason_prompt(
            input=get_user_message_from_run_input(ctx.run.input) or "",
            output=get_assistant_message_from_run_output(ctx.run.output) or "",
            context=found.pieces if found else (),
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            verdicts_json=js_json([v.model_dump(by_alias=True, exclude_none=True) for v in verdicts.verdicts]),
        )

    return (
        create_scorer(
            id="faithfulness-scorer",
            name="Faithfulness Scorer",
            description="A scorer that evaluates the faithfulness of an LLM output to an input",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(
            description="Extract relevant statements from the LLM output",
            create_prompt=extract_prompt,
            output_schema=ExtractedClaims,
        )
        .analyze(
            description="Score the relevance of the statements to the input",
            create_prompt=analyze_prompt,
            output_schema=FaithfulnessVerdicts,
        )
        .generate_score(generate_score)
        .generate_reason(description="Reason about the results", create_prompt=reason_prompt)
        .with_version(options_version(opts))
    )


@scorer_kind(
    "faithfulness",
    options=FaithfulnessOptions,
    needs_judge=True,
    description="share of the response's claims that the retrieved context supports",
    judge_calls_per_run=3,
    needs=("output", "context"),
)
def _faithfulness_kind(judge: JudgeModel | None, options: FaithfulnessOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_faithfulness_scorer(model=judge, options=options)
