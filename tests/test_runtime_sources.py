"""Record sources other than the group subscription, through the real broker: assigned partitions over a range
(what a backfill reads: the service stops by itself at the end offsets, committed, and a second run resumes
from the commit; the whole traces it still buffers at the end are scored, not dropped) and a topic read from
the beginning (a compacted internal topic)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from exporters.kafka_scores import KafkaScoreSink
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.service import ScoringService
from sidecar.runtime.sources import AssignedPartitions, PartitionRange, from_beginning
from sidecar.runtime.trace_buffer import TraceBufferLimits
from sidecar.scorers.text import get_assistant_message_from_run_output
from sidecar.scoring import create_scorer
from tests.support.service import scoring_service
from tests.support.sidecar_process import committed_total, produce_traces, read_topic
from tests.support.trace_scope import openinference_agent_with_llm_child, produce_records, unfinished_root_trace

FAST_CONSUMER = {"fetch_max_wait_ms": 50, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def length_scorer():  # type: ignore[no-untyped-def]
    return create_scorer(id="answer-length", description="longer answers score higher").generate_score(
        lambda ctx: min(len(get_assistant_message_from_run_output(ctx.run.output) or "") / 200, 1.0)
    )


async def _offsets_by_trace(bootstrap: str, topic: str, expect: int) -> dict[str, tuple[TopicPartition, int]]:
    records = await read_topic(bootstrap, topic, expect=expect, timeout_s=20)
    return {r.key.decode(): (TopicPartition(r.topic, r.partition), r.offset) for r in records}


def _service(bootstrap: str, spans: str, scores: str, dead: str, group: str, source: Any) -> ScoringService:
    return scoring_service(
        bootstrap_servers=bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans, dead_letter_topic=dead),
        topics=[spans],
        scorers=[ConfiguredScorer(length_scorer())],
        sinks=[KafkaScoreSink(bootstrap, topic=scores)],
        limits=RuntimeLimits(commit_interval_s=0.2, shutdown_timeout_s=10),
        consumer_options=FAST_CONSUMER,
        source=source,
    )


async def test_assigned_ranges_score_exactly_the_window_then_stop_committed_and_resume_from_the_commit(
    kafka_bootstrap: str, new_topic: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    spans = await new_topic("spans", partitions=2)
    scores = await new_topic("scores", partitions=1)
    dead = await new_topic("dead")
    traces = list(TrafficGenerator(seed=21).traces(40))
    await produce_traces(kafka_bootstrap, spans, traces)
    where = await _offsets_by_trace(kafka_bootstrap, spans, len(traces))
    # A window per partition: from its 3rd record to before its 3rd-last.
    by_partition: dict[TopicPartition, list[int]] = {}
    for tp, offset in where.values():
        by_partition.setdefault(tp, []).append(offset)
    ranges = {tp: PartitionRange(sorted(o)[2], sorted(o)[-2]) for tp, o in by_partition.items()}
    inside = {t for t, (tp, o) in where.items() if ranges[tp].start <= o < (ranges[tp].end or 0)}
    assert 0 < len(inside) < len(traces)

    async def resolve(consumer: AIOKafkaConsumer) -> dict[TopicPartition, PartitionRange]:
        return ranges

    group = unique_name("window")
    window = AssignedPartitions(resolve, description=f"{spans} window")
    service = _service(kafka_bootstrap, spans, scores, dead, group, window)
    await asyncio.wait_for(service.run(asyncio.Event()), 30)  # never asked to stop: the source ends it

    values = [json.loads(r.value) for r in await read_topic(kafka_bootstrap, scores, expect=len(inside))]
    assert {v["traceId"] for v in values} == inside and len(values) == len(inside)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group)
    await consumer.start()
    try:
        assert {tp: await consumer.committed(tp) for tp in ranges} == {tp: r.end for tp, r in ranges.items()}
    finally:
        await consumer.stop()

    # The same window and group again: every partition resumes at its end, nothing is scored twice.
    again = AssignedPartitions(resolve, description=f"{spans} window")
    await asyncio.wait_for(_service(kafka_bootstrap, spans, scores, dead, group, again).run(asyncio.Event()), 30)
    assert again.resumed == {tp: r.end for tp, r in ranges.items()}
    assert len(await read_topic(kafka_bootstrap, scores, expect=len(inside) + 1, timeout_s=2)) == len(inside)


async def test_from_beginning_reads_every_retained_record_whatever_the_offset_reset(
    kafka_bootstrap: str, new_topic: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    spans = await new_topic("spans", partitions=3)
    scores = await new_topic("scores", partitions=1)
    traces = list(TrafficGenerator(seed=22).traces(15))
    await produce_traces(kafka_bootstrap, spans, traces)
    group = unique_name("restore")
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans, dead_letter_topic=await new_topic("dead")),
        topics=[spans],
        scorers=[ConfiguredScorer(length_scorer())],
        sinks=[KafkaScoreSink(kafka_bootstrap, topic=scores)],
        limits=RuntimeLimits(commit_interval_s=0.2),
        consumer_options={**FAST_CONSUMER, "auto_offset_reset": "latest"},
        source=from_beginning([spans]),
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    values = [json.loads(r.value) for r in await read_topic(kafka_bootstrap, scores, expect=len(traces))]
    await asyncio.sleep(0.5)  # a checkpoint
    stop.set()
    await asyncio.wait_for(running, 30)
    assert {v["traceId"] for v in values} == {t.trace_id for t in traces}
    assert await committed_total(kafka_bootstrap, group, spans, 3) == len(traces)


async def test_an_exhausted_window_scores_the_traces_it_still_buffers_before_its_final_commit(
    kafka_bootstrap: str, new_topic: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    """A whole-trace scorer waits idle_s after a trace's root; at the end of a window nothing more will come, so
    the traces still buffered are scored at once (ready reason window_end) instead of being dropped uncommitted:
    a trace whose root is in the window is complete, one whose root lies past the window's end is not."""
    spans = await new_topic("spans", partitions=1)
    scores = await new_topic("scores", partitions=1)
    whole = openinference_agent_with_llm_child()
    cut, root_after_the_window = unfinished_root_trace()
    records = [(whole.key, r) for r in whole.records] + [(cut.key, cut.records[0]), (cut.key, root_after_the_window)]
    await produce_records(kafka_bootstrap, spans, records)
    tp = TopicPartition(spans, 0)
    end = len(records) - 1  # the cut trace's root record is past the window's end

    async def resolve(consumer: AIOKafkaConsumer) -> dict[TopicPartition, PartitionRange]:
        return {tp: PartitionRange(0, end)}

    group = unique_name("window")
    trace_scope = ConfiguredScorer(length_scorer(), scope="trace")
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans, dead_letter_topic=await new_topic("dead")),
        topics=[spans],
        scorers=[trace_scope],
        sinks=[KafkaScoreSink(kafka_bootstrap, topic=scores)],
        # idle_s far beyond the test: only the window's end can make these traces ready in time.
        limits=RuntimeLimits(commit_interval_s=0.2, trace_buffer=TraceBufferLimits(idle_s=120, max_wait_s=600)),
        consumer_options=FAST_CONSUMER,
        source=AssignedPartitions(resolve, description=f"{spans} window"),
    )
    started = time.monotonic()
    await asyncio.wait_for(service.run(asyncio.Event()), 30)
    assert time.monotonic() - started < 20

    values = {
        v["traceId"]: v for v in map(json.loads, (r.value for r in await read_topic(kafka_bootstrap, scores, expect=2)))
    }
    assert set(values) == {whole.trace_id, cut.trace_id}
    assert values[whole.trace_id]["metadata"]["trace"]["readyReason"] == "window_end"
    assert values[whole.trace_id]["metadata"]["trace"]["complete"] is True
    assert values[cut.trace_id]["metadata"]["trace"]["readyReason"] == "window_end"
    assert values[cut.trace_id]["metadata"]["trace"]["complete"] is False
    assert await committed_total(kafka_bootstrap, group, spans, 1) == end
