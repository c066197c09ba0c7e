"""The conversations' limits, with their defaults: the one declaration of each (the ``sessions:`` block of the
settings reads its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.conventions.session_turns import DEFAULT_ID_ATTRIBUTES, TurnCaps

__all__ = ["SessionLimits", "TurnCaps"]


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """When a conversation's window closes, how much of them may wait, and where their turns go."""

    topic: str = "otlp_spans.session_turns"
    id_attributes: tuple[str, ...] = DEFAULT_ID_ATTRIBUTES
    # A window closes once no turn came for idle_s (stream time), or at once at either bound below
    # (the run says why, and is incomplete).
    idle_s: float = 900.0
    max_duration_s: float = 14_400.0
    max_turns: int = 50
    max_session_bytes: int = 256 * 1024  # of the window's turn summaries
    # Per process: at this many bytes of buffered turns the window with the oldest last turn is scored now.
    max_bytes: int = 256 * 1024 * 1024
    caps: TurnCaps = field(default_factory=TurnCaps)
