"""Mastra's keyword-coverage code scorer (``createKeywordCoverageScorer``), ported.

preprocess (function: the keywords of the run's input text and of its output text,
``sidecar.scorers.code.keywords``) → analyze (function: how many input keywords the output has) →
generate_score (function: matched / total; 1 when the input has no keywords). No judge.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.code.keywords import ENGLISH_STOPWORDS, extract_keywords
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_input_messages_text, get_output_messages_text
from sidecar.scoring import JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import js_number

__all__ = [
    "KeywordCoverageAnalysis",
    "KeywordCoverageOptions",
    "KeywordCoveragePreprocess",
    "create_keyword_coverage_scorer",
]


class KeywordCoverageOptions(BaseModel):
    """Mastra's scorer takes no options; ``scale`` (falsy → 1) multiplies the score, as for every kind."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None


class KeywordCoveragePreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    # Mastra keeps JavaScript Sets here (stored as {}); we keep the keywords, in order of appearance.
    reference_keywords: tuple[str, ...]
    response_keywords: tuple[str, ...]


class KeywordCoverageAnalysis(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    total_keywords_length: int
    matched_keywords_length: int


def create_keyword_coverage_scorer(options: KeywordCoverageOptions | dict[str, Any] | None = None) -> Scorer:
    """Mastra's ``createKeywordCoverageScorer()``: no options (an empty mapping is accepted)."""
    opts = options_as(KeywordCoverageOptions, options)
    scale = opts.scale or 1  # falsy → 1, as Mastra's LLM scorers read it

    def preprocess(ctx: StepContext) -> KeywordCoveragePreprocess | NotScorable:
        # Mastra reads a missing input as empty text (score 1); here a run without input is not scorable.
        input_text = get_input_messages_text(ctx.run.input)
        if input_text is None:
            return not_scorable("the run has no input text")
        output_text = get_output_messages_text(ctx.run.output)
        if output_text is None:
            return not_scorable("the run has no output text")
        return KeywordCoveragePreprocess(
            reference_keywords=tuple(extract_keywords(input_text, ENGLISH_STOPWORDS)),
            response_keywords=tuple(extract_keywords(output_text, ENGLISH_STOPWORDS)),
        )

    def analyze(ctx: StepContext) -> KeywordCoverageAnalysis:
        keywords: KeywordCoveragePreprocess = ctx.results.preprocess_step_result
        response = frozenset(keywords.response_keywords)
        matched = sum(1 for keyword in keywords.reference_keywords if keyword in response)
        return KeywordCoverageAnalysis(
            total_keywords_length=len(keywords.reference_keywords), matched_keywords_length=matched
        )

    def generate_score(ctx: StepContext) -> float:
        counts: KeywordCoverageAnalysis = ctx.results.analyze_step_result
        if counts.total_keywords_length == 0:
            return 1.0 * scale
        return counts.matched_keywords_length / counts.total_keywords_length * scale

    return (
        create_scorer(
            id="keyword-coverage-scorer",
            name="Keyword Coverage Scorer",
            description="Share of the input's keywords (SMART stop list removed) that the output repeats",
        )
        .preprocess(preprocess)
        .analyze(analyze)
        .generate_score(generate_score)
        .with_version(f"1:scale={js_number(scale)}")
    )


@scorer_kind(
    "keyword-coverage",
    options=KeywordCoverageOptions,
    needs_judge=False,
    description="share of the request's keywords that the response repeats (stop words removed)",
    needs=("input", "output"),
)
def _keyword_coverage_kind(judge: JudgeModel | None, options: KeywordCoverageOptions) -> Scorer:
    return create_keyword_coverage_scorer(options)
