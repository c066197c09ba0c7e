"""The internal topic as the runtime sees it: what publishes to it (``TurnTopic``, an exporter injected by the
composition root), the keys of its records, and the check at start-up that it exists and compacts.

Three kinds of record share the topic, all on the partition of their conversation (``murmur2`` of its id):

- a **turn**: key ``<conversation id>/<trace id>:<span id>``, value the turn's summary, timestamp its agent
  span's end: windows are cut on the turns' own time, so a turn published late still joins its window (stage 1);
- a window's **marker**: key ``<conversation id>/scored:<first turn id>``, value the turn ids of a window whose
  scores every sink confirmed (stage 2, before their tombstones): a restore that still finds some of those
  turns skips them, so a window half tombstoned when the process died is never scored again under another id;
- a **tombstone** (no value) for each of them once done, so compaction removes them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aiokafka import AIOKafkaConsumer

from sidecar.core import Flushable
from sidecar.runtime.sources import topic_partitions
from sidecar.runtime.startup import EXIT_INVALID, StartupFailure
from sidecar.runtime.tansu import topic_config

__all__ = [
    "ParsedKey",
    "TurnTopic",
    "check_topic",
    "marker_key",
    "marker_value",
    "parse_key",
    "parse_marker",
]

log = logging.getLogger(__name__)

_MARKER = "scored:"


class TurnTopic(Flushable, Protocol):
    """The internal topic's producer: a checkpointed part (flushed with the sinks before every commit)."""

    async def publish(
        self, conversation_id: str, key: bytes, value: bytes | None, timestamp_ms: int | None = None
    ) -> None:
        """Queue a record on ``conversation_id``'s partition (``value`` ``None``: a tombstone), stamped
        ``timestamp_ms`` (``None``: the producer's clock); may wait for room, never raises for the broker
        (``flush`` says whether it was delivered)."""
        ...


@dataclass(frozen=True, slots=True)
class ParsedKey:
    conversation_id: str
    kind: Literal["turn", "marker"]
    turn_id: str  # a turn's own id, or the marker's first turn


def parse_key(key: bytes | None) -> ParsedKey | None:
    """What a record of the topic is, from its key (``None``: not one of ours)."""
    if not key:
        return None
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return None
    conversation, slash, suffix = text.rpartition("/")
    if not slash or not conversation:
        return None
    if suffix.startswith(_MARKER):
        return ParsedKey(conversation, "marker", suffix[len(_MARKER) :])
    return ParsedKey(conversation, "turn", suffix) if ":" in suffix else None


def marker_key(conversation_id: str, first_turn_id: str) -> bytes:
    return f"{conversation_id}/{_MARKER}{first_turn_id}".encode()


def marker_value(turn_ids: Sequence[str]) -> bytes:
    return json.dumps({"turns": list(turn_ids)}, separators=(",", ":")).encode()


def parse_marker(value: bytes) -> tuple[str, ...]:
    """The turn ids a marker lists (none when it cannot be read)."""
    try:
        turns: Any = json.loads(value).get("turns", [])
    except (ValueError, AttributeError):
        return ()
    return tuple(t for t in turns if isinstance(t, str)) if isinstance(turns, list) else ()


async def check_topic(consumer: AIOKafkaConsumer, topic: str, admin_options: dict[str, Any]) -> int:
    """The topic's partition count, once it is known to exist; raises :class:`StartupFailure` (one line) when it
    does not, or when the broker says its ``cleanup.policy`` does not compact. A broker that does not answer
    for its configuration gets a warning: the topic still works, its restores read everything retained."""
    partitions = topic_partitions(consumer, [topic])
    if not partitions:
        raise StartupFailure(
            f"sessions.topic {topic!r} does not exist: create it with cleanup.policy=compact,delete and as many "
            "partitions as the traces topic (docs/sessions.md, 'What an operator configures'); session scorers "
            "need it",
            EXIT_INVALID,
        )
    policy = await topic_config(admin_options, topic, "cleanup.policy")
    if policy is None:
        log.warning(
            "the broker did not tell sessions.topic %r's cleanup.policy: it should be compact,delete, or every "
            "restore reads every turn still retained",
            topic,
        )
    elif "compact" not in policy.split(","):
        raise StartupFailure(
            f"sessions.topic {topic!r} has cleanup.policy={policy}: it must compact (cleanup.policy=compact,delete; "
            "docs/sessions.md), or finished conversations are never removed and every restore reads them all",
            EXIT_INVALID,
        )
    return len(partitions)
