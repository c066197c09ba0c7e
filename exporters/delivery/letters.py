"""A dead letter: an item a destination refused for good, as the exporter would have sent it.

Every sink turns the items its delivery queue drops into :class:`DeadLetter`\\ s and hands them to the
``set_aside`` it was built with (``exporters.dead_letters.ScoreDeadLetters`` in the service: the score topic's
dead-letter topic; :func:`no_dead_letters` when a sink is used alone).

A set-aside marked :func:`checkpointed` keeps its letters on something the same checkpoint flushes after the
sinks (the dead-letter topic): a drop handed to it is covered by that flush, so it does not fail the sink's
own flush (a permanent refusal in every checkpoint interval must not stop commits). Any other set-aside (the
default :func:`no_dead_letters`, a plain callable) keeps nothing durable: the drop fails the flush that sees it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

__all__ = [
    "DeadLetter",
    "Lettered",
    "SetAsideLetter",
    "checkpointed",
    "is_checkpointed",
    "json_letters",
    "no_dead_letters",
]

_CHECKPOINTED: Final = "_set_aside_checkpointed"
F = TypeVar("F", bound=Callable[..., None])


class Lettered(Protocol):
    """An item a sink may set aside: the score it carries and the key of the score's record."""

    @property
    def score_id(self) -> str: ...

    @property
    def key(self) -> bytes: ...


ItemT = TypeVar("ItemT", bound=Lettered)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    exporter: str  # the sink's name: langfuse, datadog, phoenix, otlp, kafka_scores
    score_id: str
    key: bytes  # the score record's key (``run.request.record_key``): the trace id, a conversation's id
    payload: bytes  # what the exporter sent (JSON, or OTLP/JSON for a span), for a replay once fixed


# What a sink calls for each dropped item: (letter, reason, the destination's words). Never raises, never waits.
SetAsideLetter = Callable[[DeadLetter, str, str], None]


def json_letters(
    exporter: str, set_aside: SetAsideLetter, body: Callable[[ItemT], Any]
) -> Callable[[ItemT, str, str], None]:
    """What a sink posting JSON hands its delivery queue to set dropped items aside: each item as a letter of
    ``exporter`` whose payload is ``body(item)`` as JSON (what was posted), handed to ``set_aside``."""

    def letter(item: ItemT, reason: str, detail: str) -> None:
        set_aside(DeadLetter(exporter, item.score_id, item.key, json.dumps(body(item)).encode()), reason, detail)

    return letter


def no_dead_letters(letter: DeadLetter, reason: str, detail: str) -> None:
    """Without a dead-letter topic (a sink used alone, in tests): the drop's ERROR line is all there is."""


def checkpointed(set_aside: F) -> F:
    """Mark ``set_aside`` as keeping its letters on something checkpointed after the sinks (see the module doc)."""
    setattr(set_aside, _CHECKPOINTED, True)
    return set_aside


def is_checkpointed(set_aside: object) -> bool:
    """Whether ``set_aside`` (a function or a bound method) was marked :func:`checkpointed`."""
    return getattr(set_aside, _CHECKPOINTED, False) is True
