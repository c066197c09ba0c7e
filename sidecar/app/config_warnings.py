"""Configurations that are valid but probably not what was meant: ``validate`` warns about them (exit 0)."""

from __future__ import annotations

from sidecar.settings import EvalSettings

__all__ = ["rubrics_without_criteria"]


def rubrics_without_criteria(settings: EvalSettings) -> list[str]:
    """One line per ``rubric`` scorer configured with no criteria: it grades each run against a rubric the run
    carries (an ``eval`` item's ``request_context.rubric``), and a run without one passes (1) by default, so
    live traffic would score 1 everywhere."""
    lines = []
    for i, scorer in enumerate(settings.scorers):
        if scorer.kind != "rubric" or scorer.options.get("criteria"):
            continue
        path = f"scorers[{i}].options.criteria"
        line = settings.line_of(path)
        where = f"{path} (line {line})" if line is not None else path
        lines.append(
            f"{where}: rubric scorer {scorer.id!r} has no criteria: each run is graded against the rubric it carries "
            "(request_context.rubric), and a run without one passes (score 1); list the criteria under "
            "options.criteria"
        )
    return lines
