"""The feedback stage's topics as the runtime sees them: what writes to them (``RecordWriter``, an exporter injected
by the composition root), the pairs' record, and the check at start-up that every topic is there and fit.

- the **feedback topic** and the **score topic** are read by the stage's group, co-partitioned: as many partitions
  each, records keyed by trace id (a conversation's by its id), so that partition ``p`` of one meets partition ``p``
  of the other on one member (Kafka's range assignor gives both to the same member);
- the **state topic** (compacted) keeps what waits, partition ``p`` for the lane of partition ``p``: it needs at
  least as many partitions;
- the **pairs topic** gets one record per pair (:func:`pair_record`), keyed as the score record.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import pydantic_core
from aiokafka import AIOKafkaConsumer

from sidecar.core import Flushable
from sidecar.core.timestamps import iso_millis
from sidecar.runtime.feedback.join import JoinedScorer, PairMade
from sidecar.runtime.feedback.limits import FeedbackLimits
from sidecar.runtime.sources import topic_partitions
from sidecar.runtime.startup import EXIT_INVALID, StartupFailure
from sidecar.runtime.tansu import topic_config

__all__ = ["RecordWriter", "check_topics", "pair_record"]

log = logging.getLogger(__name__)

_GUIDE = "docs/feedback.md, 'What an operator sets up'"


class RecordWriter(Flushable, Protocol):
    """A topic's producer, checkpointed: flushed before the stage commits what it read."""

    async def write(self, key: bytes, value: bytes | None, partition_key: bytes) -> None:
        """Queue a record (``value`` ``None``: a tombstone) placed by ``partition_key``; may wait for room, never
        raises for the broker (``flush`` says whether it was delivered)."""
        ...


def pair_record(pair: PairMade, scorer: JoinedScorer) -> bytes:
    """The pairs topic's record: the score (its id, scorer and version, judge model, score and label) beside the
    person's verdict (value, author, comment), and whether they agree."""
    score, feedback, comparison = pair.score, pair.feedback, pair.comparison
    version = scorer.version if score.fingerprint == scorer.fingerprint else None
    body: dict[str, Any] = {
        "pairId": pair.pair_id,
        "pairedAt": iso_millis(pair.at_ms * 1_000_000),
        "scoreId": score.score_id,
        "scorerId": pair.scorer_id,
        "scorerFingerprint": score.fingerprint,
        "scorerVersion": version,  # null: a score of an earlier version of the scorer
        "scope": score.scope,
        "traceId": score.trace_id,
        "spanId": score.span_id,
        "conversationId": score.conversation_id,
        "scoreSource": score.score_source,
        "scoredAt": score.timestamp,
        "judgeModel": score.judge_model,
        "judgeScore": score.score,
        "judgeLabel": score.label,
        "judgeReason": score.reason,
        "humanValue": feedback.value,
        "kind": comparison.kind,
        "judgeVerdict": comparison.judge,
        "humanVerdict": comparison.human,
        "agreed": comparison.agreed,
        "feedbackId": feedback.feedback_id,
        "feedbackName": feedback.name,
        "source": feedback.source,
        "author": feedback.author,
        "comment": feedback.comment,
        "feedbackAt": iso_millis(feedback.timestamp_ms * 1_000_000) if feedback.timestamp_ms is not None else None,
    }
    return pydantic_core.to_json(body)


async def check_topics(consumer: AIOKafkaConsumer, limits: FeedbackLimits, admin_options: dict[str, Any]) -> int:
    """The number of lanes (the feedback topic's partitions), once every topic is known to exist and fit; raises
    :class:`StartupFailure` (one line, naming the fix) otherwise."""
    partitions = {
        topic: len(topic_partitions(consumer, [topic]))
        for topic in (limits.topic, limits.scores_topic, limits.state, limits.pairs)
    }
    missing = [topic for topic, count in partitions.items() if count == 0]
    if missing:
        raise StartupFailure(
            f"feedback needs topics that do not exist: {', '.join(missing)} (the feedback topic, the score topic, "
            f"the join's compacted state topic and the pairs' topic: {_GUIDE})",
            EXIT_INVALID,
        )
    lanes, scores = partitions[limits.topic], partitions[limits.scores_topic]
    if lanes != scores:
        raise StartupFailure(
            f"feedback.topic {limits.topic!r} has {lanes} partitions and the score topic {limits.scores_topic!r} "
            f"{scores}: a feedback and its score meet only on partitions of the same number, so both need as many "
            f"(and records keyed by trace id the same way; {_GUIDE})",
            EXIT_INVALID,
        )
    if partitions[limits.state] < lanes:
        raise StartupFailure(
            f"the feedback join's state topic {limits.state!r} has {partitions[limits.state]} partitions: it needs "
            f"at least as many as feedback.topic ({lanes}; {_GUIDE})",
            EXIT_INVALID,
        )
    policy = await topic_config(admin_options, limits.state, "cleanup.policy")
    if policy is None:
        log.warning(
            "the broker did not tell the feedback join's state topic %r's cleanup.policy: it should be compact, or "
            "every restore reads everything the join ever wrote",
            limits.state,
        )
    elif "compact" not in policy.split(","):
        raise StartupFailure(
            f"the feedback join's state topic {limits.state!r} has cleanup.policy={policy}: it must compact "
            f"(cleanup.policy=compact), or pairs and expiries are never removed and every restore reads them all "
            f"({_GUIDE})",
            EXIT_INVALID,
        )
    return lanes
