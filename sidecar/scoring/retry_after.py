"""How long an HTTP server asks to be left alone: ``Retry-After`` in all its forms, for every HTTP client of
the project (the judge transports, the exporters' batch poster)."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

__all__ = ["parse_retry_after"]


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI's, more precise, so it wins), else ``Retry-After`` as
    delta-seconds or an HTTP date; ``None`` when absent or unreadable. Never negative."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):  # neither a number nor a date: as if absent
        return None
    return max(parsed.timestamp() - time.time(), 0.0)
