"""JavaScript's string semantics, where Mastra's code scorers depend on them.

Python's ``\\s`` and ``str.strip()`` differ from JavaScript's ``\\s`` and ``trim()``: Python counts the
information separators U+001C–U+001F and U+0085 as whitespace, JavaScript does not; JavaScript counts
U+FEFF, Python does not. And JavaScript measures and indexes strings in UTF-16 code units, so a character
outside the Basic Multilingual Plane (most emoji) counts twice. These helpers give the JavaScript answers.
"""

from __future__ import annotations

import re
import sys
from array import array

__all__ = [
    "JS_WHITESPACE",
    "JS_WHITESPACE_CLASS",
    "js_split_whitespace",
    "js_trim",
    "utf16_len",
    "utf16_pair",
]

# ECMAScript WhiteSpace and LineTerminator: what \s matches and trim() removes.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
# For use inside a regular expression, e.g. f"[{JS_WHITESPACE_CLASS}]+" (the characters, escaped).
JS_WHITESPACE_CLASS = re.escape(JS_WHITESPACE)
_JS_WHITESPACE_RUN = re.compile(f"[{JS_WHITESPACE_CLASS}]+")


def js_trim(text: str) -> str:
    """``String.prototype.trim``."""
    return text.strip(JS_WHITESPACE)


def js_split_whitespace(text: str) -> list[str]:
    """``text.split(/\\s+/)``: JavaScript keeps the empty strings at either end (callers filter them)."""
    return _JS_WHITESPACE_RUN.split(text)


def utf16_len(text: str) -> int:
    """``text.length``: UTF-16 code units."""
    if text.isascii():  # the common case, without encoding
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def _is_bmp(text: str) -> bool:
    return text.isascii() or len(text.encode("utf-16-le")) == 2 * len(text)


def _code_units(text: str) -> list[int]:
    units = array("H", text.encode("utf-16-le"))
    if sys.byteorder == "big":
        units.byteswap()
    return units.tolist()


def utf16_pair(first: str, second: str) -> tuple[str, str] | tuple[list[int], list[int]]:
    """Two strings as the sequences JavaScript compares position by position: the strings themselves when
    every character is in the Basic Multilingual Plane (one code unit each), else both as UTF-16 code units
    (both, so that the two sequences hold elements of one kind)."""
    if _is_bmp(first) and _is_bmp(second):
        return first, second
    return _code_units(first), _code_units(second)
