"""Mastra's faithfulness scorer (``createFaithfulnessScorer``), ported.

preprocess (prompt: the answer's claims) → analyze (prompt: a verdict per claim against the context) →
generate_score (function: supported verdicts ÷ all verdicts × scale) → generate_reason (prompt).
The context comes from the shared lookup (``sidecar.scorers.context``); a run with none is not scorable
before any judge call. docs/scorers-context.md lists what differs from Mastra.
"""

from __future__ import annotations

from typing import Any

from sidecar.scorers.context import ContextExtractor
from sidecar.scorers.rag import faithfulness_prompts as prompts
from sidecar.scorers.rag.claims_in_context import (
    ClaimsInContext,
    ContextClaimsOptions,
    create_claims_in_context_scorer,
    share_of_yes,
)
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.verdicts import JudgeOutput, YesNoUnsure
from sidecar.scoring import JudgeModel, Scorer

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


class FaithfulnessOptions(ContextClaimsOptions):
    pass


def faithfulness_score(verdicts: FaithfulnessVerdicts, *, scale: float = 1) -> float:
    """Supported ("yes") verdicts ÷ all verdicts × scale, rounded as Mastra rounds; no verdicts: 0."""
    return share_of_yes(verdicts.verdicts, scale=scale)


_FAITHFULNESS = ClaimsInContext(
    id="faithfulness-scorer",
    name="Faithfulness Scorer",
    description="A scorer that evaluates the faithfulness of an LLM output to an input",
    extract_description="Extract relevant statements from the LLM output",
    instructions=prompts.INSTRUCTIONS,
    extract_prompt=prompts.create_extract_prompt,
    analyze_prompt=prompts.create_analyze_prompt,
    reason_prompt=prompts.create_reason_prompt,
    verdicts_schema=FaithfulnessVerdicts,
    options=FaithfulnessOptions,
)


def create_faithfulness_scorer(
    *,
    model: str | JudgeModel,
    options: FaithfulnessOptions | dict[str, Any] | None = None,
    context_extractor: ContextExtractor | None = None,
) -> Scorer:
    return create_claims_in_context_scorer(
        _FAITHFULNESS, model=model, options=options, context_extractor=context_extractor
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
