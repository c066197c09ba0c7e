"""Mastra's hallucination scorer (``createHallucinationScorer``), ported. Lower is better.

preprocess (prompt: the answer's claims) → analyze (prompt: is each claim a hallucination, against the
context) → generate_score (function: hallucinated verdicts ÷ all verdicts × scale) → generate_reason
(prompt). Mastra reads only ``options.context`` (or ``getContext``) here; we use the shared lookup of every
RAG kind (``sidecar.scorers.context``), and a run with no context at all is not scorable.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.context import NO_CONTEXT_REASON, ContextExtractor, RetrievedContext, find_context, js_json
from sidecar.scorers.hallucination_prompts import (
    INSTRUCTIONS,
    create_analyze_prompt,
    create_extract_prompt,
    create_reason_prompt,
)
from sidecar.scorers.judging import ExtractedClaims, JudgeOutput, YesNo, options_version
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "HallucinationOptions",
    "HallucinationVerdict",
    "HallucinationVerdicts",
    "create_hallucination_scorer",
    "hallucination_score",
]


class HallucinationVerdict(JudgeOutput):
    statement: str
    verdict: YesNo  # "yes": hallucinated
    reason: str


class HallucinationVerdicts(JudgeOutput):
    verdicts: tuple[HallucinationVerdict, ...]


class HallucinationOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None
    # The same documents for every run; unset: request_context["context"], then the output's tool results.
    context: tuple[str, ...] | None = None


def hallucination_score(verdicts: HallucinationVerdicts, *, scale: float = 1) -> float:
    """Hallucinated ("yes") verdicts ÷ all verdicts × scale, rounded as Mastra rounds; no verdicts: 0."""
    total = len(verdicts.verdicts)
    if total == 0:
        return 0.0
    hallucinated = sum(1 for v in verdicts.verdicts if v.verdict == "yes")
    return round_to_two_decimals(hallucinated / total * scale)


def create_hallucination_scorer(
    *,
    model: str | JudgeModel,
    options: HallucinationOptions | dict[str, Any] | None = None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    opts = options if isinstance(options, HallucinationOptions) else HallucinationOptions.model_validate(options or {})
    scale = opts.scale or 1  # falsy → 1, as in Mastra

    def context_of(ctx: StepContext) -> RetrievedContext | None:
        return find_context(ctx.run, options_context=opts.context, extractor=context_extractor)

    def extract_prompt(ctx: StepContext) -> str | NotScorable:
        if context_of(ctx) is None:  # before the first judge call
            return not_scorable(NO_CONTEXT_REASON)
        return create_extract_prompt(output=get_assistant_message_from_run_output(ctx.run.output) or "")

    def analyze_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        claims: ExtractedClaims = ctx.results.preprocess_step_result
        return create_analyze_prompt(claims=claims.claims, context=found.pieces if found else ())

    def generate_score(ctx: StepContext) -> float:
        return hallucination_score(ctx.results.analyze_step_result, scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        verdicts: HallucinationVerdicts = ctx.results.analyze_step_result
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
            id="hallucination-scorer",
            name="Hallucination Scorer",
            description="A scorer that evaluates the hallucination of an LLM output to an input",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(
            description="Extract all claims from the given output",
            create_prompt=extract_prompt,
            output_schema=ExtractedClaims,
        )
        .analyze(
            description="Score the relevance of the statements to the input",
            create_prompt=analyze_prompt,
            output_schema=HallucinationVerdicts,
        )
        .generate_score(generate_score)
        .generate_reason(description="Reason about the results", create_prompt=reason_prompt)
        .with_version(options_version(opts))
    )


@scorer_kind(
    "hallucination",
    options=HallucinationOptions,
    needs_judge=True,
    description="share of the response's claims that contradict or go beyond the retrieved context",
    judge_calls_per_run=3,
    needs=("output", "context"),
    direction="lower",
)
def _hallucination_kind(judge: JudgeModel | None, options: HallucinationOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_hallucination_scorer(model=judge, options=options)
