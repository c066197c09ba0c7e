"""Judge–human agreement (``sidecar.scoring.agreement``): the statistics that page (share, Cohen's kappa, mean
absolute error) as properties over generated pairs, kappa and MAE against scikit-learn's, and the comparison of one
verdict with another."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score, mean_absolute_error

from sidecar.scoring.agreement import (
    Comparison,
    IncomparableVerdict,
    agreement,
    cohen_kappa,
    compare,
    judge_boolean,
)

labels = st.sampled_from(["compliant", "borderline", "violation"])
rated = st.lists(st.tuples(labels, labels), min_size=1, max_size=60)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
numbers = st.lists(st.tuples(unit, unit), min_size=1, max_size=60)


def sklearn_kappa(judge: list[str], human: list[str]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 0/0 when both raters give one category: NaN with a warning
        return float(cohen_kappa_score(judge, human))


@given(rated)
def test_kappa_is_scikit_learns(pairs: list[tuple[str, str]]) -> None:
    judge, human = [j for j, _ in pairs], [h for _, h in pairs]
    expected = sklearn_kappa(judge, human)
    kappa = cohen_kappa(judge, human)
    if math.isnan(expected):
        assert kappa is None
    else:
        assert kappa is not None and kappa == pytest.approx(expected, abs=1e-9)


@given(rated)
def test_kappa_is_symmetric_bounded_and_blind_to_the_names_of_categories(pairs: list[tuple[str, str]]) -> None:
    judge, human = [j for j, _ in pairs], [h for _, h in pairs]
    kappa = cohen_kappa(judge, human)
    assert kappa == cohen_kappa(human, judge)
    renamed = {"compliant": "a", "borderline": "b", "violation": "c"}
    assert kappa == cohen_kappa([renamed[j] for j in judge], [renamed[h] for h in human])
    if kappa is not None:
        assert -1.0 <= kappa <= 1.0 + 1e-12
        # Perfect agreement is kappa 1 (whenever kappa is defined), and only then.
        assert (kappa > 1 - 1e-12) == (judge == human)


def test_kappa_of_one_category_everywhere_is_undefined_and_of_nothing_too() -> None:
    assert cohen_kappa(["yes"] * 5, ["yes"] * 5) is None
    assert cohen_kappa([], []) is None
    with pytest.raises(ValueError):
        cohen_kappa(["a"], [])


def test_kappa_of_a_worked_example() -> None:
    # 50 items: both yes 20, judge yes/human no 5, judge no/human yes 10, both no 15: po 0.7, pe 0.5 → kappa 0.4.
    judge = ["yes"] * 25 + ["no"] * 25
    human = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(judge, human) == pytest.approx(0.4)


@given(numbers, st.floats(min_value=0.0, max_value=0.5))
def test_number_pairs_give_scikit_learns_mae_and_agree_within_the_tolerance(
    pairs: list[tuple[float, float]], within: float
) -> None:
    comparisons = [compare(j, None, h, agree_within=within) for j, h in pairs]
    stats = agreement(comparisons)
    assert stats.pairs == stats.numbers == len(pairs)
    assert stats.mae == pytest.approx(mean_absolute_error([j for j, _ in pairs], [h for _, h in pairs]), abs=1e-12)
    assert stats.agreed == sum(abs(j - h) <= within + 1e-9 for j, h in pairs)
    assert stats.kappa is None and stats.confusion == {}


@given(numbers, st.floats(min_value=0.1, max_value=100.0))
def test_a_scale_divides_both_sides(pairs: list[tuple[float, float]], scale: float) -> None:
    plain = [compare(j, None, h) for j, h in pairs]
    scaled = [compare(j * scale, None, h * scale, scale=scale) for j, h in pairs]
    for a, b in zip(plain, scaled, strict=True):
        assert a.judge == pytest.approx(b.judge) and a.human == pytest.approx(b.human)
    assert agreement(scaled).mae == pytest.approx(agreement(plain).mae, abs=1e-9)


@given(rated)
def test_label_pairs_give_share_kappa_and_confusion(pairs: list[tuple[str, str]]) -> None:
    comparisons = [compare(0.5, j, h) for j, h in pairs]
    stats = agreement(comparisons)
    assert stats.pairs == len(pairs) and stats.numbers == 0 and stats.mae is None
    assert stats.agreed == sum(j == h for j, h in pairs)
    assert stats.share == stats.agreed / len(pairs)
    assert sum(stats.confusion.values()) == len(pairs)
    assert sum(n for (j, h), n in stats.confusion.items() if j == h) == stats.agreed
    assert stats.kappa == cohen_kappa([j for j, _ in pairs], [h for _, h in pairs])


@given(st.lists(st.tuples(unit, st.booleans()), min_size=1, max_size=40))
def test_booleans_read_the_score_at_half_the_scale(pairs: list[tuple[float, bool]]) -> None:
    for score, said in pairs:
        comparison = compare(score * 4, None, said, scale=4)
        assert comparison.kind == "boolean"
        assert comparison.judge == ("true" if score >= 0.5 else "false")
        assert comparison.agreed == ((score >= 0.5) == said)


def test_a_pass_fail_label_decides_a_boolean_before_the_score() -> None:
    assert judge_boolean(0.0, "pass") is True and judge_boolean(1.0, "FAIL") is False
    assert judge_boolean(0.9, "borderline") is True  # not a boolean word: the score decides
    assert compare(1.0, "fail", False) == Comparison("boolean", "false", "false", True)


def test_a_label_against_a_score_without_one_is_incomparable() -> None:
    with pytest.raises(IncomparableVerdict, match="has none"):
        compare(0.7, None, "compliant")
    assert compare(1.0, "compliant", "violation").agreed is False


def test_no_pairs_no_statistics() -> None:
    stats = agreement([])
    assert (stats.pairs, stats.share, stats.kappa, stats.mae) == (0, None, None, None)


def test_the_tolerance_edge_agrees() -> None:
    assert compare(0.8, None, 0.6).agreed  # 0.8 - 0.6 is 0.20000000000000007 in floats
    assert not compare(0.81, None, 0.6).agreed
