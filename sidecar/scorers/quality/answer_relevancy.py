"""Mastra's answer-relevancy scorer (``createAnswerRelevancyScorer``), ported.

preprocess (prompt: split the response into statements) → analyze (prompt: a yes/unsure/no verdict per
statement against the user's question) → generate_score (function) → generate_reason (prompt).

Score: (yes verdicts + uncertainty_weight × unsure verdicts) / verdicts, × scale, rounded to two decimals
the JavaScript way; 0 when there are no verdicts (an empty response has no statements).
"""

from __future__ import annotations

from typing import Any

from sidecar.scorers.options import options_as
from sidecar.scorers.quality.answer_relevancy_prompts import (
    INSTRUCTIONS,
    create_extract_prompt,
    create_reason_prompt,
    create_score_prompt,
)
from sidecar.scorers.quality_common import ScorerOptions, js_json
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.verdicts import JudgeOutput, YesNoUnsure
from sidecar.scoring import Judge, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.prompting import js_number, round_to_two_decimals

__all__ = [
    "AnswerRelevancyOptions",
    "AnswerRelevancyResults",
    "AnswerRelevancyStatements",
    "RelevancyVerdict",
    "answer_relevancy_score",
    "create_answer_relevancy_scorer",
]


class AnswerRelevancyOptions(ScorerOptions):
    # What an "unsure" (partly relevant) statement counts for; a "yes" counts 1, a "no" 0.
    uncertainty_weight: float = 0.3
    # None → 1. Mastra multiplies by options.scale as given, so 0 stays 0.
    scale: float | None = None


class AnswerRelevancyStatements(JudgeOutput):
    statements: tuple[str, ...]


class RelevancyVerdict(JudgeOutput):
    result: YesNoUnsure
    reason: str


class AnswerRelevancyResults(JudgeOutput):
    results: tuple[RelevancyVerdict, ...]


def answer_relevancy_score(
    verdicts: tuple[RelevancyVerdict, ...], *, uncertainty_weight: float = 0.3, scale: float = 1
) -> float:
    if not verdicts:
        return 0.0
    relevant = sum(1.0 if v.result == "yes" else uncertainty_weight if v.result == "unsure" else 0.0 for v in verdicts)
    return round_to_two_decimals(relevant / len(verdicts) * scale)


def create_answer_relevancy_scorer(
    *, model: str | JudgeModel, options: AnswerRelevancyOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options_as(AnswerRelevancyOptions, options)
    scale = 1.0 if opts.scale is None else opts.scale

    def question(ctx: StepContext) -> str:
        return get_user_message_from_run_input(ctx.run.input) or ""

    def response(ctx: StepContext) -> str:
        return get_assistant_message_from_run_output(ctx.run.output) or ""

    def extract_prompt(ctx: StepContext) -> str:
        return create_extract_prompt(response(ctx))

    def score_prompt(ctx: StepContext) -> str:
        extracted = ctx.results.preprocess_step_result
        statements = extracted.statements if isinstance(extracted, AnswerRelevancyStatements) else ()
        return create_score_prompt(question(ctx), statements)

    def generate_score(ctx: StepContext) -> float:
        analysis = ctx.results.analyze_step_result
        verdicts = analysis.results if isinstance(analysis, AnswerRelevancyResults) else ()
        return answer_relevancy_score(verdicts, uncertainty_weight=opts.uncertainty_weight, scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        analysis = ctx.results.analyze_step_result
        verdicts = analysis.results if isinstance(analysis, AnswerRelevancyResults) else ()
        return create_reason_prompt(
            question=question(ctx),
            response=response(ctx),
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            results_json=js_json(verdicts),
        )

    return (
        create_scorer(
            id="answer-relevancy-scorer",
            name="Answer Relevancy Scorer",
            description="How relevant the response's statements are to the user's question",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(
            description="Split the response into statements",
            create_prompt=extract_prompt,
            output_schema=AnswerRelevancyStatements,
        )
        .analyze(
            description="Judge each statement's relevance to the question",
            create_prompt=score_prompt,
            output_schema=AnswerRelevancyResults,
        )
        .generate_score(generate_score)
        .generate_reason(description="Explain the relevancy score", create_prompt=reason_prompt)
        .with_version(f"1:{js_number(opts.uncertainty_weight)}:{js_number(scale)}")
    )


@scorer_kind(
    "answer-relevancy",
    options=AnswerRelevancyOptions,
    needs_judge=True,
    description="how relevant the response is to the user's question (share of relevant statements)",
    judge_calls_per_run=3,
    needs=("input", "output"),
    direction="higher",
)
def _answer_relevancy_kind(judge: JudgeModel | None, options: AnswerRelevancyOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_answer_relevancy_scorer(model=judge, options=options)
