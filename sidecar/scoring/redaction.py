"""The seam where personal data is taken out of a run before a judge reads it.

A scorer bound with a ``RunRedactor`` (``Scorer.bind(..., redactor=...)``) hands every run to it once, before
its first step, and runs all its steps on the redacted copy: the judge's prompts are built from it, and so are
the function steps' results that those prompts read (a conversation's transcript, the tool calls), the result's
recorded prompts and step results. A scorer without judge steps is never redacted: it does not leave the
process. What a redactor finds is counted by entity on the result (``ScorerRunResult.redactions``).

This module only names the seam; ``sidecar.redaction`` is the implementation (Presidio), docs/redaction.md
the why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from sidecar.scoring.steps import ScorerRun

__all__ = ["RedactedRun", "RedactionError", "RunRedactor"]


@dataclass(frozen=True, slots=True)
class RedactedRun:
    """A run with its personal data replaced, and how many values of each entity were replaced."""

    run: ScorerRun
    counts: Mapping[str, int]


class RedactionError(Exception):
    """A run could not be redacted: it fails before any step, and nothing of it is sent."""


class RunRedactor(Protocol):
    """Replaces the personal data of a run's traced content (input, output, ground truth, request context,
    attributes), and never logs what it replaced. Whatever it raises fails the run before any step
    (``Scorer.run``: a ``ScorerRunError`` whose cause, a ``RedactionError``, names no content)."""

    def redact(self, run: ScorerRun) -> RedactedRun: ...
