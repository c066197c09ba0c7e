"""Mastra's noise-sensitivity scorer (``createNoiseSensitivityScorerLLM``), ported. ``eval`` only.

analyze (prompt: the impact of the noise per dimension, major issues, a robustness score) →
generate_score (function: the judge's robustness score, lowered to the impact-weighted mean when the two
diverge, less a penalty per major issue) → generate_reason (prompt).

Mastra takes the baseline answer and the noisy question from the scorer's options, one pair per scorer.
Here each may also come from the run's ground truth (an ``eval`` item's ``ground_truth``): a string is the
baseline answer; an object may hold ``baselineResponse``, ``noisyQuery`` and ``noiseType`` (or their
snake_case names). Options win over the ground truth; a run with no baseline or no noisy question is not
scorable. Mastra's noise sensitivity reads no retrieved context, so neither does this port.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sidecar.scorers.context import js_json
from sidecar.scorers.options import options_as
from sidecar.scorers.rag.noise_sensitivity_prompts import INSTRUCTIONS, create_analyze_prompt, create_reason_prompt
from sidecar.scorers.rag.rag_common import options_version
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.verdicts import JudgeOutput, UnitScore
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "ImpactWeights",
    "NoiseCase",
    "NoiseDimension",
    "NoisePenalties",
    "NoiseScoring",
    "NoiseSensitivityAnalysis",
    "NoiseSensitivityOptions",
    "create_noise_sensitivity_scorer_llm",
    "noise_case",
    "noise_sensitivity_score",
]

ImpactLevel = Literal["none", "minimal", "moderate", "significant", "severe"]


class NoiseDimension(JudgeOutput):
    dimension: str
    impact_level: ImpactLevel
    specific_changes: str
    noise_influence: str


class NoiseSensitivityAnalysis(JudgeOutput):
    dimensions: tuple[NoiseDimension, ...]
    overall_assessment: str
    major_issues: tuple[str, ...] = ()
    robustness_score: UnitScore


class _Options(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ImpactWeights(_Options):
    none: float = 1.0
    minimal: float = 0.85
    moderate: float = 0.6
    significant: float = 0.3
    severe: float = 0.1


class NoisePenalties(_Options):
    major_issue_per_item: float = 0.1
    max_major_issue_penalty: float = 0.3


class NoiseScoring(_Options):
    impact_weights: ImpactWeights = ImpactWeights()
    penalties: NoisePenalties = NoisePenalties()
    # Above this gap between the judge's score and the impact-weighted mean, the lower of the two is kept.
    discrepancy_threshold: float = 0.2


class NoiseSensitivityOptions(_Options):
    # Not in Mastra: every kind here has a scale (falsy → 1).
    scale: float | None = None
    # Mastra requires both; here each may come from the run's ground truth instead.
    baseline_response: str | None = Field(default=None, min_length=1)
    noisy_query: str | None = Field(default=None, min_length=1)
    noise_type: str | None = None
    scoring: NoiseScoring = NoiseScoring()


class _GroundTruthCase(BaseModel):
    # Other scorers may share the dataset's ground truth: keys this kind does not read are ignored.
    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)

    baseline_response: str | None = None
    noisy_query: str | None = None
    noise_type: str | None = None


@dataclass(frozen=True, slots=True)
class NoiseCase:
    """What one run is compared with: the baseline answer, the noisy question, the kind of noise."""

    baseline_response: str | None
    noisy_query: str | None
    noise_type: str | None


def noise_case(options: NoiseSensitivityOptions, ground_truth: Any) -> NoiseCase:
    """Options first, then the ground truth (a string: the baseline answer; an object: any of the three)."""
    from_truth = _GroundTruthCase()
    if isinstance(ground_truth, str):
        from_truth = _GroundTruthCase(baseline_response=ground_truth)
    elif isinstance(ground_truth, Mapping):
        from_truth = _GroundTruthCase.model_validate(dict(ground_truth))
    return NoiseCase(
        baseline_response=options.baseline_response or from_truth.baseline_response or None,
        noisy_query=options.noisy_query or from_truth.noisy_query or None,
        noise_type=options.noise_type or from_truth.noise_type or None,
    )


def noise_sensitivity_score(analysis: NoiseSensitivityAnalysis, *, scoring: NoiseScoring, scale: float = 1) -> float:
    """``max(0, min(judge, weighted) − issues penalty) × scale``, rounded as Mastra rounds.

    ``min`` applies only when the judge's robustness score and the impact-weighted mean of the dimensions
    differ by more than ``discrepancy_threshold``; the penalty is per major issue, capped.
    """
    final = max(0.0, min(1.0, analysis.robustness_score))
    if analysis.dimensions:
        weights = scoring.impact_weights.model_dump()
        total = 0.0
        for dimension in analysis.dimensions:  # left to right, as Array.reduce adds
            total += weights[dimension.impact_level]
        calculated = total / len(analysis.dimensions)
        if abs(final - calculated) > scoring.discrepancy_threshold:
            final = min(final, calculated)
    penalties = scoring.penalties
    issues_penalty = min(len(analysis.major_issues) * penalties.major_issue_per_item, penalties.max_major_issue_penalty)
    final = max(0.0, final - issues_penalty)
    return round_to_two_decimals(final * scale)


def create_noise_sensitivity_scorer_llm(
    *, model: str | JudgeModel, options: NoiseSensitivityOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options_as(NoiseSensitivityOptions, options)
    scale = opts.scale or 1

    def analyze_prompt(ctx: StepContext) -> str | NotScorable:
        case = noise_case(opts, ctx.run.ground_truth)
        if case.baseline_response is None:
            return not_scorable(
                "no baseline response: set options.baseline_response or give the item a ground_truth "
                "(the answer to the clean question)"
            )
        if case.noisy_query is None:
            return not_scorable(
                "no noisy query: set options.noisy_query or give the item a ground_truth object with noisyQuery"
            )
        original_query = get_user_message_from_run_input(ctx.run.input) or ""
        noisy_response = get_assistant_message_from_run_output(ctx.run.output) or ""
        if not original_query or not noisy_response:
            raise ValueError("Both original query and noisy response are required for evaluation")
        return create_analyze_prompt(
            user_query=original_query,
            baseline_response=case.baseline_response,
            noisy_query=case.noisy_query,
            noisy_response=noisy_response,
            noise_type=case.noise_type,
        )

    def generate_score(ctx: StepContext) -> float:
        return noise_sensitivity_score(ctx.results.analyze_step_result, scoring=opts.scoring, scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        analysis: NoiseSensitivityAnalysis = ctx.results.analyze_step_result
        return create_reason_prompt(
            user_query=get_user_message_from_run_input(ctx.run.input) or "",
            score=ctx.score if ctx.score is not None else 0.0,
            dimensions_json=js_json([d.model_dump(by_alias=True) for d in analysis.dimensions]),
            major_issues=analysis.major_issues,
            overall_assessment=analysis.overall_assessment,
        )

    return (
        create_scorer(
            id="noise-sensitivity-scorer",
            name="Noise Sensitivity (LLM)",
            description=(
                "Evaluates how robust an agent is when exposed to irrelevant, distracting, or misleading information"
            ),
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .analyze(
            description="Analyze the impact of noise on agent response quality",
            create_prompt=analyze_prompt,
            output_schema=NoiseSensitivityAnalysis,
        )
        .generate_score(generate_score)
        .generate_reason(
            description="Generate human-readable explanation of noise sensitivity evaluation",
            create_prompt=reason_prompt,
        )
        .with_version(options_version(opts))
    )


@scorer_kind(
    "noise-sensitivity",
    options=NoiseSensitivityOptions,
    needs_judge=True,
    description="how little the response degrades when noise is added to the request, against a baseline response",
    judge_calls_per_run=2,
    needs=("input", "output", "ground_truth"),
    eval_only="needs a baseline response (the answer to the clean request) and the noisy request, which live "
    "traces do not carry; score it with `eval` on a dataset whose ground_truth holds them",
)
def _noise_sensitivity_kind(judge: JudgeModel | None, options: NoiseSensitivityOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_noise_sensitivity_scorer_llm(model=judge, options=options)
