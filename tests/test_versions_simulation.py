"""The promise of the version comparison, measured: 1,000 comparisons of two versions monitored after every new
score up to n = 5,000 (docs/versions.md). With equal score distributions, the share that *ever* declares a
regression stays within alpha (plus three standard errors of a share estimated from 1,000 comparisons); with a true
drop of 0.1, every comparison declares it, and the median number of runs it took is reported.

The streams go through the module's own bounds (``mean_trajectory``, which a property test holds equal to the
service's score-by-score ``update``), the union of the two streams at alpha / 2 each and the verdict with
min_effect: the decision the service takes after each score."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from sidecar.versions.sequences import difference_bounds, mean_trajectory, verdicts

COMPARISONS = 1000
RUNS = 5000  # scores of both versions together, each comparison read after every one
ALPHA = 0.05
MIN_EFFECT = 0.05  # the default
CONCENTRATION = 10.0  # Beta(mean * 10, (1 - mean) * 10): a judge's scores around 0.7 with sd 0.14
MARGIN = 3 * np.sqrt(ALPHA * (1 - ALPHA) / COMPARISONS)  # three standard errors of the estimated share


@dataclass(frozen=True)
class Comparisons:
    """``COMPARISONS`` comparisons: the bounds on new - reference after each run, and the scores behind them."""

    lower: np.ndarray  # (comparisons, runs)
    upper: np.ndarray
    from_new: np.ndarray  # (comparisons, runs) bool: the run was the new version's
    scores: np.ndarray  # (comparisons, runs) the run's score

    def first_regression(self, min_effect: float) -> np.ndarray:
        """The run (1-based, both versions counted) at which each comparison first declared a regression; 0: never."""
        regression = verdicts(self.lower, self.upper, min_effect) == -1
        return np.where(regression.any(axis=1), regression.argmax(axis=1) + 1, 0)


def bounds_after(lower: np.ndarray, upper: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stream's bounds after ``counts`` of its scores (0: nothing known, [0, 1])."""
    at = np.maximum(counts - 1, 0)
    seen = counts > 0
    return (
        np.where(seen, np.take_along_axis(lower, at, axis=1), 0.0),
        np.where(seen, np.take_along_axis(upper, at, axis=1), 1.0),
    )


def monitor(*, new_mean: float, reference_mean: float = 0.7, new_share: float, seed: int) -> Comparisons:
    """Each comparison: ``RUNS`` scores, each from the new version with probability ``new_share`` (interleaved,
    unbalanced when small), the bounds read after every one of them."""
    rng = np.random.default_rng(seed)
    from_new = rng.random((COMPARISONS, RUNS)) < new_share
    new_runs = np.cumsum(from_new, axis=1)
    reference_runs = np.arange(1, RUNS + 1) - new_runs

    def stream(mean: float, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        length = max(int(runs[:, -1].max()), 1)
        scores = rng.beta(mean * CONCENTRATION, (1 - mean) * CONCENTRATION, size=(COMPARISONS, length))
        return (*bounds_after(*mean_trajectory(scores, ALPHA / 2), runs), scores)

    new_lower, new_upper, new_scores = stream(new_mean, new_runs)
    ref_lower, ref_upper, ref_scores = stream(reference_mean, reference_runs)
    lower, upper = difference_bounds((new_lower, new_upper), (ref_lower, ref_upper))
    # The score of each run in arrival order, for the fixed-sample test below.
    at_new = np.take_along_axis(new_scores, np.maximum(new_runs - 1, 0), axis=1)
    at_ref = np.take_along_axis(ref_scores, np.maximum(reference_runs - 1, 0), axis=1)
    return Comparisons(lower, upper, from_new, np.where(from_new, at_new, at_ref))


def peeked_fixed_sample_test(comparisons: Comparisons) -> np.ndarray:
    """Per comparison, whether the naive monitor ever declares a regression: Welch's one-sided z test at 5 % on
    the two means, a fixed-sample test, read after every run once each version has 30."""
    new = comparisons.from_new
    runs = np.cumsum(new, axis=1), np.cumsum(~new, axis=1)
    sums = (
        np.cumsum(np.where(new, comparisons.scores, 0.0), axis=1),
        np.cumsum(np.where(new, 0.0, comparisons.scores), axis=1),
    )
    squares = (
        np.cumsum(np.where(new, comparisons.scores**2, 0.0), axis=1),
        np.cumsum(np.where(new, 0.0, comparisons.scores**2), axis=1),
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        means = [s / n for s, n in zip(sums, runs, strict=True)]
        variances = [(q / n - m**2) * n / (n - 1) for q, n, m in zip(squares, runs, means, strict=True)]
        z = (means[0] - means[1]) / np.sqrt(variances[0] / runs[0] + variances[1] / runs[1])
    read = (runs[0] >= 30) & (runs[1] >= 30)
    return (read & (z < -1.645)).any(axis=1)


def test_equal_versions_rarely_ever_declare_a_regression_however_often_they_are_read() -> None:
    equal = monitor(new_mean=0.7, new_share=0.5, seed=1)
    # min_effect 0: any drop at all counts, the hardest case for the false-alarm level.
    for min_effect in (0.0, MIN_EFFECT):
        share = float((equal.first_regression(min_effect) > 0).mean())
        assert share <= ALPHA + MARGIN, (min_effect, share)
    # The naive monitor on the same scores: a 5 % fixed-sample test read after every run cries wolf several
    # times more often than 5 % (the reason for confidence sequences).
    naive = float(peeked_fixed_sample_test(equal).mean())
    print(f"equal versions read after every run: a fixed-sample test at 5 % ever declared a drop in {naive:.0%}")
    assert naive > 3 * ALPHA


def test_a_drop_of_a_tenth_is_declared_and_how_fast(record_property: pytest.RecordProperty) -> None:
    first = monitor(new_mean=0.6, new_share=0.5, seed=2).first_regression(MIN_EFFECT)
    assert (first > 0).all()
    median = float(np.median(first))
    record_property("median_runs_to_declare", median)
    print(f"a drop of 0.1 at a 50/50 split: declared by all, median {median:.0f} runs")
    assert 500 < median < 2000  # measured: about 1,000 runs (docs/versions.md)


@pytest.mark.slow
def test_a_canary_with_a_twentieth_of_the_traffic(record_property: pytest.RecordProperty) -> None:
    """The unbalanced case the union of two sequences is chosen for: equal versions stay quiet, a drop of 0.1 on
    5 % of the traffic (about 250 of the 5,000 runs) is declared by about half the comparisons by n = 5,000."""
    equal = monitor(new_mean=0.7, new_share=0.05, seed=3).first_regression(0.0)
    assert (equal > 0).mean() <= ALPHA + MARGIN
    worse = monitor(new_mean=0.6, new_share=0.05, seed=4).first_regression(MIN_EFFECT)
    share, median = float((worse > 0).mean()), float(np.median(worse[worse > 0]))
    record_property("canary_share_declared", share)
    record_property("canary_median_runs", median)
    print(f"a drop of 0.1 on a 5 % canary: declared by {share:.0%}, median {median:.0f} runs")
    assert share > 0.3
