"""Mastra's completeness code scorer (``createCompletenessScorer``), ported.

preprocess (function: the elements of the run's input text and of its output text) → generate_score
(function: the share of input elements the output covers). No judge.

Elements. Mastra parses each text with the npm NLP library ``compromise`` and takes the union of its
nouns, its verbs put in the infinitive, its topics and every term, each lower-cased, stripped of
diacritics and split on anything but ``a-z0-9``. Since every term is in the union, the elements are the
text's words, except that ``toInfinitive()`` rewrites the verbs in the document itself: the words are
those of the text with each verb in its infinitive ("jumps" → "jump", "is" → "be"). There is no Python
port of ``compromise``, nor a part-of-speech tagger on PyPI that ships its model in the wheel; we take the
verb forms from ``lemminflect``'s lemma table (in its wheel): a word whose only readings there are verbal
(VERB or AUX: "went", "is", "ran", "damaged") becomes its infinitive; a word that can also be a noun,
adjective or adverb ("jumps", "works", "left") stays as written. docs/scorers-code.md measures how often
this gives Mastra's number. Elements keep the order of the text (Mastra's list has nouns first).

Coverage, as in Mastra: an input element is covered when an output element equals it (for elements of up
to 3 characters), or, for longer ones, when one of the two contains the other and the shorter is more than
60% of the longer's length. No input elements: 1 when the output has none either, else 0.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.code.js_text import js_trim
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_input_messages_text, get_output_messages_text
from sidecar.scoring import JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import js_number

__all__ = [
    "CompletenessOptions",
    "CompletenessPreprocess",
    "ElementCounts",
    "calculate_coverage",
    "create_completeness_scorer",
    "extract_elements",
]

_COMBINING_MARKS = re.compile("[\u0300-\u036f]")
_NOT_ALPHANUMERIC = re.compile("[^a-z0-9]+")
_VERBAL = frozenset({"VERB", "AUX"})


class CompletenessOptions(BaseModel):
    """Mastra's scorer takes no options; ``scale`` (falsy → 1) multiplies the score, as for every kind."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None


class ElementCounts(BaseModel):
    model_config = ConfigDict(frozen=True)

    input: int
    output: int


class CompletenessPreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    input_elements: tuple[str, ...]
    output_elements: tuple[str, ...]
    missing_elements: tuple[str, ...]
    element_counts: ElementCounts


def _normalise(text: str) -> str:
    """Mastra's ``normalizeString``: NFD, combining diacritics (U+0300–U+036F) removed, lower case."""
    return _COMBINING_MARKS.sub("", unicodedata.normalize("NFD", text)).lower()


def _words(text: str) -> list[str]:
    return _NOT_ALPHANUMERIC.sub(" ", _normalise(text)).split()


@lru_cache(maxsize=65536)
def _element(word: str) -> str:
    """The word, or its infinitive when every reading of it in the lemma table is a verb."""
    from lemminflect import getAllLemmas  # imported on first use: it brings numpy, which startup can skip

    lemmas: dict[str, tuple[str, ...]] = getAllLemmas(word)
    if not lemmas or not lemmas.keys() <= _VERBAL:
        return word
    infinitive = (lemmas.get("AUX") or lemmas["VERB"])[0]
    cleaned = _words(infinitive)
    return cleaned[0] if len(cleaned) == 1 else word


def extract_elements(text: str) -> list[str]:
    """The text's words with verbs in the infinitive, normalised and de-duplicated (first occurrences)."""
    return list(dict.fromkeys(_element(word) for word in _words(js_trim(text))))


_ENUMERATE_UP_TO = 64  # longer elements (hashes, encoded blobs) are compared pairwise instead
_SEPARATOR = "\x00"  # never inside an element (they are [a-z0-9]+); checked all the same


class _Outputs:
    """The output elements, indexed for the coverage test: a set, and per length the elements joined
    by a separator, so that "is this element inside one of them" is one substring search in C."""

    def __init__(self, elements: Sequence[str]) -> None:
        self.available = frozenset(elements)
        self.by_length: dict[int, list[str]] = {}
        for element in self.available:
            self.by_length.setdefault(len(element), []).append(element)
        self.joined = {length: _SEPARATOR.join(group) for length, group in self.by_length.items()}

    def covers(self, element: str) -> bool:
        if element in self.available:
            return True
        if len(element) <= 3:  # short elements need an exact match
            return False
        return self._holds_a_shorter(element) or self._inside_a_longer(element)

    # Containment counts when the shorter is more than 60% of the longer: Mastra's float test, as is.

    def _holds_a_shorter(self, element: str) -> bool:
        length = len(element)
        if length > _ENUMERATE_UP_TO:
            return any(
                any(other in element for other in others)
                for other_length, others in self.by_length.items()
                if other_length < length and other_length / length > 0.6
            )
        # Look up this element's substrings of every qualifying length (a few set lookups).
        size = length - 1
        while size / length > 0.6:
            if any(element[start : start + size] in self.available for start in range(length - size + 1)):
                return True
            size -= 1
        return False

    def _inside_a_longer(self, element: str) -> bool:
        length = len(element)
        separated = _SEPARATOR not in element
        return any(
            element in self.joined[other_length] if separated else any(element in other for other in others)
            for other_length, others in self.by_length.items()
            if other_length > length and length / other_length > 0.6
        )


def calculate_coverage(original: Sequence[str], simplified: Sequence[str]) -> float:
    """Mastra's ``calculateCoverage`` over normalised elements."""
    if not original:
        return 1.0 if not simplified else 0.0
    outputs = _Outputs(simplified)
    return sum(1 for element in original if outputs.covers(element)) / len(original)


def create_completeness_scorer(options: CompletenessOptions | dict[str, Any] | None = None) -> Scorer:
    """Mastra's ``createCompletenessScorer()``: no options (an empty mapping is accepted)."""
    opts = options_as(CompletenessOptions, options)
    scale = opts.scale or 1  # falsy → 1, as Mastra's LLM scorers read it
    _element("went")  # load the lemma table now (about a second, once per process), not on the first span

    def preprocess(ctx: StepContext) -> CompletenessPreprocess | NotScorable:
        # Mastra throws "Inputs cannot be null or undefined" here: no score either way.
        input_text = get_input_messages_text(ctx.run.input)
        if input_text is None:
            return not_scorable("the run has no input text")
        output_text = get_output_messages_text(ctx.run.output)
        if output_text is None:
            return not_scorable("the run has no output text")
        input_elements, output_elements = extract_elements(input_text), extract_elements(output_text)
        present = frozenset(output_elements)
        return CompletenessPreprocess(
            input_elements=tuple(input_elements),
            output_elements=tuple(output_elements),
            missing_elements=tuple(e for e in input_elements if e not in present),
            element_counts=ElementCounts(input=len(input_elements), output=len(output_elements)),
        )

    def generate_score(ctx: StepContext) -> float:
        elements: CompletenessPreprocess = ctx.results.preprocess_step_result
        return calculate_coverage(elements.input_elements, elements.output_elements) * scale

    return (
        create_scorer(
            id="completeness-scorer",
            name="Completeness Scorer",
            description="Share of the input's words (verbs in the infinitive) that the output covers",
        )
        .preprocess(preprocess)
        .generate_score(generate_score)
        .with_version(f"1:scale={js_number(scale)}")
    )


@scorer_kind(
    "completeness",
    options=CompletenessOptions,
    needs_judge=False,
    description="share of the request's words (verbs in the infinitive) that the response covers",
    needs=("input", "output"),
)
def _completeness_kind(judge: JudgeModel | None, options: CompletenessOptions) -> Scorer:
    return create_completeness_scorer(options)
