"""The ``string-similarity`` npm package's ``compareTwoStrings`` (a Sørensen–Dice coefficient over character
bigrams), ported: content-similarity scores with it and the quick ``checks`` compare with it."""

from __future__ import annotations

import operator
import re
from collections import Counter

__all__ = ["compare_two_strings"]

_WHITESPACE = re.compile(r"\s+")


def _strip_ws(text: str) -> str:
    # JavaScript's \s: Python's (Unicode) \s plus U+FEFF, which Python does not count as whitespace.
    return _WHITESPACE.sub("", text).replace("\ufeff", "")


def compare_two_strings(first: str, second: str) -> float:
    """``stringSimilarity.compareTwoStrings``: Dice coefficient of the bigram multisets, whitespace removed.

    1 for identical strings (two empty strings included), 0 when either has fewer than two characters.
    Strings are compared by UTF-16 code units in JavaScript; characters outside the BMP therefore count
    double there. We compare by code point (identical for all BMP text).
    """
    first, second = _strip_ws(first), _strip_ws(second)
    if first == second:
        return 1.0
    if len(first) < 2 or len(second) < 2:
        return 0.0
    # map(add, s, s[1:]) yields the bigrams without a Python-level loop.
    first_bigrams = Counter(map(operator.add, first, first[1:]))
    second_bigrams = Counter(map(operator.add, second, second[1:]))
    if len(second_bigrams) < len(first_bigrams):
        first_bigrams, second_bigrams = second_bigrams, first_bigrams
    intersection = sum(min(n, second_bigrams[b]) for b, n in first_bigrams.items() if b in second_bigrams)
    return (2.0 * intersection) / (len(first) + len(second) - 2)
