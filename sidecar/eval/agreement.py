"""``eval`` against people: items that carry a person's ``expected`` verdict (one for every scorer, or one per scorer
id) are compared with each scorer's score as the live feedback join compares them (``sidecar.scoring.agreement``),
and the table says per scorer the agreement, Cohen's kappa or the mean absolute error, with the confusion matrix of
the boolean and label verdicts. ``--min-agreement`` fails the run under it: the CI gate for a judge's change (a new
model, a new prompt, new examples)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.eval.dataset import EvalItem
from sidecar.eval.report import EvalReport
from sidecar.scoring.agreement import AgreementStats, Comparison, IncomparableVerdict, agreement, compare

__all__ = ["AgreementReport", "agreement_report", "expected_for", "render_agreement"]


def expected_for(item: EvalItem, scorer_id: str) -> Any:
    """The verdict ``item`` expects of ``scorer_id`` (``None``: none)."""
    expected = item.expected
    if isinstance(expected, Mapping):
        return expected.get(scorer_id)
    return expected


@dataclass
class AgreementReport:
    stats: dict[str, AgreementStats]
    agree_within: float
    incomparable: list[str] = field(default_factory=list)  # items whose verdict the scorer's score cannot meet

    def below(self, floor: float) -> dict[str, float]:
        """The scorers whose agreement is under ``floor``, with it."""
        return {
            scorer: stats.share
            for scorer, stats in self.stats.items()
            if stats.share is not None and stats.share < floor
        }


def agreement_report(report: EvalReport, scales: Mapping[str, float], *, agree_within: float) -> AgreementReport:
    """Each scorer's scored items with an expected verdict, compared."""
    comparisons: dict[str, list[Comparison]] = {}
    incomparable: list[str] = []
    for result in report.results:
        expected = expected_for(result.item, result.scorer_id)
        if expected is None or result.outcome != "scored" or result.score is None:
            continue
        label = result.record.get("label")
        try:
            comparison = compare(
                result.score,
                label if isinstance(label, str) else None,
                expected,
                scale=scales.get(result.scorer_id, 1.0),
                agree_within=agree_within,
            )
        except IncomparableVerdict as exc:
            incomparable.append(f"{result.scorer_id}, item {result.item.id or result.item.index}: {exc}")
            continue
        comparisons.setdefault(result.scorer_id, []).append(comparison)
    return AgreementReport({s: agreement(c) for s, c in comparisons.items()}, agree_within, incomparable)


def render_agreement(found: AgreementReport, min_agreement: float | None) -> str:
    lines = [
        f"agreement with the expected verdicts (numbers agree within {found.agree_within:g} on 0–1):",
        f"{'scorer':<22} {'pairs':>6} {'agreement':>9} {'kappa':>6} {'MAE':>6}  min agreement",
    ]
    below = found.below(min_agreement) if min_agreement is not None else {}
    for scorer, stats in found.stats.items():
        gate = "-" if min_agreement is None else f">= {min_agreement:g} {'FAIL' if scorer in below else 'ok'}"
        lines.append(
            f"{scorer:<22} {stats.pairs:>6} {_number(stats.share):>9} {_number(stats.kappa):>6} "
            f"{_number(stats.mae):>6}  {gate}"
        )
    for scorer, stats in found.stats.items():
        if stats.confusion:
            lines.extend(_confusion(scorer, stats))
    lines.extend(f"not compared: {line}" for line in found.incomparable)
    if below:
        listed = ", ".join(f"{scorer} ({share:.2f})" for scorer, share in sorted(below.items()))
        lines.append(f"AGREEMENT BELOW --min-agreement {min_agreement:g}: {listed}")
    return "\n".join(lines)


def _confusion(scorer: str, stats: AgreementStats) -> list[str]:
    """The confusion matrix: one row per verdict of the judge, one column per expected verdict."""
    categories = stats.categories
    width = max(8, *(len(c) for c in categories))
    lines = [
        f"{scorer} confusion (rows: judge, columns: expected):",
        " " * (width + 2) + " ".join(f"{c:>{width}}" for c in categories),
    ]
    for judged in categories:
        counts = " ".join(f"{stats.confusion.get((judged, said), 0):>{width}}" for said in categories)
        lines.append(f"  {judged:<{width}}{counts}")
    return lines


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
