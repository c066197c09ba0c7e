"""``runtime.max_runs_per_record``: one record (or ready trace) starts a bounded number of runs, shared evenly among
its scorers, the rest counted (docs/limits.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from exporters.kafka_scores import KafkaScoreSink
from exporters.prometheus import SidecarMetrics
from sidecar.conventions.run_limit import limit_runs
from sidecar.core.runs import Scope
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.limits import RuntimeLimits, TraceBufferLimits
from sidecar.scorers.text import get_assistant_message_from_run_output
from sidecar.scoring import create_scorer
from tests.support.service import scoring_service
from tests.support.sidecar_process import committed_total, read_topic

FAST_CONSUMER = {"fetch_max_wait_ms": 50, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


@given(
    runs=st.lists(st.integers(min_value=0, max_value=4), max_size=80),
    limit=st.integers(min_value=0, max_value=90),
)
def test_the_runs_kept_are_at_most_the_limit_each_scorers_first_and_evenly_shared(runs: list[int], limit: int) -> None:
    scorers = [object() for _ in range(5)]
    work = [(scorers[s], i) for i, s in enumerate(runs)]
    kept, left_out = limit_runs(work, limit)
    assert len(kept) == min(limit, len(work)) and left_out == len(work) - len(kept)
    assert [i for _, i in kept] == sorted(i for _, i in kept)  # in the record's order
    has = {id(s): sum(1 for x, _ in work if x is s) for s in scorers}
    got = {id(s): sum(1 for x, _ in kept if x is s) for s in scorers}
    for scorer in scorers:
        mine = [i for x, i in work if x is scorer]
        assert [i for x, i in kept if x is scorer] == mine[: got[id(scorer)]]  # its first runs
    # Even: a scorer short of its runs has at least as many as any other scorer, less one.
    short = [got[k] for k in has if got[k] < has[k]]
    if short:
        assert min(short) >= max(got.values()) - 1


def test_a_limit_as_large_as_the_work_keeps_everything() -> None:
    work = [("a", 1), ("b", 2)]
    assert limit_runs(work, 2) == (work, 0)


def length_scorer(name: str):  # type: ignore[no-untyped-def]
    return create_scorer(id=name, description="answer length").generate_score(
        lambda ctx: min(len(get_assistant_message_from_run_output(ctx.run.output) or "") / 200, 1.0)
    )


def record_with_agent_spans(count: int) -> bytes:
    """One export holding ``count`` agent spans (copies of one trace's, each with its own span id)."""
    trace = TrafficGenerator(seed=4).trace()
    request = ExportTraceServiceRequest()
    request.CopyFrom(trace.request)
    spans = request.resource_spans[0].scope_spans[0].spans
    agent = next(s for s in spans if s.span_id.hex() == trace.agent_span_id)
    for i in range(count - 1):
        copy = spans.add()
        copy.CopyFrom(agent)
        copy.span_id = (10_000 + i).to_bytes(8, "big")
    return request.SerializeToString()


@pytest.mark.parametrize("scope", ["span", "trace"])
async def test_a_record_of_a_thousand_agent_spans_starts_the_bounded_runs_and_counts_the_rest(
    kafka_bootstrap: str, new_topic: Callable[..., Any], unique_name: Callable[[str], str], scope: Scope
) -> None:
    """Scope span: the record's runs are bounded where they are built from it. Scope trace: the record is one
    trace, whose runs are bounded when it is assembled."""
    from aiokafka import AIOKafkaProducer

    spans_topic, scores_topic, dead_topic = await new_topic("spans"), await new_topic("scores"), await new_topic("dead")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        await (await producer.send(spans_topic, record_with_agent_spans(1000)))
    finally:
        await producer.stop()
    metrics = SidecarMetrics()
    group = unique_name("group")
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans_topic, dead_letter_topic=dead_topic),
        topics=[spans_topic],
        scorers=[
            ConfiguredScorer(length_scorer("first"), scope=scope),
            ConfiguredScorer(length_scorer("second"), scope=scope),
        ],
        sinks=[KafkaScoreSink(kafka_bootstrap, topic=scores_topic)],
        observer=metrics,
        limits=RuntimeLimits(commit_interval_s=0.2, max_runs_per_record=30, trace_buffer=TraceBufferLimits(idle_s=0.2)),
        consumer_options=FAST_CONSUMER,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    try:
        records = await read_topic(kafka_bootstrap, scores_topic, expect=30, timeout_s=15)
        deadline = asyncio.get_running_loop().time() + 15
        while await committed_total(kafka_bootstrap, group, spans_topic, 1) < 1:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
    values = [json.loads(r.value) for r in records]
    assert len(values) == 30
    assert sorted(v["scorerId"] for v in values) == ["first"] * 15 + ["second"] * 15
    hits = metrics.registry.get_sample_value("scoring_sidecar_limit_hits_total", {"limit": "runs_per_record"})
    assert hits == 2 * 1000 - 30
