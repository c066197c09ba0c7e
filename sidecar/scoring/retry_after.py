"""How long an HTTP server asks to be left alone: ``Retry-After`` in all its forms, for every HTTP client of
the project (the judge transports, the exporters' batch poster)."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping

__all__ = ["parse_retry_after"]


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI's, more precise, so it wins), else ``Retry-After`` as
    delta-seconds or an HTTP date; ``None`` when absent or unreadable. Never negative."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _seconds(lowered.get("retry-after-ms"), 1000.0)
    if millis is not None:
        return millis
    value = lowered.get("retry-after")
    if not value:
        return None
    seconds = _seconds(value, 1.0)
    if seconds is not None:
        return seconds
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):  # neither a number nor a date: as if absent
        return None
    return max(parsed.timestamp() - time.time(), 0.0)


def _seconds(text: str | None, per_second: float) -> float | None:
    """A finite delay in seconds, or ``None``: a NaN would compare neither before nor after any deadline, and a
    wait computed from it would never end."""
    if not text:
        return None
    try:
        number = float(text) / per_second
    except ValueError:
        return None
    return max(number, 0.0) if math.isfinite(number) else None
