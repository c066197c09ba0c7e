"""Counts in words, for the lines people read: "1 scorer", "2 scorers"."""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural`` when adding an ``s`` is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
