"""Mastra's answer-similarity scorer (``createAnswerSimilarityScorer``), ported. ``eval`` only: it compares
the response with the dataset's ground truth, which live traces do not carry.

preprocess (prompt: split the answer and the ground truth into semantic units) → analyze (prompt: match every
ground-truth unit: exact, semantic, partial or missing; list extra units and contradictions) →
generate_score (function) → generate_reason (prompt).

Score: each match earns 1 + exact_match_bonus (exact), semantic_threshold (semantic), semantic_threshold / 2
(partial) or −missing_penalty (missing); the sum is divided by matches × (1 + exact_match_bonus); then
contradictions × contradiction_penalty and min(extra units × extra_info_penalty, 0.2) are subtracted; the result
is clamped to [0, 1], × scale, rounded to two decimals the JavaScript way. 0 when there are no matches.

A run without a ground truth (JavaScript-falsy: none, "", 0, false) is not scorable, with no judge call;
Mastra throws there. With ``require_ground_truth: false`` it scores 0 as in Mastra.
"""

from __future__ import annotations

from typing import Any, Literal

from sidecar.scorers.options import options_as
from sidecar.scorers.quality.answer_similarity_prompts import (
    INSTRUCTIONS,
    NO_GROUND_TRUTH_REASON_PROMPT,
    create_analyze_prompt,
    create_extract_prompt,
    create_reason_prompt,
)
from sidecar.scorers.quality_common import ScorerOptions, js_json, js_truthy
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import js_number, round_to_two_decimals

__all__ = [
    "AnswerSimilarityOptions",
    "Contradiction",
    "SemanticUnits",
    "SimilarityAnalysis",
    "UnitMatch",
    "answer_similarity_score",
    "create_answer_similarity_scorer",
]

NO_GROUND_TRUTH = "the run has no ground truth to compare the answer with"
EXTRA_INFO_PENALTY_CAP = 0.2


class AnswerSimilarityOptions(ScorerOptions):
    # A run without a ground truth: not scorable (True), or scored 0 (False).
    require_ground_truth: bool = True
    # What a semantic match earns (a partial match earns half of it).
    semantic_threshold: float = 0.8
    # What an exact match earns on top of 1.
    exact_match_bonus: float = 0.2
    # Subtracted for each ground-truth unit the answer misses.
    missing_penalty: float = 0.15
    # Subtracted (after normalising) for each contradiction.
    contradiction_penalty: float = 1.0
    # Subtracted (after normalising) for each unit the ground truth does not have, at most 0.2 in all.
    extra_info_penalty: float = 0.05
    # None → 1. Mastra merges the options over its defaults, so 0 stays 0.
    scale: float | None = None


class SemanticUnits(JudgeOutput):
    output_units: tuple[str, ...]
    ground_truth_units: tuple[str, ...]


class UnitMatch(JudgeOutput):
    ground_truth_unit: str
    output_unit: str | None  # required, null when missing
    match_type: Literal["exact", "semantic", "partial", "missing"]
    explanation: str


class Contradiction(JudgeOutput):
    output_unit: str
    ground_truth_unit: str
    explanation: str


class SimilarityAnalysis(JudgeOutput):
    matches: tuple[UnitMatch, ...]
    extra_in_output: tuple[str, ...]
    contradictions: tuple[Contradiction, ...]


def answer_similarity_score(analysis: SimilarityAnalysis, options: AnswerSimilarityOptions) -> float:
    scale = 1.0 if options.scale is None else options.scale
    if not analysis.matches:
        return 0.0  # nothing to compare with: the worst score
    earned = {
        "exact": 1.0 + options.exact_match_bonus,
        "semantic": options.semantic_threshold,
        "partial": options.semantic_threshold * 0.5,
        "missing": -options.missing_penalty,
    }
    score = sum(earned[m.match_type] for m in analysis.matches)
    score /= len(analysis.matches) * (1.0 + options.exact_match_bonus)
    score -= len(analysis.contradictions) * options.contradiction_penalty
    score -= min(len(analysis.extra_in_output) * options.extra_info_penalty, EXTRA_INFO_PENALTY_CAP)
    return round_to_two_decimals(max(0.0, min(1.0, score)) * scale)


def _ground_truth_text(ground_truth: Any) -> str:
    return ground_truth if isinstance(ground_truth, str) else js_json(ground_truth)


def create_answer_similarity_scorer(
    *, model: str | JudgeModel, options: AnswerSimilarityOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options_as(AnswerSimilarityOptions, options)
    scale = 1.0 if opts.scale is None else opts.scale

    def answer(ctx: StepContext) -> str:
        return get_assistant_message_from_run_output(ctx.run.output) or ""

    def extract_prompt(ctx: StepContext) -> str | NotScorable:
        ground_truth = ctx.run.ground_truth
        if not js_truthy(ground_truth):
            if opts.require_ground_truth:
                return not_scorable(NO_GROUND_TRUTH)
            return create_extract_prompt(answer="", ground_truth="")
        return create_extract_prompt(answer=answer(ctx), ground_truth=_ground_truth_text(ground_truth))

    def analyze_prompt(ctx: StepContext) -> str:
        units = ctx.results.preprocess_step_result
        if not isinstance(units, SemanticUnits):
            units = SemanticUnits(output_units=(), ground_truth_units=())
        return create_analyze_prompt(output_units=units.output_units, ground_truth_units=units.ground_truth_units)

    def generate_score(ctx: StepContext) -> float:
        analysis = ctx.results.analyze_step_result
        if not js_truthy(ctx.run.ground_truth) or not isinstance(analysis, SimilarityAnalysis):
            return 0.0
        return answer_similarity_score(analysis, opts)

    def reason_prompt(ctx: StepContext) -> str:
        ground_truth = ctx.run.ground_truth
        if not js_truthy(ground_truth):
            return NO_GROUND_TRUTH_REASON_PROMPT
        return create_reason_prompt(
            answer=answer(ctx),
            ground_truth=_ground_truth_text(ground_truth),
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            analysis_json=js_json(ctx.results.analyze_step_result),
        )

    weights = (
        opts.semantic_threshold,
        opts.exact_match_bonus,
        opts.missing_penalty,
        opts.contradiction_penalty,
        opts.extra_info_penalty,
        scale,
    )
    return (
        create_scorer(
            id="answer-similarity-scorer",
            name="Answer Similarity Scorer",
            description="How closely the response matches the ground-truth answer, unit by unit",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(
            description="Split the answer and the ground truth into semantic units",
            create_prompt=extract_prompt,
            output_schema=SemanticUnits,
        )
        .analyze(
            description="Match the ground truth's units against the answer's",
            create_prompt=analyze_prompt,
            output_schema=SimilarityAnalysis,
        )
        .generate_score(generate_score)
        .generate_reason(description="Explain the similarity score", create_prompt=reason_prompt)
        .with_version(f"1:{int(opts.require_ground_truth)}:{':'.join(js_number(w) for w in weights)}")
    )


@scorer_kind(
    "answer-similarity",
    options=AnswerSimilarityOptions,
    needs_judge=True,
    description="how closely the response matches the expected answer (semantic units matched, contradictions "
    "penalised)",
    judge_calls_per_run=3,
    needs=("output", "ground_truth"),
    direction="higher",
    eval_only="needs a ground truth (the expected answer of each dataset item), which live traces do not carry",
)
def _answer_similarity_kind(judge: JudgeModel | None, options: AnswerSimilarityOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_answer_similarity_scorer(model=judge, options=options)
