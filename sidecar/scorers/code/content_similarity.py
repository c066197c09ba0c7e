"""Mastra's content-similarity code scorer (``createContentSimilarityScorer``), ported.

preprocess (function: the run's input text and output text, normalised) → generate_score (function: the
``string-similarity`` npm package's ``compareTwoStrings``, a Sørensen–Dice coefficient over character
bigrams). No judge.

What is compared, as in Mastra: the text of every input message joined with ``", "`` against the text
of every output message joined with ``", "``. Runs that are not in the agent shape fall back to the
first user message of the input and the assistant text of the output (``sidecar.scorers.text``).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.string_similarity import compare_two_strings
from sidecar.scorers.text import get_input_messages_text, get_output_messages_text
from sidecar.scoring import JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.prompting import js_number

__all__ = [
    "ContentSimilarityOptions",
    "ContentSimilarityPreprocess",
    "create_content_similarity_scorer",
]


class ContentSimilarityOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    ignore_case: bool = True
    ignore_whitespace: bool = True
    scale: float | None = None  # not in Mastra; falsy → 1, as for every kind


class ContentSimilarityPreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    processed_input: str
    processed_output: str


_JS_WHITESPACE = re.compile(r"[\s\ufeff]+")


def _js_whitespace_normalise(text: str) -> str:
    # text.replace(/\s+/g, ' ').trim()
    return _JS_WHITESPACE.sub(" ", text).strip(" ")


def create_content_similarity_scorer(options: ContentSimilarityOptions | dict[str, Any] | None = None) -> Scorer:
    """Options ``ignore_case`` (``ignoreCase``) and ``ignore_whitespace`` (``ignoreWhitespace``), both True.

    Unlike Mastra, passing only one option keeps the other's default (Mastra's destructuring default
    applies only when no options object is passed at all, leaving the other option off).
    """
    opts = options_as(ContentSimilarityOptions, options)
    scale = opts.scale or 1

    def preprocess(ctx: StepContext) -> ContentSimilarityPreprocess:
        processed_input = get_input_messages_text(ctx.run.input) or ""
        processed_output = get_output_messages_text(ctx.run.output) or ""
        if opts.ignore_case:
            processed_input, processed_output = processed_input.lower(), processed_output.lower()
        if opts.ignore_whitespace:
            processed_input = _js_whitespace_normalise(processed_input)
            processed_output = _js_whitespace_normalise(processed_output)
        return ContentSimilarityPreprocess(processed_input=processed_input, processed_output=processed_output)

    def generate_score(ctx: StepContext) -> float:
        texts: ContentSimilarityPreprocess = ctx.results.preprocess_step_result
        return compare_two_strings(texts.processed_input, texts.processed_output) * scale

    scorer = (
        create_scorer(
            id="content-similarity",
            description=("Textual similarity of the run's input and output: Dice coefficient over character bigrams"),
        )
        .preprocess(preprocess)
        .generate_score(generate_score)
    )
    # A scale changes the scores: other score ids. Unscaled keeps the ids it always had.
    return scorer if scale == 1 else scorer.with_version(f"1:scale={js_number(scale)}")


@scorer_kind(
    "content-similarity",
    options=ContentSimilarityOptions,
    needs_judge=False,
    description="textual similarity of the response to the request (Dice coefficient of character bigrams)",
    needs=("input", "output"),
)
def _content_similarity_kind(judge: JudgeModel | None, options: ContentSimilarityOptions) -> Scorer:
    return create_content_similarity_scorer(options=options)
