"""The equal-jitter backoff every retry loop shares (the judge client, the exporters' delivery queue): its
bounds, as properties over any retry number, base, cap and draw."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from sidecar.scoring.backoff import equal_jitter

retries = st.integers(min_value=-5, max_value=10_000)
seconds = st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)
draws = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


def _ceiling(retry: int, base_s: float, max_s: float) -> float:
    return min(max_s, base_s * 2.0 ** min(max(retry, 0), 30))


@given(retries, seconds, seconds, draws)
def test_the_wait_lies_between_half_the_ceiling_and_the_ceiling(
    retry: int, base_s: float, max_s: float, draw: float
) -> None:
    ceiling = _ceiling(retry, base_s, max_s)
    wait = equal_jitter(retry, base_s, max_s, rand=lambda: draw)
    assert math.isfinite(wait)
    assert ceiling / 2 <= wait <= ceiling
    assert wait <= max_s  # never past the cap, however many retries


@given(retries, seconds, seconds)
def test_the_lowest_and_highest_draws_give_the_bounds(retry: int, base_s: float, max_s: float) -> None:
    ceiling = _ceiling(retry, base_s, max_s)
    assert equal_jitter(retry, base_s, max_s, rand=lambda: 0.0) == ceiling / 2
    assert math.isclose(
        equal_jitter(retry, base_s, max_s, rand=lambda: 1.0 - 1e-12), ceiling, rel_tol=1e-9, abs_tol=1e-300
    )


@given(st.integers(min_value=0, max_value=60), seconds, seconds, draws)
def test_the_ceiling_never_shrinks_from_one_retry_to_the_next(
    retry: int, base_s: float, max_s: float, draw: float
) -> None:
    now = equal_jitter(retry, base_s, max_s, rand=lambda: draw)
    later = equal_jitter(retry + 1, base_s, max_s, rand=lambda: draw)
    assert later >= now


def test_the_ceiling_doubles_from_the_base_until_the_cap() -> None:
    lowest = [equal_jitter(retry, 0.5, 8.0, rand=lambda: 0.0) for retry in range(7)]
    assert lowest == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    # a retry number below zero waits as the first retry does
    assert equal_jitter(-1, 0.5, 8.0, rand=lambda: 0.0) == 0.25


def test_without_a_draw_the_wait_is_random_within_its_bounds() -> None:
    waits = {equal_jitter(3, 1.0, 100.0) for _ in range(200)}
    assert all(4.0 <= wait < 8.0 for wait in waits)
    assert len(waits) > 1  # herds spread out
