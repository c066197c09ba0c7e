"""The npm ``keyword-extractor`` package's ``extract`` (0.0.28, English), as Mastra's keyword-coverage
scorer calls it: ``remove_digits``, ``return_changed_case`` and ``remove_duplicates`` on, no n-grams.

Its English stop list is the SMART system's (Lewis et al. 2004, JMLR 5, appendix 11). We take the
stop list from the ``python-rake`` package, whose ``SmartStopList`` holds the same 570 words.

The steps, as in the package: strip HTML tags, trim, split on single whitespace characters; from each word
(except one containing ``http://`` or ``https://``, kept whole) remove ``. , ; ! ? ( ) : "`` and the curly
quotes ``“ ” ‘ ’``, and a straight quote at its start or end; a one-character word loses ``_ @ & #``; a
word of ASCII digits only is dropped; empty words are dropped. A word whose lower case is not a stop word
is a keyword (lower-cased, URLs as written), first occurrences only.
"""

from __future__ import annotations

import re
from typing import Final

from RAKE import SmartStopList

from sidecar.scorers.code.js_text import JS_WHITESPACE_CLASS, js_trim

__all__ = ["ENGLISH_STOPWORDS", "extract_keywords"]

ENGLISH_STOPWORDS: Final = frozenset(SmartStopList())

_HTML_TAG = re.compile(r"(<([^>]+)>)", re.IGNORECASE)
_WHITESPACE = re.compile(f"[{JS_WHITESPACE_CLASS}]")
# What the package removes from each word: /\.|,|;|!|\?|\(|\)|:|"|^'|'$|“|”|‘|’/g, the straight quote only
# as the word's first or last character. _CLEAN does it for one word; _CLEAN_ALL for a whole text in one
# pass (a word starts and ends at whitespace or at the text's ends).
_REMOVED = '.,;!?():"“”‘’'
_CLEAN = re.compile(f"[{re.escape(_REMOVED)}]|\\A'|'\\Z")
_CLEAN_ALL = re.compile(f"[{re.escape(_REMOVED)}]|(?<![^{JS_WHITESPACE_CLASS}])'|'(?![^{JS_WHITESPACE_CLASS}])")
_ODD_SINGLE = frozenset("_@&#")  # a one-character word that is one of these is dropped


def _is_url(word: str) -> bool:
    return "http://" in word or "https://" in word  # /https?:\/\/.*[\r\n]*/


def _words(text: str) -> list[tuple[str, bool]]:
    """The cleaned words, and whether each is a URL (kept whole, and in its case)."""
    if "://" not in text:  # no URL: clean the whole text at once
        return [(word, False) for word in _WHITESPACE.split(_CLEAN_ALL.sub("", text))]
    return [(raw, True) if _is_url(raw) else (_CLEAN.sub("", raw), False) for raw in _WHITESPACE.split(text)]


def extract_keywords(text: str, stopwords: frozenset[str] = ENGLISH_STOPWORDS) -> list[str]:
    """``keyword_extractor.extract(text, {language: 'english', remove_digits: true,
    return_changed_case: true, remove_duplicates: true})``."""
    if not text:
        return []
    keywords: dict[str, None] = {}  # ordered set: first occurrences
    for word, is_url in _words(js_trim(_HTML_TAG.sub("", text))):
        if not word or word in _ODD_SINGLE or (word.isdigit() and word.isascii()):  # JavaScript's \d is ASCII
            continue
        lowered = word.lower()
        if lowered not in stopwords:
            # A cleaned word has lost its colons, so only a word kept whole can be a URL (which keeps its case).
            keywords.setdefault(word if is_url else lowered, None)
    return list(keywords)
