"""``scoring-sidecar corrections``: a window's disagreements between a judge written in YAML and people, as that
judge's examples file for a person to review (docs/feedback.md)."""

from sidecar.corrections.command import CorrectionsOptions, main

__all__ = ["CorrectionsOptions", "main"]
