"""How far a judge agrees with people: one verdict against another, and the statistics of many.

The same comparison serves the live service (human feedback joined to the sidecar's own scores, docs/feedback.md),
the judge canary (a labelled set scored by the live judge) and ``eval`` over items with an ``expected`` verdict, so
the three report the same numbers for the same pairs.

A person's verdict is a number on the scorer's scale, a boolean, or a label; the judge's side is read from its
score and label:

- **number**: both normalised to 0–1 by the scale; they agree within ``agree_within`` (0.2 by default);
- **boolean**: the judge's ``pass``/``fail`` (``true``/``false``, ``yes``/``no``) label, or else its score at half
  the scale or above; they agree when equal;
- **label**: the judge's label (a categories judge); they agree when equal. A judge whose score has no label
  cannot be compared with a label (:class:`IncomparableVerdict`).

Over many pairs: the share that agree; Cohen's kappa over the boolean and label pairs (agreement beyond what the
two sides' own frequencies give by chance; undefined when both always answer the same one category); the mean
absolute error over the number pairs (0–1); and the confusion matrix of the boolean and label pairs. Kappa is the
textbook formula on the confusion matrix, written here rather than pulling scikit-learn (and SciPy) into the
service's image for five lines; the tests check it against scikit-learn's ``cohen_kappa_score``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "DEFAULT_AGREE_WITHIN",
    "AgreementStats",
    "Comparison",
    "HumanVerdict",
    "IncomparableVerdict",
    "VerdictKind",
    "agreement",
    "cohen_kappa",
    "compare",
    "judge_boolean",
]

DEFAULT_AGREE_WITHIN = 0.2
HumanVerdict = bool | float | int | str
VerdictKind = Literal["number", "boolean", "label"]

_TRUE = frozenset({"pass", "true", "yes"})
_FALSE = frozenset({"fail", "false", "no"})
# Two numbers this close to the tolerance's edge agree: 0.8 vs 0.6 within 0.2 must not fail on 0.20000000000000007.
_EDGE = 1e-9


class IncomparableVerdict(ValueError):
    """A person's verdict the judge's score cannot be compared with (a label, and the score has none)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """One judge verdict against one person's: numbers on 0–1, booleans as ``"true"``/``"false"``, labels as
    written."""

    kind: VerdictKind
    judge: float | str
    human: float | str
    agreed: bool


def judge_boolean(score: float, label: str | None, scale: float = 1.0) -> bool:
    """The judge's verdict as a boolean: its pass/fail label, else its score at half the scale or above."""
    if label is not None:
        word = label.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    return score / scale >= 0.5


def compare(
    score: float,
    label: str | None,
    human: HumanVerdict,
    *,
    scale: float = 1.0,
    agree_within: float = DEFAULT_AGREE_WITHIN,
) -> Comparison:
    """The judge's ``score`` (on ``scale``) and ``label`` against a person's verdict (a number on the same scale, a
    boolean or a label)."""
    if isinstance(human, bool):
        judged = judge_boolean(score, label, scale)
        return Comparison("boolean", _word(judged), _word(human), judged == human)
    if isinstance(human, str):
        if label is None:
            raise IncomparableVerdict(f"the verdict {human!r} is a label, and the judge's score ({score:g}) has none")
        return Comparison("label", label, human, label == human)
    judge_number = _unit(score / scale)
    human_number = _unit(float(human) / scale)
    return Comparison("number", judge_number, human_number, abs(judge_number - human_number) <= agree_within + _EDGE)


def _word(value: bool) -> str:
    return "true" if value else "false"


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


@dataclass(frozen=True, slots=True)
class AgreementStats:
    """The statistics of a set of comparisons (``None``: not defined for it)."""

    pairs: int
    agreed: int
    # Of the boolean and label comparisons: Cohen's kappa, and (judge, human) → how many.
    kappa: float | None
    confusion: dict[tuple[str, str], int] = field(default_factory=dict)
    # Of the number comparisons: the mean absolute difference on 0–1, and how many there were.
    mae: float | None = None
    numbers: int = 0

    @property
    def share(self) -> float | None:
        """The share of pairs that agree."""
        return self.agreed / self.pairs if self.pairs else None

    @property
    def categories(self) -> tuple[str, ...]:
        """Every judge and human category of the confusion matrix, sorted."""
        return tuple(sorted({c for pair in self.confusion for c in pair}))


def agreement(comparisons: Iterable[Comparison]) -> AgreementStats:
    """Share, kappa, confusion matrix and mean absolute error of ``comparisons``."""
    pairs = agreed = 0
    judged: list[str] = []
    said: list[str] = []
    errors: list[float] = []
    for comparison in comparisons:
        pairs += 1
        agreed += comparison.agreed
        if comparison.kind == "number":
            assert isinstance(comparison.judge, float) and isinstance(comparison.human, float)
            errors.append(abs(comparison.judge - comparison.human))
        else:
            judged.append(str(comparison.judge))
            said.append(str(comparison.human))
    return AgreementStats(
        pairs=pairs,
        agreed=agreed,
        kappa=cohen_kappa(judged, said),
        confusion=dict(Counter(zip(judged, said, strict=True))),
        mae=math.fsum(errors) / len(errors) if errors else None,
        numbers=len(errors),
    )


def cohen_kappa(judge: Sequence[str], human: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters over the same items: (observed − chance agreement) / (1 − chance agreement),
    chance from each rater's own category frequencies. ``None`` with no items, or when chance agreement is
    certain (both raters always give the same one category: kappa is 0/0)."""
    if len(judge) != len(human):
        raise ValueError("both raters must rate the same items")
    n = len(judge)
    if n == 0:
        return None
    observed = sum(1 for a, b in zip(judge, human, strict=True) if a == b) / n
    by_judge, by_human = Counter(judge), Counter(human)
    chance = math.fsum(by_judge[c] * by_human[c] for c in by_judge) / (n * n)
    if chance >= 1.0:
        return None
    return (observed - chance) / (1.0 - chance)
