"""Mastra's hallucination scorer (``createHallucinationScorer``), ported. Lower is better.

preprocess (prompt: the answer's claims) → analyze (prompt: is each claim a hallucination, against the
context) → generate_score (function: hallucinated verdicts ÷ all verdicts × scale) → generate_reason
(prompt). Mastra reads only ``options.context`` (or ``getContext``) here; we use the shared lookup of every
RAG kind (``sidecar.scorers.context``), and a run with no context at all is not scorable.
"""

from __future__ import annotations

from typing import Any

from sidecar.scorers.context import ContextExtractor
from sidecar.scorers.rag import hallucination_prompts as prompts
from sidecar.scorers.rag.claims_in_context import (
    ClaimsInContext,
    ContextClaimsOptions,
    create_claims_in_context_scorer,
    share_of_yes,
)
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.verdicts import JudgeOutput, YesNo
from sidecar.scoring import JudgeModel, Scorer

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


class HallucinationOptions(ContextClaimsOptions):
    pass


def hallucination_score(verdicts: HallucinationVerdicts, *, scale: float = 1) -> float:
    """Hallucinated ("yes") verdicts ÷ all verdicts × scale, rounded as Mastra rounds; no verdicts: 0."""
    return share_of_yes(verdicts.verdicts, scale=scale)


_HALLUCINATION = ClaimsInContext(
    id="hallucination-scorer",
    name="Hallucination Scorer",
    description="A scorer that evaluates the hallucination of an LLM output to an input",
    extract_description="Extract all claims from the given output",
    instructions=prompts.INSTRUCTIONS,
    extract_prompt=prompts.create_extract_prompt,
    analyze_prompt=prompts.create_analyze_prompt,
    reason_prompt=prompts.create_reason_prompt,
    verdicts_schema=HallucinationVerdicts,
    options=HallucinationOptions,
)


def create_hallucination_scorer(
    *,
    model: str | JudgeModel,
    options: HallucinationOptions | dict[str, Any] | None = None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    return create_claims_in_context_scorer(
        _HALLUCINATION, model=model, options=options, context_extractor=context_extractor
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
