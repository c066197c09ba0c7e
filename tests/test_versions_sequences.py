"""The confidence sequences of the version comparisons (sidecar.versions.sequences): properties that hold for any
scores (hypothesis), coverage measured on many streams, and the difference of two means in the better direction."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.versions.sequences import (
    MeanSequence,
    StreamSequence,
    difference_bounds,
    mean_trajectory,
    verdict,
    verdicts,
)

scores = st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=200)
alphas = st.floats(min_value=1e-4, max_value=0.5)


def bounds_after_each(values: list[float], alpha: float) -> tuple[list[float], list[float]]:
    """The service's stream, score by score."""
    sequence = StreamSequence(alpha)
    lower, upper = [], []
    for value in values:
        sequence.update(value)
        lower.append(sequence.lower)
        upper.append(sequence.upper)
    return lower, upper


@settings(max_examples=200, deadline=None)
@given(scores, alphas)
def test_bounds_stay_in_the_unit_interval_and_only_shrink(values: list[float], alpha: float) -> None:
    lower, upper = bounds_after_each(values, alpha)
    assert all(0.0 <= lo <= hi <= 1.0 for lo, hi in zip(lower, upper, strict=True))
    assert lower == sorted(lower), "a lower bound never moves down (running intersection)"
    assert upper == sorted(upper, reverse=True), "an upper bound never moves up"


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=1, max_value=400), alphas)
def test_a_constant_stream_is_always_inside_its_bounds(value: float, n: int, alpha: float) -> None:
    # The one stream whose mean is known whatever the draw: every score is the mean.
    lower, upper = bounds_after_each([value] * n, alpha)
    assert all(lo <= value <= hi for lo, hi in zip(lower, upper, strict=True))


@settings(max_examples=200, deadline=None)
@given(scores, alphas, alphas)
def test_a_smaller_alpha_gives_wider_bounds_at_every_score(values: list[float], a: float, b: float) -> None:
    strict, loose = sorted((a, b))
    strict_lower, strict_upper = bounds_after_each(values, strict)
    loose_lower, loose_upper = bounds_after_each(values, loose)
    for i in range(len(values)):
        assert strict_lower[i] <= loose_lower[i] + 1e-12
        assert strict_upper[i] >= loose_upper[i] - 1e-12


@settings(max_examples=100, deadline=None)
@given(st.lists(scores, min_size=1, max_size=4), alphas)
def test_streams_updated_together_are_the_streams_updated_alone(streams: list[list[float]], alpha: float) -> None:
    together = MeanSequence(alpha, size=len(streams))
    for step in range(max(len(s) for s in streams)):
        mask = [step < len(s) for s in streams]
        together.update([s[step] if step < len(s) else 0.0 for s in streams], mask)
    for i, values in enumerate(streams):
        alone = StreamSequence(alpha)  # the service's own, in plain floats
        alone.extend(values)
        assert together.n[i] == alone.n == len(values)
        assert together.lower[i] == pytest.approx(alone.lower, abs=1e-12)
        assert together.upper[i] == pytest.approx(alone.upper, abs=1e-12)
        assert together.mean[i] == pytest.approx(alone.mean) == pytest.approx(sum(values) / len(values))


@settings(max_examples=100, deadline=None)
@given(scores, alphas)
def test_the_trajectory_is_the_sequence_of_updates(values: list[float], alpha: float) -> None:
    lower, upper = mean_trajectory([values], alpha)
    one_by_one = bounds_after_each(values, alpha)
    np.testing.assert_allclose(lower[0], one_by_one[0], atol=1e-9)
    np.testing.assert_allclose(upper[0], one_by_one[1], atol=1e-9)


def test_widths_shrink_with_the_runs_and_with_less_spread() -> None:
    rng = np.random.default_rng(11)
    spread = rng.beta(7, 3, size=(1, 4000))  # sd 0.14
    narrow = rng.beta(70, 30, size=(1, 4000))  # sd 0.05
    lower, upper = mean_trajectory(spread, 0.025)
    width = upper[0] - lower[0]
    assert width[3999] < width[999] / 1.6 < width[99] / 3
    assert width[3999] < 0.06
    narrow_lower, narrow_upper = mean_trajectory(narrow, 0.025)
    assert (narrow_upper[0] - narrow_lower[0])[999] < width[999] / 1.5  # empirical Bernstein: adapts to the spread


def test_coverage_holds_at_every_n_over_many_streams() -> None:
    """2,000 streams of 2,000 Beta scores: the share whose bounds ever miss the true mean (at any n) stays within
    alpha, plus three standard errors of the estimated share."""
    rng = np.random.default_rng(5)
    alpha, streams, a, b = 0.1, 2000, 2.0, 5.0
    lower, upper = mean_trajectory(rng.beta(a, b, size=(streams, 2000)), alpha)
    truth = a / (a + b)
    ever_missed = ((lower > truth) | (upper < truth)).any(axis=1).mean()
    assert ever_missed <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / streams)


def test_the_difference_is_read_in_the_better_direction() -> None:
    new, reference = (np.array([0.5]), np.array([0.6])), (np.array([0.7]), np.array([0.75]))
    lower, upper = difference_bounds(new, reference)
    assert (lower[0], upper[0]) == pytest.approx((-0.25, -0.1))
    assert verdicts(lower, upper, 0.05)[0] == -1
    # Lower is better (toxicity): the same means are an improvement.
    lower, upper = difference_bounds(new, reference, higher_is_better=False)
    assert (lower[0], upper[0]) == pytest.approx((0.1, 0.25))
    assert verdicts(lower, upper, 0.05)[0] == 1


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-1, max_value=1), st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=0.5))
def test_a_verdict_needs_the_whole_interval_beyond_min_effect(lower: float, width: float, min_effect: float) -> None:
    upper = lower + width
    expected = -1 if upper < -min_effect else 1 if lower > min_effect else 0
    assert (
        verdict(lower, upper, min_effect) == verdicts(np.array([lower]), np.array([upper]), min_effect)[0] == expected
    )


def test_out_of_range_scores_and_levels_are_refused() -> None:
    for sequence in (MeanSequence(0.05), StreamSequence(0.05)):
        for bad in (1.5, -0.1, float("nan")):
            with pytest.raises(ValueError, match=r"scores must lie in \[0, 1\]"):
                sequence.update(bad)
        assert not np.any(sequence.n)
    for level in (0.0, 1.0, -0.1):
        for kind in (MeanSequence, StreamSequence):
            with pytest.raises(ValueError, match="alpha must be in"):
                kind(level)
    with pytest.raises(ValueError, match="min_effect"):
        verdicts(np.array([0.0]), np.array([0.1]), 1.0)
