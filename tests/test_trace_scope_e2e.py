"""``scope: trace`` through the real broker: ``scoring-sidecar run`` as a subprocess assembles agent runs from
traces spread over several records (real OTel SDK spans), judged by the scripted judge server on loopback."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.conventions.selection import sample_score
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.testing.judge_server import JudgeServer
from tests.support.judge import SECRET_KEY
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    kill_mid_work,
    read_scores,
    read_topic,
    score_values,
    sidecar_config,
)
from tests.support.trace_scope import (
    INSTRUCTIONS,
    RETRIEVED,
    TOOLS,
    SplitTrace,
    azure_events_trace,
    genai_agent_with_three_tools,
    openinference_agent_with_llm_child,
    produce_records,
    semconv_1_26_events_trace,
    unfinished_root_trace,
)
from tests.test_service_e2e import sample

TRACE = {"kinds": ["agent"], "scope": "trace"}


async def sidecar_on(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    *,
    scorers: list[dict[str, Any]],
    trace_buffer: dict[str, Any],
    partitions: int = 2,
    kafka: dict[str, Any] | None = None,
    **config: Any,
) -> tuple[SidecarProcess, str, str, str, str]:
    spans = await new_topic("spans", partitions=partitions)
    scores = await new_topic("scores", partitions=1)
    dead = await new_topic("dead", partitions=1)
    group = unique_name("group")
    runtime = {"trace_buffer": trace_buffer, **config.pop("runtime", {})}
    settings = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=group,
        judge_url=judge_server.url, metrics_port=free_port(), scorers=scorers, runtime=runtime, **config,
    )  # fmt: skip
    settings["kafka"].update(kafka or {})
    return SidecarProcess(settings, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY}), spans, scores, dead, group


def interleaved(traces: list[SplitTrace]) -> list[tuple[bytes, bytes]]:
    """Every trace's first record, then every second record, …: traces overlap in the partition."""
    rounds = max(len(t.records) for t in traces)
    return [(t.key, t.records[i]) for i in range(rounds) for t in traces if i < len(t.records)]


def by_scorer(values: list[dict[str, Any]], scorer: str) -> dict[str, dict[str, Any]]:
    """A scorer's score records by scored span id."""
    return {v["spanId"]: v for v in values if v["scorerId"] == scorer}


def prompts(judge_server: JudgeServer) -> list[str]:
    return [json.dumps(request.body) for request in judge_server.requests]


@pytest.mark.slow
async def test_agent_runs_are_assembled_from_their_trace_and_judged_with_what_the_children_hold(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    otlp_receiver: OtlpReceiver,
) -> None:
    judge_server.reset(heuristic_reply)
    scorers = [
        {"id": "pa-span", "kind": "prompt-alignment", "judge": "default"},
        {"id": "pa-trace", "kind": "prompt-alignment", "judge": "default", "targets": TRACE},
        {"id": "faithfulness", "kind": "faithfulness", "judge": "default", "targets": TRACE},
        {
            "id": "trajectory",
            "kind": "trajectory",
            "options": {"expectedTrajectory": list(TOOLS), "comparisonOptions": {"ordering": "strict"}},
            "targets": TRACE,
        },
    ]
    sidecar, spans, scores, _, group = await sidecar_on(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server,
        scorers=scorers, trace_buffer={"idle_s": 1.0, "max_wait_s": 30},
        otlp_endpoint=otlp_receiver.endpoint("http/protobuf"),
    )  # fmt: skip
    support = openinference_agent_with_llm_child()
    travel = genai_agent_with_three_tools()
    azure = azure_events_trace()
    legacy = semconv_1_26_events_trace()
    traces = [support, travel, azure, legacy]
    records = interleaved(traces)
    sidecar.start()
    try:
        await sidecar.wait_ready()
        await produce_records(kafka_bootstrap, spans, records)
        # pa-trace: 4 runs; faithfulness: 4 (2 without context are not scorable, so no record: 2);
        # trajectory: 4; pa-span: the 2 agent spans with content of their own.
        found = await read_topic(kafka_bootstrap, scores, expect=4 + 2 + 4 + 2, timeout_s=60)
        await asyncio.sleep(1.0)  # a checkpoint, the OTLP batch
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()

    values = score_values(found)
    assert len({v["scoreId"] for v in values}) == len(values), "a trace was scored twice"
    pa_trace, pa_span = by_scorer(values, "pa-trace"), by_scorer(values, "pa-span")
    assert set(pa_trace) == {t.agent_span_id for t in traces}

    # OpenInference: the agent span has no instructions; its LLM child does, and the judge saw them.
    run = pa_trace[support.agent_span_id]
    assert run["metadata"]["scope"] == "trace" and "missing" not in run["metadata"]
    assert run["metadata"]["trace"] == {
        "complete": True, "readyReason": "root_idle", "spans": 3, "llmCalls": 1, "toolCalls": 0,
        "retrievedDocuments": 1, "inputTokens": 60, "outputTokens": 9, "systemFrom": "llm_call",
    }  # fmt: skip
    assert any(INSTRUCTIONS in p and "parcel 4411" in p for p in prompts(judge_server))
    # The same span scored alone lacks the instructions, and says so.
    assert pa_span[support.agent_span_id]["metadata"]["missing"] == ["system"]
    assert pa_span[support.agent_span_id]["metadata"]["scope"] == "span"
    assert sample(metrics, "scoring_sidecar_degraded_runs_total", {"scorer": "pa-span", "missing": "system"}) == 1
    assert sample(metrics, "scoring_sidecar_degraded_runs_total", {"scorer": "pa-trace"}) == 0

    # Retrieved documents are the run's context: faithfulness judged the answer against them.
    faithful = by_scorer(values, "faithfulness")
    assert support.agent_span_id in faithful
    assert any(RETRIEVED in p and "Lyon depot on Monday" in p for p in prompts(judge_server))

    # GenAI: three tool calls over four records, in order (strict trajectory: 1.0).
    trip = by_scorer(values, "trajectory")[travel.agent_span_id]
    assert trip["score"] == 1.0, trip
    assert trip["metadata"]["trace"]["toolCalls"] == 3 and trip["metadata"]["trace"]["llmCalls"] == 2
    assert trip["metadata"]["trace"]["inputTokens"] == 240

    # Content in span events (Azure / Semantic Kernel JSON content; semconv 1.26 prompt/completion).
    for trace, words in ((azure, "charged twice"), (legacy, "bonjour")):
        assert pa_trace[trace.agent_span_id]["metadata"]["trace"]["systemFrom"] == "llm_call"
        assert any(words in p for p in prompts(judge_server))
        assert trace.agent_span_id not in pa_span  # alone, the agent span has nothing to judge

    # Visibility: readiness reasons, the buffer emptied, the run spans say what was judged.
    assert sample(metrics, "scoring_sidecar_traces_ready_total", {"reason": "root_idle"}) == 4
    assert sample(metrics, "scoring_sidecar_traces_buffered", {}) == 0
    assert sample(metrics, "scoring_sidecar_trace_assembly_wait_seconds_count", {}) == 4
    run_spans = [s for s in otlp_receiver.spans if s.attributes.get("scoring_sidecar.scorer.id") == "pa-trace"]
    assert {s.parent_span_id for s in run_spans} == {t.agent_span_id for t in traces}
    assert {(s.attributes["scoring_sidecar.run.scope"], s.attributes["scoring_sidecar.run.trace_complete"])
            for s in run_spans} == {("trace", True)}  # fmt: skip
    # Every record is committed once its traces are scored and exported.
    assert await committed_total(kafka_bootstrap, group, spans, 2) == len(records)


@pytest.mark.slow
async def test_max_wait_late_spans_and_an_agent_span_too_large_dead_lettered_alone(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """A trace whose root never ends is scored at max_wait_s and marked incomplete; its root, arriving after,
    is a late span (counted, not scored again). An agent span over max_input_bytes is dead-lettered alone."""
    judge_server.reset(heuristic_reply)
    targets = {**TRACE, "max_input_bytes": 8192}
    scorers = [{"id": "pa-trace", "kind": "prompt-alignment", "judge": "default", "targets": targets}]
    sidecar, spans, scores, dead, group = await sidecar_on(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server,
        scorers=scorers, trace_buffer={"idle_s": 0.5, "max_wait_s": 3}, partitions=1,
    )  # fmt: skip
    trace, late_root = unfinished_root_trace()
    huge = openinference_agent_with_llm_child("x" * 10_000)  # its agent span is over max_input_bytes
    sidecar.start()
    try:
        await sidecar.wait_ready()
        await produce_records(kafka_bootstrap, spans, [(huge.key, r) for r in huge.records])
        [letter] = await read_topic(kafka_bootstrap, dead, expect=1, timeout_s=20)
        started = asyncio.get_running_loop().time()
        await produce_records(kafka_bootstrap, spans, [(trace.key, r) for r in trace.records])
        [first] = await read_topic(kafka_bootstrap, scores, expect=1, timeout_s=20)
        waited = asyncio.get_running_loop().time() - started
        await produce_records(kafka_bootstrap, spans, [(trace.key, late_root)])  # the root ends, too late
        await asyncio.sleep(1.5)
        metrics = await sidecar.metrics_text()
        found = await read_topic(kafka_bootstrap, scores, expect=2, timeout_s=2)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    assert 3.0 <= waited < 6.0, waited  # not at idle_s: its root had not arrived
    record = json.loads(first.value)
    assert record["spanId"] == trace.agent_span_id
    assert (record["metadata"]["trace"]["complete"], record["metadata"]["trace"]["readyReason"]) == (False, "max_wait")
    assert len(found) == 1  # the late span is not scored again
    assert sample(metrics, "scoring_sidecar_late_spans_total", {"scorer": "pa-trace"}) == 1
    assert sample(metrics, "scoring_sidecar_traces_ready_total", {"reason": "max_wait"}) == 1
    # The agent span too large to score is set aside alone, as OTLP protobuf, naming the record it came in.
    headers = dict(letter.headers)
    assert headers["x-dead-letter-reason"] == b"too_large" and headers["x-dead-letter-encoding"] == b"otlp_proto"
    assert headers["x-dead-letter-span-id"] == huge.agent_span_id.encode()
    assert headers["x-dead-letter-source-offset"] == b"1"  # the second record of its trace
    request = ExportTraceServiceRequest.FromString(letter.value)
    [[lone]] = [[s for ss in rs.scope_spans for s in ss.spans] for rs in request.resource_spans]
    assert lone.span_id.hex() == huge.agent_span_id
    assert sample(metrics, "scoring_sidecar_dead_letters_total", {"reason": "too_large"}) == 1
    assert await committed_total(kafka_bootstrap, group, spans, 1) == 4


@pytest.mark.slow
async def test_kill_9_while_traces_are_buffered_loses_no_trace_and_scores_each_once(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """Traces of four records each, interleaved by waves of 15, with a buffer bound (20 traces) far below the
    backlog, so intake pauses: killed at random points three times, the sidecar still scores every trace, each
    under one score id per scorer, and assembles them whole."""
    judge_server.reset(heuristic_reply)
    scorers = [
        {
            "id": "trajectory",
            "kind": "trajectory",
            "options": {"expectedTrajectory": list(TOOLS), "comparisonOptions": {"ordering": "strict"}},
            "targets": TRACE,
        },
        {"id": "pa-trace", "kind": "prompt-alignment", "judge": "default", "targets": TRACE},
    ]
    sidecar, spans, scores, _, group = await sidecar_on(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server,
        scorers=scorers, trace_buffer={"idle_s": 0.5, "max_wait_s": 30, "max_traces": 20}, partitions=1,
    )  # fmt: skip
    traces = [genai_agent_with_three_tools() for _ in range(60)]
    records = [r for wave in range(0, 60, 15) for r in interleaved(traces[wave : wave + 15])]
    await produce_records(kafka_bootstrap, spans, records)
    try:
        await kill_mid_work(sidecar, random.Random(3), pause_s=(0.5, 2.0))
        found = await read_scores(kafka_bootstrap, scores, score_ids=2 * len(traces), timeout_s=90)
        await asyncio.sleep(1.0)  # the last checkpoint
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    values = score_values(found)
    assert len({v["scoreId"] for v in values}) == 2 * len(traces), sidecar.log_path
    assert set(by_scorer(values, "trajectory")) == {t.agent_span_id for t in traces}
    # A trace not scored before a kill has all its records after the committed offset: it is assembled whole.
    whole = {v["spanId"] for v in values if v["scorerId"] == "trajectory" and v["score"] == 1.0}
    assert whole == {t.agent_span_id for t in traces}
    assert sample(metrics, "scoring_sidecar_traces_ready_total", {"reason": "max_wait"}) == 0
    assert sample(metrics, "scoring_sidecar_traces_ready_total", {"reason": "evicted"}) == 0
    assert await committed_total(kafka_bootstrap, group, spans, 1) == len(records)
    assert b"backpressure: paused" in sidecar.log_path.read_bytes()  # the buffer bound was reached


@pytest.mark.slow
async def test_a_full_buffer_of_open_traces_scores_the_oldest_instead_of_stalling(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """More traces open at once than the buffer holds: intake pauses with every buffered trace waiting for
    spans behind the pause. After idle_s of that, the oldest trace is taken out (one holding its agent span
    first: its run is whole), with a warning that says what to raise. A trace taken out before its agent span
    arrived makes no run: its later spans start it anew, and its run says it is incomplete. Every trace is
    scored once, every record committed, and nothing waits for max_wait_s."""
    scorers = [
        {"id": "trajectory", "kind": "trajectory", "options": {"expectedTrajectory": list(TOOLS)}, "targets": TRACE}
    ]
    sidecar, spans, scores, _, group = await sidecar_on(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server,
        scorers=scorers, trace_buffer={"idle_s": 0.5, "max_wait_s": 60, "max_traces": 3}, partitions=1,
        kafka={"max_poll_records": 1},  # the bound is checked between polls: one record per poll here
    )  # fmt: skip
    traces = [genai_agent_with_three_tools() for _ in range(6)]
    records = interleaved(traces)
    await produce_records(kafka_bootstrap, spans, records)
    sidecar.start()
    try:
        await sidecar.wait_ready()
        found = await read_topic(kafka_bootstrap, scores, expect=len(traces), timeout_s=40)
        await asyncio.sleep(1.0)
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    values = by_scorer(score_values(found), "trajectory")
    assert set(values) == {t.agent_span_id for t in traces} and len(found) == len(traces)
    incomplete = [v["metadata"]["trace"] for v in values.values() if not v["metadata"]["trace"]["complete"]]
    assert incomplete and all(t["toolCalls"] < 3 for t in incomplete)  # they lack the spans taken out
    assert sample(metrics, "scoring_sidecar_traces_ready_total", {"reason": "evicted"}) >= 1
    assert sample(metrics, "scoring_sidecar_traces_ready_total", {"reason": "max_wait"}) == 0
    log = sidecar.log_path.read_text()
    assert "trace buffer full (3 traces" in log and "raise max_traces/max_bytes" in log
    assert log.count("trace buffer full") == 1  # once a minute at most
    assert await committed_total(kafka_bootstrap, group, spans, 1) == len(records)


@pytest.mark.slow
async def test_sampled_out_traces_are_counted_per_scorer_whether_or_not_another_scorer_buffers_them(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """Sampling is by trace id. A trace sampled in by one trace-scope scorer is buffered and the others count
    it as sampled out when it is assembled; a trace every trace-scope scorer samples out is never buffered,
    and is counted as sampled out all the same: scored + sampled out = the agent spans, per scorer."""
    options = {"expectedTrajectory": list(TOOLS)}
    rates = {"few": 0.3, "more": 0.6}
    scorers = [
        {"id": scorer, "kind": "trajectory", "options": options, "sampling": rate, "targets": TRACE}
        for scorer, rate in rates.items()
    ]
    # Every record decoded, so that each sampled-out agent span is counted (with key sampling, a record that
    # every scorer samples out is counted as one record, undecoded: tests/test_key_sampling.py).
    sidecar, spans, scores, _, group = await sidecar_on(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server,
        scorers=scorers, trace_buffer={"idle_s": 0.5, "max_wait_s": 30}, partitions=1,
        kafka={"key_sampling": False},
    )  # fmt: skip
    traces = [genai_agent_with_three_tools() for _ in range(60)]
    kept = {
        scorer: {t.agent_span_id for t in traces if sample_score(bytes.fromhex(t.trace_id)) < rate}
        for scorer, rate in rates.items()
    }
    assert 0 < len(kept["few"]) < len(kept["more"]) < len(traces)  # both paths are taken
    records = interleaved(traces)
    sidecar.start()
    try:
        await sidecar.wait_ready()
        await produce_records(kafka_bootstrap, spans, records)
        found = await read_topic(kafka_bootstrap, scores, expect=sum(map(len, kept.values())), timeout_s=60)
        await asyncio.sleep(1.0)  # a checkpoint
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    values = score_values(found)
    for scorer in rates:
        assert set(by_scorer(values, scorer)) == kept[scorer]
        runs = {"scorer": scorer}
        assert sample(metrics, "scoring_sidecar_scorer_runs_total", {**runs, "outcome": "scored"}) == len(kept[scorer])
        sampled_out = sample(metrics, "scoring_sidecar_scorer_runs_total", {**runs, "outcome": "sampled_out"})
        assert sampled_out == len(traces) - len(kept[scorer]), scorer
    assert await committed_total(kafka_bootstrap, group, spans, 1) == len(records)
