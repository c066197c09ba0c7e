"""Anytime-valid confidence sequences for the mean of scores in [0, 1], and for the difference of two means.

A confidence sequence (CS) at level ``alpha`` is a sequence of intervals ``C_1, C_2, ...`` that holds the true
mean at *every* ``n`` at once with probability at least ``1 - alpha``: it may be read after every score, and a
decision taken the first time it excludes a value keeps its error level however often it was read (a
fixed-sample interval read after every score does not: docs/versions.md).

**One stream** (:class:`MeanSequence`): the predictable plug-in empirical-Bernstein CS of Waudby-Smith and Ramdas
(2023, "Estimating means of bounded random variables by betting", JRSS B, Theorem 2), built on the
empirical-Bernstein supermartingale of Howard et al. (2021). For scores ``x_1, x_2, ...`` in [0, 1]::

    mu_t     = (1/2 + sum_{i<=t} x_i) / (t + 1)                      (mu_0 = 1/2)
    sigma2_t = (1/4 + sum_{i<=t} (x_i - mu_i)^2) / (t + 1)           (sigma2_0 = 1/4)
    lambda_t = min(sqrt(2 log(2/a0) / (sigma2_{t-1} t log(1 + t))), 1/2)
    v_t      = 4 (x_t - mu_{t-1})^2,   psi_E(l) = (-log(1 - l) - l) / 4
    C_t      = sum lambda_i x_i / sum lambda_i  +-  (log(2/alpha) + sum v_i psi_E(lambda_i)) / sum lambda_i

then intersected with [0, 1] and with every earlier interval (the running intersection of a CS is a CS). The bets
``lambda_t`` are predictable (they read the scores before ``t`` only), which is all validity needs; they are tuned
for the level ``a0 = TUNING_ALPHA`` whatever ``alpha`` is, so that the sequences of two levels share their centre
and nest (a smaller ``alpha`` gives a wider interval at every ``n``); the cost of tuning at another level is under
1 % of the width for the levels an operator uses.

**Two streams** (:func:`difference_bounds`): the difference ``mu_new - mu_ref`` of two independent streams, each
with a CS at ``alpha / 2``: ``[lower_new - upper_ref, upper_new - lower_ref]`` holds with probability at least
``1 - alpha`` at every moment (a union bound), whatever the order and the proportion in which the two streams
arrive: a canary with 5 % of the traffic is no special case.

The service keeps one stream per version and scorer and updates it after every score: :class:`StreamSequence`, in
plain floats (a numpy call on one number costs more than the arithmetic). :class:`MeanSequence` is the same update
vectorised over ``k`` independent streams and :func:`mean_trajectory` the same over time, for simulations of many
comparisons; property tests hold the three equal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "BET_CAP",
    "TUNING_ALPHA",
    "MeanSequence",
    "StreamSequence",
    "Verdict",
    "difference_bounds",
    "mean_trajectory",
    "verdict",
    "verdicts",
]

Floats = NDArray[np.float64]
Bound = TypeVar("Bound", float, Floats)
# -1: the new version is worse by more than min_effect; +1: better by more than min_effect; 0: not decided.
Verdict = Literal[-1, 0, 1]

# The level the bets are tuned for: the per-stream level at the default alpha (0.05, split over two streams).
TUNING_ALPHA: Final = 0.025
# The largest bet (c in Waudby-Smith and Ramdas): below 1, so that psi_E stays finite; 1/2 as the paper advises.
BET_CAP: Final = 0.5
_TUNING: Final = 2.0 * math.log(2.0 / TUNING_ALPHA)
# A sequence's state, one stream or many: the six sums and estimates of the update, the level, the bounds, the count.
_STATE: Final = (
    "_log",
    "_mu",
    "_penalty",
    "_squares",
    "_sum",
    "_variance",
    "_weight",
    "_weighted",
    "alpha",
    "lower",
    "n",
    "upper",
)


def _check_alpha(alpha: float) -> float:
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return float(alpha)


def _check_scores(x: Floats) -> Floats:
    if not bool(np.all((x >= 0.0) & (x <= 1.0))):  # also refuses NaN
        raise ValueError("scores must lie in [0, 1] (normalise by the scorer's scale first)")
    return x


class StreamSequence:
    """The confidence sequence at level ``alpha`` for the mean of one stream of scores in [0, 1], score by score:
    ``lower`` and ``upper`` (0 and 1 before any score), ``n`` scores seen, ``mean`` their plain mean (NaN before)."""

    __slots__ = _STATE

    def __init__(self, alpha: float) -> None:
        self.alpha = _check_alpha(alpha)
        self._log = math.log(2.0 / alpha)
        self.n = 0
        self._sum = self._squares = 0.0
        self._mu, self._variance = 0.5, 0.25
        self._weight = self._weighted = self._penalty = 0.0
        self.lower, self.upper = 0.0, 1.0

    @property
    def mean(self) -> float:
        return self._sum / self.n if self.n else math.nan

    def update(self, x: float) -> None:
        if not (0.0 <= x <= 1.0):  # also refuses NaN
            raise ValueError("scores must lie in [0, 1] (normalise by the scorer's scale first)")
        t = self.n + 1
        bet = min(math.sqrt(_TUNING / (self._variance * t * math.log1p(t))), BET_CAP)
        self._penalty += 4.0 * (x - self._mu) ** 2 * (-math.log1p(-bet) - bet) / 4.0
        self.n = t
        self._sum += x
        self._mu = (0.5 + self._sum) / (t + 1)
        self._squares += (x - self._mu) ** 2
        self._variance = (0.25 + self._squares) / (t + 1)
        self._weight += bet
        self._weighted += bet * x
        centre = self._weighted / self._weight
        margin = (self._log + self._penalty) / self._weight
        self.lower = max(self.lower, min(max(centre - margin, 0.0), 1.0))
        self.upper = min(self.upper, min(max(centre + margin, 0.0), 1.0))

    def extend(self, scores: Iterable[float]) -> None:
        for score in scores:
            self.update(score)


def _bets(t: Floats, variance: Floats) -> Floats:
    """lambda_t for the t-th score of a stream whose variance estimate before it is ``variance``."""
    bets: Floats = np.minimum(np.sqrt(_TUNING / (variance * t * np.log1p(t))), BET_CAP)
    return bets


def _psi(bets: Floats) -> Floats:
    psi: Floats = (-np.log1p(-bets) - bets) / 4.0
    return psi


class MeanSequence:
    """Confidence sequences at level ``alpha`` for the means of ``size`` independent streams of scores in [0, 1].

    ``lower`` and ``upper`` are the current bounds (0 and 1 before any score), ``n`` the scores seen, ``mean`` their
    plain mean (NaN before any). ``update`` adds one score to every stream ``mask`` selects (all by default)."""

    __slots__ = _STATE

    def __init__(self, alpha: float, size: int = 1) -> None:
        self.alpha = _check_alpha(alpha)
        self._log = math.log(2.0 / alpha)
        self.n: NDArray[np.int64] = np.zeros(size, dtype=np.int64)
        self._sum: Floats = np.zeros(size)
        self._squares: Floats = np.zeros(size)  # sum (x_i - mu_i)^2
        self._mu: Floats = np.full(size, 0.5)  # mu_{t}, the predictable centre of the next v
        self._variance: Floats = np.full(size, 0.25)  # sigma2_{t}, what the next bet reads
        self._weight: Floats = np.zeros(size)  # sum lambda_i
        self._weighted: Floats = np.zeros(size)  # sum lambda_i x_i
        self._penalty: Floats = np.zeros(size)  # sum v_i psi_E(lambda_i)
        self.lower: Floats = np.zeros(size)
        self.upper: Floats = np.ones(size)

    @property
    def mean(self) -> Floats:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean: Floats = np.where(self.n > 0, self._sum / np.maximum(self.n, 1), np.nan)
        return mean

    def update(self, x: ArrayLike, mask: ArrayLike | None = None) -> None:
        scores = _check_scores(np.broadcast_to(np.asarray(x, dtype=np.float64), self.n.shape))
        t = (self.n + 1).astype(np.float64)
        bets = _bets(t, self._variance)
        penalty = 4.0 * (scores - self._mu) ** 2 * _psi(bets)
        n = self.n + 1
        total = self._sum + scores
        mu = (0.5 + total) / (n + 1)
        squares = self._squares + (scores - mu) ** 2
        weight = self._weight + bets
        weighted = self._weighted + bets * scores
        penalties = self._penalty + penalty
        centre = weighted / weight
        margin = (self._log + penalties) / weight
        lower = np.maximum(self.lower, np.clip(centre - margin, 0.0, 1.0))
        upper = np.minimum(self.upper, np.clip(centre + margin, 0.0, 1.0))
        if mask is None:
            self.n, self._sum, self._mu, self._squares = n, total, mu, squares
            self._variance = (0.25 + squares) / (n + 1)
            self._weight, self._weighted, self._penalty = weight, weighted, penalties
            self.lower, self.upper = lower, upper
            return
        chosen = np.broadcast_to(np.asarray(mask, dtype=bool), self.n.shape)
        self.n = np.where(chosen, n, self.n)
        self._sum = np.where(chosen, total, self._sum)
        self._mu = np.where(chosen, mu, self._mu)
        self._squares = np.where(chosen, squares, self._squares)
        self._variance = (0.25 + self._squares) / (self.n + 1)
        self._weight = np.where(chosen, weight, self._weight)
        self._weighted = np.where(chosen, weighted, self._weighted)
        self._penalty = np.where(chosen, penalties, self._penalty)
        self.lower = np.where(chosen, lower, self.lower)
        self.upper = np.where(chosen, upper, self.upper)


def mean_trajectory(scores: ArrayLike, alpha: float) -> tuple[Floats, Floats]:
    """The bounds of :class:`MeanSequence` after each score of every row of ``scores`` (shape ``(k, n)``: ``k``
    streams of ``n`` scores), computed at once over time: ``(lower, upper)``, each of shape ``(k, n)``.

    The same numbers as ``n`` calls of ``update`` (a test holds them equal); a simulation reads a stream's bounds
    after any number of its scores from it without a Python loop over time."""
    x = _check_scores(np.atleast_2d(np.asarray(scores, dtype=np.float64)))
    log = math.log(2.0 / _check_alpha(alpha))
    t = np.arange(1, x.shape[1] + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(x, axis=1)) / (t + 1)  # mu_t
    squares = np.cumsum((x - mu) ** 2, axis=1)
    variance = (0.25 + squares) / (t + 1)  # sigma2_t
    before = np.concatenate([np.full((x.shape[0], 1), 0.25), variance[:, :-1]], axis=1)  # sigma2_{t-1}
    mu_before = np.concatenate([np.full((x.shape[0], 1), 0.5), mu[:, :-1]], axis=1)  # mu_{t-1}
    bets = _bets(t, before)
    weight = np.cumsum(bets, axis=1)
    centre = np.cumsum(bets * x, axis=1) / weight
    margin = (log + np.cumsum(4.0 * (x - mu_before) ** 2 * _psi(bets), axis=1)) / weight
    lower: Floats = np.maximum.accumulate(np.clip(centre - margin, 0.0, 1.0), axis=1)
    upper: Floats = np.minimum.accumulate(np.clip(centre + margin, 0.0, 1.0), axis=1)
    return lower, upper


def difference_bounds(
    new: tuple[Bound, Bound], reference: tuple[Bound, Bound], *, higher_is_better: bool = True
) -> tuple[Bound, Bound]:
    """Bounds on ``mu_new - mu_ref`` in the better direction (negative: the new version is worse) from the two
    streams' ``(lower, upper)`` (floats, or arrays of many comparisons), each a CS at ``alpha / 2``: together a CS at
    ``alpha`` (union bound)."""
    lower = new[0] - reference[1]
    upper = new[1] - reference[0]
    if higher_is_better:
        return lower, upper
    return -upper, -lower


def verdict(lower: float, upper: float, min_effect: float) -> Verdict:
    """-1 when the whole interval lies below ``-min_effect`` (a regression worth paging on), +1 when it lies above
    ``+min_effect`` (an improvement), else 0. A wrong -1 needs one of the two streams' CS to miss its mean on one side:
    at most alpha / 2 over the whole life of a comparison; a wrong verdict of either sign at most alpha."""
    _check_effect(min_effect)
    return -1 if upper < -min_effect else 1 if lower > min_effect else 0


def _check_effect(min_effect: float) -> None:
    if not (0.0 <= min_effect < 1.0):
        raise ValueError(f"min_effect must be in [0, 1), got {min_effect!r}")


def verdicts(lower: ArrayLike, upper: ArrayLike, min_effect: float) -> NDArray[np.int8]:
    """:func:`verdict` of many comparisons at once."""
    _check_effect(min_effect)
    low = np.asarray(lower, dtype=np.float64)
    high = np.asarray(upper, dtype=np.float64)
    result: NDArray[np.int8] = np.where(high < -min_effect, -1, np.where(low > min_effect, 1, 0)).astype(np.int8)
    return result
