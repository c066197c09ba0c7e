"""The score records of a window of the score topic, as the version comparison reads them.

A record is what ``exporters.kafka_scores`` writes: JSON with ``scoreId``, ``timestamp`` (the run's end, in
milliseconds: the time the live comparison reads too), ``scorerId``, ``score``, ``scoreSource`` and the agent's name
and version in ``metadata``. Anything else on the topic (not JSON, another schema) is counted and skipped.

The topic is read without a consumer group (nothing joined, nothing committed), each partition from the first
record the broker's time index places at ``--from`` to the end the plan found; a score's own ``timestamp`` then
decides whether it is in the window (a record is written a little after its run ended: the plan reads
``WRITE_SLACK_MS`` past ``--to``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, TopicPartition

from sidecar.backfill.plan import WindowPlan
from sidecar.core.label_values import AGENT_UNNAMED
from sidecar.runtime.startup import EXIT_UNREACHABLE, StartupFailure

__all__ = ["WRITE_SLACK_MS", "ScoreRow", "ScoresRead", "parse_score_record", "read_scores"]

# How long after its run ended a score record may be written (the sink's batching, a checkpoint's flush).
WRITE_SLACK_MS: Final = 60_000
# No record for this long from partitions not read to their end: the broker stopped answering.
_STALLED_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class ScoreRow:
    score_id: str
    time_ms: int
    scorer: str
    agent: str
    version: str | None
    score: float
    source: str  # live | backfill
    partition: int = 0
    offset: int = 0

    @property
    def order(self) -> tuple[int, int, int]:
        """The order the live service saw them in, as near as the records tell: by the run's end."""
        return self.time_ms, self.partition, self.offset


@dataclass(frozen=True, slots=True)
class ScoresRead:
    rows: tuple[ScoreRow, ...]  # in the window, by time
    records: int  # records read
    unreadable: int  # records that are not score records


def parse_score_record(value: bytes | None, *, partition: int = 0, offset: int = 0) -> ScoreRow | None:
    """The score a record holds, or None for a record that is not a score record (or holds no number)."""
    if not value:
        return None
    try:
        body: Any = json.loads(value)
        metadata = body.get("metadata") or {}
        score = body["score"]
        if isinstance(score, bool) or not isinstance(score, int | float):
            return None
        version = metadata.get("agentVersion")
        # The names repeat from record to record: one string each, not one per record (a window holds millions).
        return ScoreRow(
            score_id=str(body["scoreId"]),
            time_ms=_unix_ms(str(body["timestamp"])),
            scorer=sys.intern(str(body["scorerId"])),
            agent=sys.intern(str(metadata.get("agentName") or AGENT_UNNAMED)),
            version=sys.intern(str(version)) if version else None,
            score=float(score),
            source=sys.intern(str(body.get("scoreSource", "live"))),
            partition=partition,
            offset=offset,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _unix_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


async def read_scores(
    consumer: AIOKafkaConsumer,
    plan: WindowPlan,
    *,
    start_ms: int,
    end_ms: int,
    keep: Callable[[ScoreRow], bool] = lambda row: True,
) -> ScoresRead:
    """Every score of the plan's partitions whose run ended in ``[start_ms, end_ms)`` and that ``keep`` keeps (about
    250 bytes each), by time."""
    ranges = {p.partition: (p.start, p.end) for p in plan.partitions if p.records}
    rows: list[ScoreRow] = []
    records = unreadable = 0
    if not ranges:
        return ScoresRead((), 0, 0)
    consumer.assign(sorted(ranges, key=lambda tp: (tp.topic, tp.partition)))
    for tp, (start, _) in ranges.items():
        consumer.seek(tp, start)
    pending: set[TopicPartition] = set(ranges)
    last_progress = time.monotonic()
    while pending:
        batches = await consumer.getmany(*pending, timeout_ms=500, max_records=2000)
        if any(batches.values()):
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > _STALLED_S:
            raise StartupFailure(_stalled(sorted(pending, key=lambda tp: tp.partition)), EXIT_UNREACHABLE)
        for tp, batch in batches.items():
            end = ranges[tp][1]
            for record in batch:
                if record.offset >= end:
                    break
                records += 1
                row = parse_score_record(record.value, partition=tp.partition, offset=record.offset)
                if row is None:
                    unreadable += 1
                elif start_ms <= row.time_ms < end_ms and keep(row):
                    rows.append(row)
        for tp in list(pending):
            if await consumer.position(tp) >= ranges[tp][1]:
                pending.discard(tp)
    rows.sort(key=lambda row: row.order)
    return ScoresRead(tuple(rows), records, unreadable)


def _stalled(partitions: Sequence[TopicPartition]) -> str:
    named = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
    return (
        f"no record came from {named} for {_STALLED_S:.0f} s before the window's end: the broker stopped answering; "
        "run the command again"
    )
