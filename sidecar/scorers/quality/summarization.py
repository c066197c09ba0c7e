"""Mastra's summarization scorer (``createSummarizationScorer``), ported.

preprocess (prompt: judge each claim of the summary against the source, and draw closed questions from the
source) → analyze (prompt: which questions the summary alone answers; the source is not shown) →
generate_score (function) → generate_reason (prompt).

Score: min(alignment, coverage) × scale, rounded to two decimals the JavaScript way, where alignment =
supported claims / claims and coverage = answered questions / questions asked (at most ``max_questions``;
a verdict the judge left out counts as unanswered, extra verdicts are ignored). 0 when the summary yields no
claims or the source no questions.

The summary is the last assistant message with text (an agent that fetched the document with a tool first
has a text-less turn before it); the source is ``options.source``, else the run's user message. A Python
caller may pass ``source_extractor(input, output)`` instead, used for agent-shaped runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import StrictBool, field_validator

from sidecar.scorers.options import options_as
from sidecar.scorers.quality.summarization_prompts import (
    INSTRUCTIONS,
    create_coverage_prompt,
    create_reason_prompt,
    create_source_judgement_prompt,
)
from sidecar.scorers.quality_common import ScorerOptions
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import (
    extract_agent_response_messages,
    get_assistant_message_from_run_output,
    get_user_message_from_run_input,
    is_agent_run_input,
    is_agent_run_output,
)
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.prompting import js_number, round_to_two_decimals

__all__ = [
    "AlignmentVerdict",
    "CoverageJudgement",
    "CoverageVerdict",
    "SourceJudgement",
    "SummarizationAxes",
    "SummarizationOptions",
    "create_summarization_scorer",
    "measure_axes",
    "summary_of",
]

SourceExtractor = Callable[[Any, Any], str]


class SummarizationOptions(ScorerOptions):
    # None → 1. Mastra multiplies by ``options.scale ?? 1``, so 0 stays 0.
    scale: float | None = None
    # The text the summary is judged against; None: the run's user message.
    source: str | None = None
    # At most this many coverage questions are drawn from the source (and counted).
    max_questions: int = 10

    @field_validator("max_questions")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("maxQuestions must be at least 1 for Summarization scoring")
        return value


class AlignmentVerdict(JudgeOutput):
    claim: str
    supported: StrictBool
    reason: str


class SourceJudgement(JudgeOutput):
    alignment: tuple[AlignmentVerdict, ...]
    questions: tuple[str, ...]


class CoverageVerdict(JudgeOutput):
    question: str
    answered: StrictBool
    reason: str


class CoverageJudgement(JudgeOutput):
    coverage: tuple[CoverageVerdict, ...]


@dataclass(frozen=True, slots=True)
class SummarizationAxes:
    alignment_score: float
    coverage_score: float
    unsupported_claims: tuple[str, ...]
    missing_questions: tuple[str, ...]
    is_scorable: bool


def _ratio(matched: int, total: int) -> float:
    return 0.0 if total == 0 else min(1.0, matched / total)


def measure_axes(
    *,
    questions: tuple[str, ...],
    alignment: tuple[AlignmentVerdict, ...],
    coverage: tuple[CoverageVerdict, ...],
    max_questions: int,
) -> SummarizationAxes:
    """Coverage counts against the questions asked, not the verdicts returned: a judge that answers only some
    of them cannot raise the score by leaving the others out."""
    asked = min(len(questions), max_questions)
    judged = coverage[:asked]
    return SummarizationAxes(
        alignment_score=_ratio(sum(1 for v in alignment if v.supported), len(alignment)),
        coverage_score=_ratio(sum(1 for v in judged if v.answered), asked),
        unsupported_claims=tuple(v.claim for v in alignment if not v.supported),
        missing_questions=tuple(v.question for v in judged if not v.answered),
        is_scorable=bool(alignment) and asked > 0,
    )


def summary_of(output: Any) -> str:
    """The last assistant message with text, for agent output; else the output's assistant text."""
    if is_agent_run_output(output):
        responses = [text for text in extract_agent_response_messages(output) if text.strip()]
        if responses:
            return responses[-1]
    return get_assistant_message_from_run_output(output) or ""


def create_summarization_scorer(
    *,
    model: str | JudgeModel,
    options: SummarizationOptions | dict[str, Any] | None = None,
    source_extractor: SourceExtractor | None = None,
) -> Scorer:
    opts = options_as(SummarizationOptions, options)
    scale = 1.0 if opts.scale is None else opts.scale
    max_questions = opts.max_questions

    def source_of(ctx: StepContext) -> str:
        run_input, output = ctx.run.input, ctx.run.output
        if source_extractor is not None and is_agent_run_input(run_input) and is_agent_run_output(output):
            return source_extractor(run_input, output)
        if opts.source is not None:
            return opts.source
        return get_user_message_from_run_input(run_input) or ""

    def judgement(ctx: StepContext) -> SourceJudgement | None:
        value = ctx.results.preprocess_step_result
        return value if isinstance(value, SourceJudgement) else None

    def axes(ctx: StepContext) -> SummarizationAxes:
        source = judgement(ctx)
        coverage = ctx.results.analyze_step_result
        return measure_axes(
            questions=source.questions if source else (),
            alignment=source.alignment if source else (),
            coverage=coverage.coverage if isinstance(coverage, CoverageJudgement) else (),
            max_questions=max_questions,
        )

    def source_judgement_prompt(ctx: StepContext) -> str:
        return create_source_judgement_prompt(
            source=source_of(ctx), summary=summary_of(ctx.run.output), max_questions=max_questions
        )

    def coverage_prompt(ctx: StepContext) -> str:
        source = judgement(ctx)
        questions = source.questions[:max_questions] if source else ()
        return create_coverage_prompt(summary=summary_of(ctx.run.output), questions=questions)

    def generate_score(ctx: StepContext) -> float:
        measured = axes(ctx)
        if not measured.is_scorable:
            return 0.0
        return round_to_two_decimals(min(measured.alignment_score, measured.coverage_score) * scale)

    def reason_prompt(ctx: StepContext) -> str:
        measured = axes(ctx)
        return create_reason_prompt(
            source=source_of(ctx),
            summary=summary_of(ctx.run.output),
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            alignment_score=round_to_two_decimals(measured.alignment_score),
            coverage_score=round_to_two_decimals(measured.coverage_score),
            unsupported_claims=measured.unsupported_claims,
            missing_questions=measured.missing_questions,
        )

    # A different source (or extractor) judges differently: it is part of the scorer's identity.
    source_id = hashlib.sha256(opts.source.encode()).hexdigest()[:12] if opts.source is not None else "-"
    extractor_id = getattr(source_extractor, "__qualname__", "extractor") if source_extractor is not None else "-"
    return (
        create_scorer(
            id="summarization-scorer",
            name="Summarization Scorer",
            description="Whether a summary stays faithful to its source and keeps what the source states",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(
            description="Judge each claim of the summary against the source; draw coverage questions from it",
            create_prompt=source_judgement_prompt,
            output_schema=SourceJudgement,
        )
        .analyze(
            description="Answer the coverage questions from the summary alone",
            create_prompt=coverage_prompt,
            output_schema=CoverageJudgement,
        )
        .generate_score(generate_score)
        .generate_reason(description="Explain which measure set the score", create_prompt=reason_prompt)
        .with_version(f"1:{js_number(scale)}:{max_questions}:{source_id}:{extractor_id}")
    )


@scorer_kind(
    "summarization",
    options=SummarizationOptions,
    needs_judge=True,
    description="how faithful and complete a summary is: the lower of claim support and coverage of the source",
    judge_calls_per_run=3,
    needs=("input", "output"),
    direction="higher",
)
def _summarization_kind(judge: JudgeModel | None, options: SummarizationOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_summarization_scorer(model=judge, options=options)
