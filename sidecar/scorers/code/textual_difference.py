"""Mastra's textual-difference code scorer (``createTextualDifferenceScorer``), ported.

preprocess (function: ratio, changes, length difference and confidence of the run's input text against its
output text) → generate_score (function: the ratio). No judge.

Mastra's scorer once used the npm ``difflib`` port (``SequenceMatcher.ratio()``, Ratcliff–Obershelp); its
current version (``@mastra/evals`` 1.x) computes the ratio from the longest common subsequence instead:
``2 × LCS / (len(input) + len(output))``, 1 for equal strings, 0 when either is empty. That is what we
port; the LCS length comes from ``rapidfuzz`` (bit-parallel, in C++), not a quadratic table. Lengths and
characters are JavaScript's UTF-16 code units. ``changes`` counts words: the longer word count minus the
words the two texts share (a multiset intersection, which is what Mastra's greedy matching counts).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from rapidfuzz.distance import LCSseq

from sidecar.scorers.code.js_text import JS_WHITESPACE_CLASS, js_split_whitespace, js_trim, utf16_len, utf16_pair
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_input_messages_text, get_output_messages_text
from sidecar.scoring import JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import js_number

__all__ = [
    "TextualDifferenceOptions",
    "TextualDifferencePreprocess",
    "count_changes",
    "create_textual_difference_scorer",
    "lcs_ratio",
]

_WHITESPACE_RUN = re.compile(f"[{JS_WHITESPACE_CLASS}]+")


class TextualDifferenceOptions(BaseModel):
    """Mastra's scorer takes no options; ``scale`` (falsy → 1) multiplies the score, as for every kind."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None


class TextualDifferencePreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    ratio: float
    confidence: float
    changes: int
    length_diff: float


def lcs_ratio(first: str, second: str) -> float:
    """``2 × LCS / (len(first) + len(second))``; 1 for equal strings, 0 when either is empty."""
    if first == second:
        return 1.0
    first_length, second_length = utf16_len(first), utf16_len(second)
    if first_length == 0 or second_length == 0:
        return 0.0
    a, b = utf16_pair(first, second)
    return (2.0 * LCSseq.similarity(a, b)) / (first_length + second_length)


def _words(text: str) -> list[str]:
    return [word for word in js_split_whitespace(text) if word]


def count_changes(first: str, second: str) -> int:
    """Word-level changes, as Mastra counts them.

    Texts equal up to whitespace: 0 when identical, else the difference in word counts (at least 1).
    Otherwise the longer word count minus the number of shared words (each word matched once).
    """
    first_normalised = js_trim(_WHITESPACE_RUN.sub(" ", first))
    second_normalised = js_trim(_WHITESPACE_RUN.sub(" ", second))
    if first_normalised == second_normalised:
        if first != second:
            return abs(len(_words(first)) - len(_words(second))) or 1
        return 0
    first_words, second_words = _words(first_normalised), _words(second_normalised)
    if not first_words or not second_words:
        return len(first_words) or len(second_words)
    # Mastra matches each word to the first unused equal word of the other text: the multiset intersection.
    shared = sum((Counter(first_words) & Counter(second_words)).values())
    return max(len(first_words), len(second_words)) - shared


def textual_difference(first: str, second: str) -> TextualDifferencePreprocess:
    longest = max(utf16_len(first), utf16_len(second))
    length_diff = abs(utf16_len(first) - utf16_len(second)) / longest if longest > 0 else 0.0
    return TextualDifferencePreprocess(
        ratio=lcs_ratio(first, second),
        confidence=1 - length_diff,
        changes=count_changes(first, second),
        length_diff=length_diff,
    )


def create_textual_difference_scorer(options: TextualDifferenceOptions | dict[str, Any] | None = None) -> Scorer:
    """Mastra's ``createTextualDifferenceScorer()``: no options (an empty mapping is accepted)."""
    opts = options_as(TextualDifferenceOptions, options)
    scale = opts.scale or 1  # falsy → 1, as Mastra's LLM scorers read it

    def preprocess(ctx: StepContext) -> TextualDifferencePreprocess | NotScorable:
        # Mastra reads a missing input as empty text; here a run without input is not scorable.
        input_text = get_input_messages_text(ctx.run.input)
        if input_text is None:
            return not_scorable("the run has no input text")
        output_text = get_output_messages_text(ctx.run.output)
        if output_text is None:
            return not_scorable("the run has no output text")
        return textual_difference(input_text, output_text)

    def generate_score(ctx: StepContext) -> float:
        result: TextualDifferencePreprocess = ctx.results.preprocess_step_result
        return result.ratio * scale

    return (
        create_scorer(
            id="textual-difference-scorer",
            name="Textual Difference Scorer",
            description="How much of the input's text the output keeps, character by character (LCS ratio)",
        )
        .preprocess(preprocess)
        .generate_score(generate_score)
        .with_version(f"1:scale={js_number(scale)}")
    )


@scorer_kind(
    "textual-difference",
    options=TextualDifferenceOptions,
    needs_judge=False,
    description="character-level similarity of the response to the request (longest common subsequence ratio)",
    needs=("input", "output"),
)
def _textual_difference_kind(judge: JudgeModel | None, options: TextualDifferenceOptions) -> Scorer:
    return create_textual_difference_scorer(options)
