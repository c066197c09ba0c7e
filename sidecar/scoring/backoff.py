"""How long to wait before trying again, for every retry loop of the project that backs off (the judge client,
the exporters' delivery queue)."""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["equal_jitter"]

# 2**30 times any sensible base is far past any cap: the exponent stops growing there instead of overflowing.
_MAX_DOUBLINGS = 30


def equal_jitter(retry: int, base_s: float, max_s: float, rand: Callable[[], float] = random.random) -> float:
    """The wait before retry number ``retry`` (0 for the first retry), in seconds: a ceiling that doubles from
    ``base_s`` up to ``max_s``, and a wait between half the ceiling and the whole of it ("equal jitter"), so
    that clients retrying together spread out without any of them retrying at once. ``rand`` draws from
    [0, 1)."""
    ceiling = min(max_s, base_s * 2 ** min(max(retry, 0), _MAX_DOUBLINGS))
    return float(ceiling / 2 + rand() * ceiling / 2)
