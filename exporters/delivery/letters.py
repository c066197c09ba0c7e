"""A dead letter: an item a destination refused for good, as the exporter would have sent it.

Every sink turns the items its delivery queue drops into :class:`DeadLetter`\\ s and hands them to the
``set_aside`` it was built with (``exporters.dead_letters.ScoreDeadLetters`` in the service: the score topic's
dead-letter topic; :func:`no_dead_letters` when a sink is used alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DeadLetter", "SetAsideLetter", "no_dead_letters"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    exporter: str  # the sink's name: langfuse, datadog, phoenix, otlp, kafka_scores
    score_id: str
    key: bytes  # the score record's key: the scored trace id
    payload: bytes  # what the exporter sent (JSON, or OTLP/JSON for a span), for a replay once fixed


# What a sink calls for each dropped item: (letter, reason, the destination's words). Never raises, never waits.
SetAsideLetter = Callable[[DeadLetter, str, str], None]


def no_dead_letters(letter: DeadLetter, reason: str, detail: str) -> None:
    """Without a dead-letter topic (a sink used alone, in tests): the drop's ERROR line is all there is."""
