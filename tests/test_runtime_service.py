"""The service end to end, in process: broker, judge server and OTLP receiver all real on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from exporters.kafka_scores import KafkaScoreSink
from exporters.otlp import OtlpTraceSink
from exporters.prometheus import PrometheusSink, SidecarMetrics
from sidecar.conventions.selection import Selection
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.service import ConfiguredScorer, RuntimeLimits, ScoringService
from sidecar.scorers import create_prompt_alignment_scorer_llm
from sidecar.scorers.text import get_assistant_message_from_run_output
from sidecar.scoring import JudgeModel, create_scorer
from sidecar.testing.judge_server import JudgeServer
from tests.support.otlp_receiver import OtlpReceiver

FAST_CONSUMER = {"fetch_max_wait_ms": 50, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def length_scorer():  # type: ignore[no-untyped-def]
    return create_scorer(id="answer-length", description="longer answers score higher").generate_score(
        lambda ctx: min(len(get_assistant_message_from_run_output(ctx.run.output) or "") / 200, 1.0)
    )


async def produce(bootstrap: str, topic: str, traces: list[GeneratedTrace], *, poison_at: int | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for i, trace in enumerate(traces):
            if i == poison_at:
                await producer.send_and_wait(topic, b"\x00not-a-protobuf\xff" * 3, key=b"poison")
            await producer.send_and_wait(topic, trace.request.SerializeToString(), key=trace.key)
    finally:
        await producer.stop()


async def read_all(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 30) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest")
    await consumer.start()
    records: list[Any] = []
    try:
        partitions = consumer.partitions_for_topic(topic) or {0}
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(records) < expect and asyncio.get_running_loop().time() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def test_every_agent_span_is_scored_exported_and_committed(
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    otlp_receiver: OtlpReceiver,
) -> None:
    judge_server.reset(heuristic_reply)
    spans_topic = await new_topic("spans", partitions=3)
    scores_topic = await new_topic("scores", partitions=1)
    dead_topic = await new_topic("dead", partitions=1)
    traces = list(TrafficGenerator(seed=3).traces(24))
    await produce(kafka_bootstrap, spans_topic, traces, poison_at=10)

    judge = JudgeModel(model="openai/gpt-4o-mini", api_base=judge_server.url, transport="http")
    metrics = SidecarMetrics()
    otlp = OtlpTraceSink(otlp_receiver.endpoint("http/protobuf"), protocol="http/protobuf", evaluation_logs=False)
    kafka_sink = KafkaScoreSink(kafka_bootstrap, topic=scores_topic)
    group = unique_name("group")
    service = ScoringService(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans_topic, dead_letter_topic=dead_topic),
        topics=[spans_topic],
        scorers=[
            ConfiguredScorer(create_prompt_alignment_scorer_llm(model=judge), judge_model=judge.litellm_model),
            ConfiguredScorer(length_scorer(), selection=Selection(agents={"include": ("coding-*",)})),  # type: ignore[arg-type]
        ],
        sinks=[PrometheusSink(metrics), kafka_sink, otlp],
        metrics=metrics,
        limits=RuntimeLimits(commit_interval_s=0.2),
        consumer_options=FAST_CONSUMER,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    coding = sum(1 for t in traces if t.agent == "coding-assistant")
    expected = len(traces) + coding
    records = await read_all(kafka_bootstrap, scores_topic, expect=expected)
    await asyncio.sleep(0.5)  # a checkpoint or two
    stop.set()
    await asyncio.wait_for(running, 30)

    values = [json.loads(r.value) for r in records]
    assert len(values) == expected
    assert len({v["scoreId"] for v in values}) == expected
    by_scorer: dict[str, list[dict[str, Any]]] = {}
    for v in values:
        by_scorer.setdefault(v["scorerId"], []).append(v)
    assert len(by_scorer["prompt-alignment-scorer"]) == len(traces)
    assert len(by_scorer["answer-length"]) == coding
    expected_targets = {(t.trace_id, t.agent_span_id) for t in traces}
    assert {(v["traceId"], v["spanId"]) for v in by_scorer["prompt-alignment-scorer"]} == expected_targets
    for record, value in zip(records, values, strict=True):
        assert record.key == value["traceId"].encode()

    # Offsets: everything consumed was committed (24 traces + the poison record).
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        committed = [await consumer.committed(TopicPartition(spans_topic, p)) or 0 for p in range(3)]
    finally:
        await consumer.stop()
    assert sum(committed) == len(traces) + 1

    # The poison record went to the dead-letter topic, and was counted.
    dead = await read_all(kafka_bootstrap, dead_topic, expect=1)
    assert [dict(d.headers)["x-dead-letter-reason"] for d in dead] == [b"decode_error"]
    assert service.dead_letters.count("decode_error") == 1

    # Score spans live in the scored traces, parented to the scored spans.
    run_spans = [s for s in otlp_receiver.spans if s.name.startswith("scorer run:")]
    assert {(s.trace_id, s.parent_span_id) for s in run_spans} >= expected_targets
    assert len(run_spans) == expected

    # Prometheus token counters equal the judge records' sums.
    judge_input = sum(
        e["usage"].get("inputTokens", 0)
        for v in values
        for step in (v.get("judge") or {}).values()
        for e in step["executions"]
    )
    sample = metrics.registry.get_sample_value(
        "scoring_sidecar_judge_tokens_total",
        {
            "judge_model": "openai/gpt-4o-mini",
            "scorer": "prompt-alignment-scorer",
            "type": "input",
            "status": "success",
        },
    )
    assert sample == judge_input > 0
    assert metrics.registry.get_sample_value(
        "scoring_sidecar_scorer_runs_total",
        {"scorer": "answer-length", "agent": "coding-assistant", "outcome": "scored"},
    ) == pytest.approx(coding)
