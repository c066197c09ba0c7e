"""The window a backfill scores: ``--from`` and ``--to`` as the operator wrote them, resolved against one "now".

A time is ISO 8601 with a zone (``2026-11-24T00:00:00Z``, ``2026-11-24T01:00:00+01:00``), relative to now
(``-7d``, ``-36h``, ``-90m``, ``-30s``, ``-2w``), or ``now``. A time without a zone is refused: the broker's
times are UTC instants, and a host's local zone is not what the operator meant at 3 a.m.

The backfill's consumer group is named after the window *as written* and the scorers' fingerprints, so the same
command run again continues where it stopped (its commits), a changed scorer (another fingerprint) starts
afresh, and a relative window (``--from -7d``) run again resumes its own group and reads on to the new "now".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["TimeSpec", "Window", "WindowError", "backfill_group_id", "parse_time", "utc_text"]

_RELATIVE = re.compile(r"^-(?P<n>\d+(?:\.\d+)?)(?P<unit>s|m|h|d|w)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


class WindowError(ValueError):
    """A time or window that cannot be used: the message is the operator's whole line."""


@dataclass(frozen=True, slots=True)
class TimeSpec:
    text: str  # as written
    unix_ms: int  # resolved against the command's "now"
    relative: bool  # "-7d" or "now": its meaning moves with the clock

    @property
    def key(self) -> str:
        """What names it in the group id: the instant when absolute (two spellings of one instant are one
        window), the text when relative (the same command again is the same window)."""
        return self.text if self.relative else utc_text(self.unix_ms)


def parse_time(text: str, *, now: datetime, option: str) -> TimeSpec:
    value = text.strip()
    if value == "now":
        return TimeSpec("now", _ms(now), relative=True)
    relative = _RELATIVE.match(value)
    if relative is not None:
        delta = timedelta(seconds=float(relative["n"]) * _UNIT_S[relative["unit"]])
        return TimeSpec(value, _ms(now - delta), relative=True)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise WindowError(
            f"{option} {text!r}: write an ISO 8601 time with its zone (2026-11-24T00:00:00Z), a time relative to "
            "now (-7d, -36h, -90m) or now"
        ) from None
    if moment.tzinfo is None:
        raise WindowError(
            f"{option} {text!r} has no zone: add one (Z for UTC, or +01:00), e.g. {value}Z; the broker's times "
            "are instants"
        )
    return TimeSpec(value, _ms(moment), relative=False)


@dataclass(frozen=True, slots=True)
class Window:
    start: TimeSpec
    end: TimeSpec
    now_ms: int

    @property
    def open_ended(self) -> bool:
        """``--to`` is now: the window ends at the end offsets found at start."""
        return self.end.text == "now"

    def describe(self) -> str:
        end = f"now ({utc_text(self.end.unix_ms)})" if self.open_ended else utc_text(self.end.unix_ms)
        return f"{utc_text(self.start.unix_ms)} to {end}"

    @classmethod
    def parse(cls, start: str, end: str | None, *, now: datetime | None = None) -> Window:
        moment = now or datetime.now(UTC)
        window = cls(
            parse_time(start, now=moment, option="--from"),
            parse_time(end or "now", now=moment, option="--to"),
            _ms(moment),
        )
        if window.start.unix_ms >= window.end.unix_ms:
            raise WindowError(
                f"--from {start} is not before --to {end or 'now'} ({window.describe()}): give --from the earlier time"
            )
        if window.start.unix_ms > window.now_ms:
            raise WindowError(
                f"--from {start} is in the future ({utc_text(window.start.unix_ms)}): nothing to score yet"
            )
        return window


def backfill_group_id(base: str, topics: Sequence[str], window: Window, scorers: Sequence[tuple[str, str]]) -> str:
    """The backfill's own consumer group: ``<kafka.group_id>.backfill.<from>.<to>.<hash>``, the hash over the
    topics, the window as written and every chosen scorer's id and fingerprint (``scorers``: (id, fingerprint))."""
    identity = "\n".join([*sorted(topics), window.start.key, window.end.key, *(f"{i}={f}" for i, f in sorted(scorers))])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    return f"{base}.backfill.{_slug(window.start.key)}.{_slug(window.end.key)}.{digest}"


def utc_text(unix_ms: int) -> str:
    """``2026-11-24T00:00:00Z`` (milliseconds only when there are some)."""
    moment = datetime.fromtimestamp(unix_ms / 1000, UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if unix_ms % 1000:
        text += f".{unix_ms % 1000:03d}"
    return text + "Z"


def _slug(key: str) -> str:
    return re.sub(r"[^0-9A-Za-z.+-]", "", key.replace(":", ""))


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
