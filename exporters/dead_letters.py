"""Score dead letters: what a destination will never take is kept on a Kafka topic, not lost (docs/delivery.md).

Every sink delivers by one rule for an item its destination rejects for good (an HTTP 400, 413 or 422, an
OTLP receiver's permanent error, a Kafka record over the size limit) or that waited too long for the
destination (a span Phoenix never received): the item is dropped from the sink's queue, counted
(``scoring_sidecar_exporter_dropped_total``), logged at ERROR with its score id and the destination's words,
and handed here as a :class:`DeadLetter`. :class:`ScoreDeadLetters` produces it to the score topic's
dead-letter topic (``exporters.kafka_scores.dead_letter_topic``, ``agent_scores.dead_letter`` by default) and
is checkpointed like a sink, after the sinks: the sink's flush that sees the drop does not fail for it (its
``set_aside`` is :func:`~exporters.delivery.letters.checkpointed`), and the same checkpoint commits only once
this publisher's flush confirms the dead letter is acknowledged. So a permanent error costs at most one
checkpoint and never stalls commits, even when one happens in every checkpoint interval, and nothing
committed past is lost: it is on the dead-letter topic, replayable once the cause is fixed.

A dead letter's value is what the exporter tried to send, as it sent it (a Langfuse score, a Datadog
evaluation, a Phoenix annotation, one OTLP span as OTLP/JSON, a score record); its key is the score record's
(the scored trace id, a conversation's id for a session score), its headers say which exporter, why and
the destination's words (``x-dead-letter-exporter``, ``x-dead-letter-reason``, ``x-dead-letter-detail``) and
the score id (``score-id``). A value larger than ``max_value_bytes`` is replaced by a note of its size
(``x-dead-letter-truncated``): the score itself stays in the score topic.
"""

from __future__ import annotations

import json
import logging
from typing import Final

from exporters.delivery.letters import DeadLetter, SetAsideLetter, checkpointed, no_dead_letters
from exporters.kafka_scores import CONTENT_TYPE, DEAD_LETTER_SUFFIX, KafkaScoreSink, ScoreRecord
from exporters.registry import KafkaConnection
from sidecar.core import names
from sidecar.core.observers import ServiceObserver

__all__ = [
    "DEAD_LETTERS_NAME",
    "DEAD_LETTER_SUFFIX",
    "DeadLetter",
    "ScoreDeadLetters",
    "SetAsideLetter",
    "letter_record",
    "no_dead_letters",
]

log = logging.getLogger(__name__)

DEAD_LETTERS_NAME: Final = "dead_letters"  # the checkpointed part's name and its metrics label
# Under the producer's default max_request_size (1 MiB) with room for the headers.
MAX_VALUE_BYTES: Final = 512 * 1024
_DETAIL_CHARS: Final = 1000


def letter_record(
    letter: DeadLetter, reason: str, detail: str, *, max_value_bytes: int = MAX_VALUE_BYTES
) -> ScoreRecord:
    """The dead letter as a Kafka record (see the module doc)."""
    value = letter.payload
    headers = [
        ("content-type", CONTENT_TYPE.encode()),
        ("score-id", letter.score_id.encode()),
        (names.DL_EXPORTER, letter.exporter.encode()),
        (names.DL_REASON, reason.encode()),
        (names.DL_DETAIL, detail[:_DETAIL_CHARS].encode()),
    ]
    if len(value) > max_value_bytes:
        headers.append((names.DL_TRUNCATED, str(len(value)).encode()))
        value = json.dumps({"scoreId": letter.score_id, "truncated": True, "bytes": len(letter.payload)}).encode()
    return ScoreRecord(letter.score_id, letter.key, value, headers)


class ScoreDeadLetters:
    """A checkpointed publisher of dead letters (a :class:`~sidecar.core.Flushable`, not a sink: it takes no
    run). ``set_aside`` queues a letter at once (a drop happens inside a sink's delivery loop: it cannot wait;
    drops are rare and each sink's own bound holds the items before they drop); ``flush`` is ``True`` once every
    letter set aside before it is acknowledged by the broker."""

    name = DEAD_LETTERS_NAME

    def __init__(
        self,
        kafka: KafkaConnection,
        topic: str,
        *,
        max_pending: int = 10_000,
        max_value_bytes: int = MAX_VALUE_BYTES,
        observer: ServiceObserver | None = None,
    ) -> None:
        self.topic = topic
        self.max_value_bytes = max_value_bytes
        self._records = KafkaScoreSink(
            kafka.bootstrap_servers,
            topic=topic,
            producer_options=dict(kafka.producer_options),
            enable_idempotence=kafka.enable_idempotence,
            max_pending=max_pending,
            observer=observer,
            name=self.name,
        )
        self.letters = 0  # set aside since start

    def __repr__(self) -> str:
        return f"ScoreDeadLetters(topic={self.topic!r})"

    @property
    def outstanding(self) -> int:
        return self._records.outstanding

    @property
    def sent(self) -> int:
        return self._records.sent

    async def start(self) -> None:
        await self._records.start()

    @checkpointed  # the service flushes this publisher after the sinks, in the same checkpoint
    def set_aside(self, letter: DeadLetter, reason: str, detail: str) -> None:
        self.letters += 1
        self._records.put_nowait(letter_record(letter, reason, detail, max_value_bytes=self.max_value_bytes))
        log.info(
            "score %s (%s, %s) set aside on the dead-letter topic %s",
            letter.score_id,
            letter.exporter,
            reason,
            self.topic,
        )

    async def flush(self, timeout_s: float) -> bool:
        return await self._records.flush(timeout_s)

    async def close(self, timeout_s: float = 5.0) -> None:
        await self._records.close(timeout_s)
