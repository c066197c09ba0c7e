"""Timestamps in JavaScript's ``Date.prototype.toISOString`` form (what Mastra's records carry)."""

from __future__ import annotations

import functools
import time

__all__ = ["iso_millis"]


@functools.lru_cache(maxsize=256)
def _second(seconds: int) -> str:
    # Every run formats two or three timestamps, mostly within the same few seconds: format each once.
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def iso_millis(unix_nano: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC, milliseconds truncated (as ``toISOString``)."""
    seconds, nanos = divmod(unix_nano, 1_000_000_000)
    return f"{_second(seconds)}.{nanos // 1_000_000:03d}Z"
