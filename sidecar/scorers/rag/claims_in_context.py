"""The pipeline faithfulness and hallucination share, ported from Mastra's two scorers of that shape:
preprocess (prompt: the answer's claims) → analyze (prompt: a verdict per claim against the retrieved
context) → generate_score (function: "yes" verdicts ÷ all verdicts × scale) → generate_reason (prompt).
They differ in their prompts, their verdict schema and what a "yes" means. The context comes from the shared
lookup (``sidecar.scorers.context``); a run with none is not scorable before any judge call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.context import NO_CONTEXT_REASON, ContextExtractor, RetrievedContext, find_context, js_json
from sidecar.scorers.options import options_as
from sidecar.scorers.rag.rag_common import ExtractedClaims, options_version
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = ["ClaimsInContext", "ContextClaimsOptions", "create_claims_in_context_scorer", "share_of_yes"]


class ContextClaimsOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None
    # The same documents for every run; unset: request_context["context"], then the output's tool results.
    context: tuple[str, ...] | None = None


class _Verdict(Protocol):
    @property
    def verdict(self) -> str: ...


def share_of_yes(verdicts: Sequence[_Verdict], *, scale: float = 1) -> float:
    """ "yes" verdicts ÷ all verdicts × scale, rounded as Mastra rounds; no verdicts: 0."""
    if not verdicts:
        return 0.0
    return round_to_two_decimals(sum(1 for v in verdicts if v.verdict == "yes") / len(verdicts) * scale)


@dataclass(frozen=True, slots=True)
class ClaimsInContext:
    """What one scorer of this shape says and asks: its identity, its prompts and its verdicts' schema."""

    id: str
    name: str
    description: str
    extract_description: str
    instructions: str
    extract_prompt: Callable[..., str]  # (output=)
    analyze_prompt: Callable[..., str]  # (claims=, context=)
    reason_prompt: Callable[..., str]  # (input=, output=, context=, score=, scale=, verdicts_json=)
    verdicts_schema: type[JudgeOutput]  # with a ``verdicts`` tuple of items carrying ``verdict``
    options: type[ContextClaimsOptions]


def create_claims_in_context_scorer(
    kind: ClaimsInContext,
    *,
    model: str | JudgeModel,
    options: ContextClaimsOptions | dict[str, Any] | None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    """A scorer of this shape: ``kind``'s prompts over its options (``options`` read as ``kind.options``)."""
    options = options_as(kind.options, options)
    scale = options.scale or 1  # falsy → 1, as in Mastra

    def context_of(ctx: StepContext) -> RetrievedContext | None:
        return find_context(ctx.run, options_context=options.context, extractor=context_extractor)

    def extract_prompt(ctx: StepContext) -> str | NotScorable:
        # The lookup runs first: a run without context costs no judge call.
        if context_of(ctx) is None:
            return not_scorable(NO_CONTEXT_REASON)
        return kind.extract_prompt(output=get_assistant_message_from_run_output(ctx.run.output) or "")

    def analyze_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        claims: ExtractedClaims = ctx.results.preprocess_step_result
        return kind.analyze_prompt(claims=claims.claims, context=found.pieces if found else ())

    def generate_score(ctx: StepContext) -> float:
        return share_of_yes(ctx.results.analyze_step_result.verdicts, scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        found = context_of(ctx)
        verdicts: Any = ctx.results.analyze_step_result.verdicts
        return kind.reason_prompt(
            input=get_user_message_from_run_input(ctx.run.input) or "",
            output=get_assistant_message_from_run_output(ctx.run.output) or "",
            context=found.pieces if found else (),
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            verdicts_json=js_json([v.model_dump(by_alias=True, exclude_none=True) for v in verdicts]),
        )

    return (
        create_scorer(
            id=kind.id, name=kind.name, description=kind.description, judge=Judge.of(model, kind.instructions)
        )
        .preprocess(description=kind.extract_description, create_prompt=extract_prompt, output_schema=ExtractedClaims)
        .analyze(
            description="Score the relevance of the statements to the input",
            create_prompt=analyze_prompt,
            output_schema=kind.verdicts_schema,
        )
        .generate_score(generate_score)
        .generate_reason(description="Reason about the results", create_prompt=reason_prompt)
        .with_version(options_version(options))
    )
