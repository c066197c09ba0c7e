"""The service end to end, in process: broker, judge server and OTLP receiver all real on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from exporters.kafka_scores import KafkaScoreSink
from exporters.otlp import OtlpTraceSink
from exporters.prometheus import SidecarMetrics
from sidecar.conventions.selection import Selection
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.limits import RuntimeLimits
from sidecar.scorers import create_prompt_alignment_scorer_llm
from sidecar.scorers.text import get_assistant_message_from_run_output
from sidecar.scoring import JudgeModel, create_scorer
from sidecar.testing.judge_server import JudgeServer
from tests.support.judge import judge_client
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.service import scoring_service
from tests.support.sidecar_process import committed_total, free_port, produce_traces, read_topic

FAST_CONSUMER = {"fetch_max_wait_ms": 50, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def length_scorer():  # type: ignore[no-untyped-def]
    return create_scorer(id="answer-length", description="longer answers score higher").generate_score(
        lambda ctx: min(len(get_assistant_message_from_run_output(ctx.run.output) or "") / 200, 1.0)
    )


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
    await produce_traces(kafka_bootstrap, spans_topic, traces, poison={10: b"\x00not-a-protobuf\xff" * 3})

    judge = JudgeModel(model="openai/gpt-4o-mini", api_base=judge_server.url, transport="http")
    metrics = SidecarMetrics()
    client = judge_client(judge, observers=[metrics])  # every call counted, as the assembly wires it
    otlp = OtlpTraceSink(otlp_receiver.endpoint("http/protobuf"), protocol="http/protobuf", events="span")
    kafka_sink = KafkaScoreSink(kafka_bootstrap, topic=scores_topic)
    group = unique_name("group")
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans_topic, dead_letter_topic=dead_topic),
        topics=[spans_topic],
        scorers=[
            ConfiguredScorer(
                create_prompt_alignment_scorer_llm(model=judge).bind(client), judge_model=judge.litellm_model
            ),
            ConfiguredScorer(length_scorer(), selection=Selection(agents={"include": ("coding-*",)})),  # type: ignore[arg-type]
        ],
        sinks=[kafka_sink, otlp],
        observer=metrics,
        limits=RuntimeLimits(commit_interval_s=0.2),
        consumer_options=FAST_CONSUMER,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    coding = sum(1 for t in traces if t.agent == "coding-assistant")
    expected = len(traces) + coding
    records = await read_topic(kafka_bootstrap, scores_topic, expect=expected, timeout_s=30)
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
    assert await committed_total(kafka_bootstrap, group, spans_topic, 3) == len(traces) + 1

    # The poison record went to the dead-letter topic, and was counted.
    dead = await read_topic(kafka_bootstrap, dead_topic, expect=1, timeout_s=10)
    assert [dict(d.headers)["x-dead-letter-reason"] for d in dead] == [b"decode_error"]
    assert metrics.registry.get_sample_value("scoring_sidecar_dead_letters_total", {"reason": "decode_error"}) == 1

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


def slow_length_scorer():  # type: ignore[no-untyped-def]
    async def score(ctx: Any) -> float:
        await asyncio.sleep(0.3)  # longer than the pause grace: intake must pause
        return 0.5

    return create_scorer(id="slow-length", description="waits like a judge").generate_score(score)


@pytest.mark.parametrize(
    ("make_scorer", "pauses"),
    [(slow_length_scorer, True), (length_scorer, False)],
    ids=["runs-wait-so-intake-pauses", "cpu-only-runs-free-capacity-within-the-grace"],
)
@pytest.mark.slow
async def test_backpressure_pauses_and_resumes_until_the_backlog_is_drained(
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    make_scorer: Callable[[], Any],
    pauses: bool,
) -> None:
    spans_topic = await new_topic("spans", partitions=2)
    scores_topic = await new_topic("scores", partitions=1)
    traces = list(TrafficGenerator(seed=9).traces(60))
    await produce_traces(kafka_bootstrap, spans_topic, traces)
    metrics = SidecarMetrics()
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=unique_name("group"),
        ingest=IngestConfig(topic=spans_topic, dead_letter_topic=await new_topic("dead")),
        topics=[spans_topic],
        scorers=[ConfiguredScorer(make_scorer())],
        sinks=[KafkaScoreSink(kafka_bootstrap, topic=scores_topic)],
        observer=metrics,
        # Far fewer runs in flight than the backlog holds. Runs that wait (on a judge) pause the consumer
        # many times; runs that only need CPU finish within the pause grace, and pausing (which drops the
        # consumer's prefetched records) would only slow the drain.
        limits=RuntimeLimits(commit_interval_s=0.2, max_in_flight_runs=3, max_poll_records=5),
        consumer_options=FAST_CONSUMER,
    )
    stop = asyncio.Event()
    caplog.set_level("INFO", logger="sidecar.runtime")
    running = asyncio.create_task(service.run(stop))
    records = await read_topic(kafka_bootstrap, scores_topic, expect=len(traces), timeout_s=30)
    stop.set()
    await asyncio.wait_for(running, 30)
    assert len({json.loads(r.value)["scoreId"] for r in records}) == len(traces)
    assert metrics.registry.get_sample_value("scoring_sidecar_runs_in_flight") == 0
    paused = [r for r in caplog.records if r.getMessage().startswith("backpressure: paused")]
    assert (len(paused) > 1) if pauses else not paused


class FlushLog:
    """A sink that keeps count of what the runtime asks of it (submits, flushes) and always confirms."""

    name = "flush_log"

    def __init__(self) -> None:
        self.submitted = 0
        self.flushes = 0

    async def start(self) -> None:
        return None

    async def submit(self, run: Any) -> None:
        self.submitted += 1

    async def flush(self, timeout_s: float) -> bool:
        self.flushes += 1
        return True

    async def close(self) -> None:
        return None


async def test_a_failing_exporter_blocks_commits_but_the_sinks_after_it_are_still_flushed(
    kafka_bootstrap: str, new_topic: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    spans_topic = await new_topic("spans", partitions=1)
    traces = list(TrafficGenerator(seed=4).traces(6))
    await produce_traces(kafka_bootstrap, spans_topic, traces)
    metrics = SidecarMetrics()
    # A real OTLP sink aimed at a port where nothing listens: every checkpoint flush fails.
    dead_otlp = OtlpTraceSink(f"http://127.0.0.1:{free_port()}", protocol="http/protobuf", timeout_s=0.2, events="span")
    after = FlushLog()
    group = unique_name("group")
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans_topic),
        topics=[spans_topic],
        scorers=[ConfiguredScorer(length_scorer())],
        sinks=[dead_otlp, after],
        observer=metrics,
        limits=RuntimeLimits(commit_interval_s=0.1),
        consumer_options=FAST_CONSUMER,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    for _ in range(100):
        await asyncio.sleep(0.1)
        failures = metrics.registry.get_sample_value(
            "scoring_sidecar_exporter_flush_failures_total", {"exporter": "otlp"}
        )
        if after.submitted == len(traces) and (failures or 0) >= 4:
            break
    flushes_while_failing = after.flushes
    stop.set()
    await asyncio.wait_for(running, 30)

    assert after.submitted == len(traces)
    assert flushes_while_failing >= 4  # flushed at every checkpoint, after the failing sink
    assert metrics.registry.get_sample_value("scoring_sidecar_exporter_up", {"exporter": "otlp"}) == 0
    assert metrics.registry.get_sample_value("scoring_sidecar_exporter_up", {"exporter": "flush_log"}) == 1
    assert await committed_total(kafka_bootstrap, group, spans_topic, 1) == 0  # nothing past unexported spans


async def test_intake_lets_the_loop_run_while_it_ingests_a_large_poll(
    kafka_bootstrap: str, new_topic: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    # Judge replies, finished runs and checkpoints share the loop with intake: ingesting a whole poll
    # (hundreds of records) in one go would hold them all back for its full CPU time.
    spans_topic = await new_topic("spans", partitions=1)
    traces = list(TrafficGenerator(seed=5).traces(800))
    await produce_traces(kafka_bootstrap, spans_topic, traces)
    log = FlushLog()
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=unique_name("group"),
        ingest=IngestConfig(topic=spans_topic),
        topics=[spans_topic],
        scorers=[ConfiguredScorer(length_scorer())],
        sinks=[log],
        observer=SidecarMetrics(),
        limits=RuntimeLimits(commit_interval_s=0.2, max_in_flight_runs=10_000, max_poll_records=1000),
        consumer_options={**FAST_CONSUMER, "max_partition_fetch_bytes": 16 * 1024 * 1024},
    )
    loop = asyncio.get_running_loop()
    stalls: list[float] = []

    async def tick() -> None:
        while True:
            asked = loop.time()
            await asyncio.sleep(0.001)
            stalls.append(loop.time() - asked - 0.001)

    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    ticker = asyncio.create_task(tick())
    for _ in range(300):
        if log.submitted == len(traces):
            break
        await asyncio.sleep(0.05)
    ticker.cancel()
    stop.set()
    await asyncio.wait_for(running, 30)
    assert log.submitted == len(traces)
    # Intake yields between slices: a poll ingested in one go held the loop several times this long.
    assert max(stalls) < 0.1
