"""Ownership: a record's handler suspended at an await (a slow dead-letter acknowledgement) while a rebalance
revokes its partition and gives it back. Its claim belongs to the old assignment: resuming completes nothing of
the new one, nothing raises, the batch it came from is not handled on, and the records are read again from the
last commit, each handled under the new assignment, scored and committed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from exporters.kafka_scores import KafkaScoreSink
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.ingest import DeadLetter, IngestConfig, RecordOrigin
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.limits import RuntimeLimits
from tests.support.custom_scorer import create_constant_scorer
from tests.support.service import scoring_service
from tests.support.sidecar_process import committed_total, produce_traces, read_topic
from tests.support.waits import eventually

pytestmark = pytest.mark.slow

GROUP_OPTIONS = {"fetch_max_wait_ms": 50, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


class SlowAcknowledgements(DeadLetterPublisher):
    """The real publisher, whose first delivery is acknowledged only once the test lets it (a broker slow to
    acknowledge, under a rebalance)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = asyncio.Event()
        self.acknowledge = asyncio.Event()
        self.delivered: list[int] = []  # the offsets whose letters were delivered

    async def publish(
        self, source: RecordOrigin, letters: Sequence[DeadLetter], *, encoding: str | None = None
    ) -> tuple[DeadLetter, ...]:
        delivered = await super().publish(source, letters, encoding=encoding)
        if not self.delivered:
            self.waiting.set()
            await self.acknowledge.wait()
        self.delivered.append(source.offset)
        return delivered


async def test_a_handler_suspended_across_a_revoke_and_a_reassignment_completes_nothing_of_the_new_assignment(
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = await new_topic("spans", partitions=1)
    scores = await new_topic("scores", partitions=1)
    dead = await new_topic("dead", partitions=1)
    tp = TopicPartition(spans, 0)
    traces = list(TrafficGenerator(seed=5).traces(2))
    # A record that cannot be read (its letter's acknowledgement is slow), then two traces to score.
    await produce_traces(kafka_bootstrap, spans, traces, poison={0: b"\xff not otlp"})
    group = unique_name("group")
    letters = SlowAcknowledgements(kafka_bootstrap, dead, encoding="otlp_proto")
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans, dead_letter_topic=dead),
        scorers=[ConfiguredScorer(create_constant_scorer())],
        sinks=[KafkaScoreSink(kafka_bootstrap, topic=scores)],
        limits=RuntimeLimits(commit_interval_s=0.1),
        consumer_options=GROUP_OPTIONS,
        dead_letters=letters,
    )
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    running = asyncio.create_task(service.run(stop))
    try:
        await asyncio.wait_for(letters.waiting.wait(), 30)  # the handler of offset 0 waits for its acknowledgement
        # A second member joins (every partition is revoked from the first), then leaves: the partition comes back.
        other = AIOKafkaConsumer(
            spans, bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False, **GROUP_OPTIONS
        )
        await other.start()
        try:

            async def joined() -> bool:
                await other.getmany(timeout_ms=100)  # it joins the group as it polls
                return rebalances(caplog) >= 1

            await eventually(joined)
        finally:
            await other.stop()
        await eventually(lambda: rebalances(caplog) >= 2 and tp in service_assignment(service))
        letters.acknowledge.set()  # the stale handler resumes: its claim is the old assignment's

        scored = await read_topic(kafka_bootstrap, scores, expect=len(traces), timeout_s=30)

        async def all_committed() -> bool:
            return await committed_total(kafka_bootstrap, group, spans, 1) == 3

        await eventually(all_committed)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)

    # Offset 0 was read again under the new assignment (its letter delivered again), not taken as done by the stale
    # handler; the rest of the stale batch was not handled on: each trace scored once, under the new assignment.
    assert letters.delivered == [0, 0]
    assert len(scored) == len(traces)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or "already in flight" in r.getMessage()]


def rebalances(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if "rebalanced" in r.getMessage())


def service_assignment(service: Any) -> set[TopicPartition]:
    intake = service._intake
    return set(intake.owned) if intake is not None else set()
