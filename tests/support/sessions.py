"""Conversations through the broker: a sidecar configured with a session scorer, its internal topic created as an
operator would (compacted), and what the tests read back."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sidecar.runtime.sources import topic_partitions
from sidecar.runtime.tansu import read_log_ends
from sidecar.testing.judge_server import JudgeServer
from tests.support.conversations import Turn, turn_trace
from tests.support.judge import SECRET_KEY
from tests.support.sidecar_process import SidecarProcess, free_port, read_topic, sidecar_config
from tests.support.trace_scope import SplitTrace, produce_records

__all__ = [
    "TURN_COUNT",
    "SessionSidecar",
    "create_session_topic",
    "produce_turns",
    "read_internal_topic",
    "say",
    "scores_by_conversation",
    "session_sidecar",
    "wait_for_scores",
]

TURN_COUNT = "python: tests.support.session_scorers:create_turn_count_scorer"


async def create_session_topic(
    bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    """The internal topic as docs/sessions.md asks an operator to create it (or with other ``configs``)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if configs is None:
            configs = {"cleanup.policy": "compact,delete", "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}
        response = await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
        assert all(code == 0 for _, code, *_ in response.topic_errors), response.topic_errors
    finally:
        await admin.close()


@dataclass
class SessionSidecar:
    process: SidecarProcess
    spans: str
    scores: str
    internal: str
    group: str


async def session_sidecar(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    *,
    sessions: dict[str, Any],
    partitions: int = 3,
    session_partitions: int = 3,
    scorers: list[dict[str, Any]] | None = None,
    runtime: dict[str, Any] | None = None,
    kafka: dict[str, Any] | None = None,
    **config: Any,
) -> SessionSidecar:
    spans = await new_topic("spans", partitions=partitions)
    scores = await new_topic("scores", partitions=1)
    dead = await new_topic("dead", partitions=1)
    internal = unique_name("turns")
    await create_session_topic(kafka_bootstrap, internal, session_partitions)
    group = unique_name("group")
    settings = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=group,
        judge_url=judge_server.url, metrics_port=free_port(),
        scorers=scorers or [{"id": "turns", "kind": TURN_COUNT, "targets": {"scope": "session"}}],
        runtime={"trace_buffer": {"idle_s": 0.5, "max_wait_s": 10}, **(runtime or {})}, **config,
    )  # fmt: skip
    # A member killed with SIGKILL leaves its groups once its session times out: short, so that a restart takes
    # less than the tests' idle_s.
    settings["kafka"].update({"session_timeout_ms": 3000, "heartbeat_interval_ms": 500, **(kafka or {})})
    settings["sessions"] = {"topic": internal, **sessions}
    process = SidecarProcess(settings, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})
    return SessionSidecar(process, spans, scores, internal, group)


async def produce_turns(bootstrap: str, topic: str, turns: Sequence[SplitTrace]) -> None:
    """Each turn's records, keyed by its trace id (so a conversation's turns spread over the partitions)."""
    await produce_records(bootstrap, topic, [(t.key, record) for t in turns for record in t.records])


async def say(
    bootstrap: str, topic: str, said: Mapping[str, Sequence[Turn]], index: int, traces: dict[str, list[SplitTrace]]
) -> None:
    """Turn ``index`` of every conversation that has one, traced now and produced at once, as an agent's turns
    reach Kafka as they happen (a turn's time is its agent span's end); each trace is added to ``traces``."""
    made = []
    for cid, turns in said.items():
        if index < len(turns):
            trace = turn_trace(cid, turns[index])
            traces.setdefault(cid, []).append(trace)
            made.append(trace)
    await produce_turns(bootstrap, topic, made)


def scores_by_conversation(records: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        value = json.loads(record.value)
        assert record.key == value["conversationId"].encode()  # keyed by the conversation
        by.setdefault(value["conversationId"], []).append(value)
    return by


async def wait_for_scores(
    bootstrap: str, topic: str, conversations: int, timeout_s: float, *, windows: int = 0
) -> list[Any]:
    """Every record of the score topic once ``conversations`` conversations have a score and ``windows`` distinct
    score ids are there (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    records: list[Any] = []
    while time.monotonic() < deadline:
        records = await read_topic(bootstrap, topic, expect=max(conversations, windows), timeout_s=3)
        values = [json.loads(r.value) for r in records]
        if (
            len({v["conversationId"] for v in values}) >= conversations
            and len({v["scoreId"] for v in values}) >= windows
        ):
            return records
        await asyncio.sleep(0.5)
    return records


async def read_internal_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every record of the internal topic now (turns, markers, tombstones)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50)
    await consumer.start()
    records: list[Any] = []
    try:
        partitions = topic_partitions(consumer, [topic])
        ends = await read_log_ends(consumer, partitions)  # end_offsets() alone falls short on Tansu
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        left = {tp for tp in partitions if ends[tp] > 0}
        while left:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
            left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
    finally:
        await consumer.stop()
    return records
