"""``scoring-sidecar run`` as a subprocess with a real Phoenix on loopback (tests/support/phoenix.py): traces
reach Phoenix over OTLP and the sidecar over Kafka (Tansu); scores come back as Phoenix span annotations and
as scorer-run spans in the agents' traces, read back through Phoenix's REST API."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY
from tests.support.phoenix import PhoenixServer, with_project
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    produce_traces,
    read_topic,
    score_values,
    sidecar_config,
)
from tests.test_service_e2e import poll_readyz, sample

SCORERS = ("prompt-alignment", "similarity")


def sidecar_with_phoenix(
    tmp_path: Path,
    topics: tuple[str, str, str],
    judge_server: JudgeServer,
    *,
    bootstrap: str,
    group: str,
    phoenix: dict[str, Any] | None = None,
    otlp: dict[str, Any] | None = None,
    **config: Any,
) -> SidecarProcess:
    spans, scores, dead = topics
    settings = sidecar_config(
        bootstrap=bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=group,
        judge_url=judge_server.url, metrics_port=free_port(), **config,
    )  # fmt: skip
    exporters = settings["exporters"]
    exporters["otlp"] = otlp if otlp is not None else {"enabled": False}
    if phoenix is not None:
        exporters["phoenix"] = phoenix
    return SidecarProcess(settings, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})


async def fresh_topics(new_topic: Callable[..., Any], partitions: int) -> tuple[str, str, str]:
    return (
        await new_topic("spans", partitions=partitions),
        await new_topic("scores", partitions=1),
        await new_topic("dead", partitions=1),
    )


def project_traces(count: int, *, seed: int) -> tuple[str, list[GeneratedTrace]]:
    """``count`` traces of a project of their own (``openinference.project.name`` on their resource)."""
    project = f"agents-{uuid.uuid4().hex[:8]}"
    traces = [
        GeneratedTrace(t.trace_id, t.agent_span_id, t.agent, t.quality, with_project(t.request, project))
        for t in TrafficGenerator(seed=seed, noise_spans=0).traces(count)
    ]
    return project, traces


async def annotations(phoenix: PhoenixServer, project: str, traces: list[GeneratedTrace]) -> list[dict[str, Any]]:
    return await phoenix.span_annotations(project, [t.agent_span_id for t in traces])


async def wait_for_annotations(
    phoenix: PhoenixServer, project: str, traces: list[GeneratedTrace], expected: int, timeout_s: float = 120
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = await annotations(phoenix, project, traces)
        if len(rows) >= expected:
            return rows
        await asyncio.sleep(0.5)
    raise AssertionError(f"{len(rows)} of {expected} annotations in Phoenix after {timeout_s} s")


async def wait_for_named_spans(
    phoenix: PhoenixServer, project: str, prefix: str, expected: int, timeout_s: float = 60
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        spans = await phoenix.spans(project)
        if sum(1 for s in spans if s["name"].startswith(prefix)) >= expected:
            return spans
        await asyncio.sleep(0.5)
    raise AssertionError(f"fewer than {expected} {prefix!r} spans in {project!r} after {timeout_s} s: {spans[:3]}")


async def wait_committed(bootstrap: str, group: str, topic: str, partitions: int, expected: int) -> int:
    committed = 0
    for _ in range(200):
        committed = await committed_total(bootstrap, group, topic, partitions)
        if committed >= expected:
            break
        await asyncio.sleep(0.2)
    return committed


# --- issue: scores as Phoenix annotations -------------------------------------------------------------------


@pytest.mark.slow
async def test_scores_land_as_annotations_and_a_kill_9_mid_backlog_leaves_one_per_span_and_scorer(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    phoenix: PhoenixServer,
) -> None:
    async def slow_judge(body: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.02)
        return heuristic_reply(body)

    judge_server.reset(slow_judge)
    project, traces = project_traces(60, seed=41)
    for trace in traces:
        await phoenix.send_traces(trace.request)
    await phoenix.wait_for_spans(project, 2 * len(traces))
    topics = await fresh_topics(new_topic, 2)
    await produce_traces(kafka_bootstrap, topics[0], traces)
    group = unique_name("group")
    sidecar = sidecar_with_phoenix(
        tmp_path, topics, judge_server, bootstrap=kafka_bootstrap, group=group,
        phoenix={"base_url": phoenix.url, "batch_size": 16},
        judge={"max_concurrency": 4}, runtime={"max_in_flight_runs": 8},
    )  # fmt: skip
    expected = len(SCORERS) * len(traces)
    try:
        sidecar.start()
        await sidecar.wait_ready()
        await wait_for_annotations(phoenix, project, traces, 10)  # mid-backlog
        sidecar.kill()
        before = len(await annotations(phoenix, project, traces))
        assert before < expected, "the backlog was done before the kill: nothing tested"
        sidecar.start()
        await sidecar.wait_ready()
        rows = await wait_for_annotations(phoenix, project, traces, expected)
        assert await wait_committed(kafka_bootstrap, group, topics[0], 2, len(traces)) == len(traces)
        records = await read_topic(kafka_bootstrap, topics[1], expect=expected)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()

    await asyncio.sleep(1)  # nothing more arrives after the stop
    rows = await annotations(phoenix, project, traces)
    pairs = [(row["span_id"], row["name"]) for row in rows]
    assert len(pairs) == len(set(pairs)) == expected  # exactly one per (span, scorer), redeliveries included
    assert {span for span, _ in pairs} == {t.agent_span_id for t in traces}
    by_score_id = {v["scoreId"]: v for v in score_values(records)}
    for row in rows:
        record = by_score_id[row["identifier"]]  # the annotation is the Kafka record's score
        assert (row["span_id"], row["name"]) == (record["spanId"], record["scorerId"])
        assert row["result"]["score"] == pytest.approx(record["score"])
        assert row["result"]["explanation"] == record["reason"]
        assert row["annotator_kind"] == ("LLM" if record["scorerId"] == "prompt-alignment" else "CODE")
        assert row["metadata"]["score_id"] == record["scoreId"]
        assert row["metadata"]["scorer_fingerprint"] == record["metadata"]["scorerFingerprint"]
    assert SECRET_KEY not in sidecar.log_path.read_text()


@pytest.mark.slow
async def test_phoenix_stopped_mid_stream_loses_nothing_and_commits_nothing_past_an_unexported_score(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    phoenix: PhoenixServer,
) -> None:
    judge_server.reset(heuristic_reply)
    project, traces = project_traces(40, seed=42)
    first, second = traces[:20], traces[20:]
    for trace in first:
        await phoenix.send_traces(trace.request)
    await phoenix.wait_for_spans(project, 2 * len(first))
    topics = await fresh_topics(new_topic, 1)  # one partition: the committed offset is a prefix of `traces`
    group = unique_name("group")
    sidecar = sidecar_with_phoenix(
        tmp_path, topics, judge_server, bootstrap=kafka_bootstrap, group=group,
        phoenix={"base_url": phoenix.url, "timeout_s": 2},
    )  # fmt: skip
    try:
        await produce_traces(kafka_bootstrap, topics[0], first)
        sidecar.start()
        await sidecar.wait_ready()
        await wait_for_annotations(phoenix, project, first, 2 * len(first))
        assert await wait_committed(kafka_bootstrap, group, topics[0], 1, len(first)) == len(first)

        stopped_at = datetime.now().astimezone()
        phoenix.stop()
        outage_started = time.monotonic()
        await produce_traces(kafka_bootstrap, topics[0], second)  # scored while Phoenix is down
        await poll_readyz(sidecar, 503, containing="phoenix", timeout_s=30)
        committed_during: list[int] = []
        while time.monotonic() - outage_started < 20:
            committed_during.append(await committed_total(kafka_bootstrap, group, topics[0], 1))
            await asyncio.sleep(1)
        down = await sidecar.metrics_text()
        assert sample(down, "scoring_sidecar_exporter_up", {"exporter": "phoenix"}) == 0
        assert sample(down, "scoring_sidecar_exporter_up", {"exporter": "kafka_scores"}) == 1
        assert sample(down, "scoring_sidecar_exporter_flush_failures_total", {"exporter": "phoenix"}) >= 3
        assert sample(down, "scoring_sidecar_exporter_pending_items", {"exporter": "phoenix"}) == 2 * len(second)
        assert max(committed_during) == len(first)  # nothing committed past an unexported score

        await phoenix.start()  # same database, same ports
        for trace in second:  # what the Collector's retry does once Phoenix is back
            await phoenix.send_traces(trace.request)
        rows = await wait_for_annotations(phoenix, project, traces, 2 * len(traces))
        await poll_readyz(sidecar, 200, timeout_s=60)
        assert await wait_committed(kafka_bootstrap, group, topics[0], 1, len(traces)) == len(traces)
        up = await sidecar.metrics_text()
        assert sample(up, "scoring_sidecar_exporter_up", {"exporter": "phoenix"}) == 1
        assert sample(up, "scoring_sidecar_exporter_pending_items", {"exporter": "phoenix"}) == 0
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
        if not phoenix.running:
            await phoenix.start()
    pairs = {(row["span_id"], row["name"]) for row in rows}
    assert pairs == {(t.agent_span_id, s) for t in traces for s in SCORERS}  # nothing lost
    # The annotations of the records committed during the outage were stored before Phoenix stopped.
    for row in rows:
        if row["span_id"] in {t.agent_span_id for t in first}:
            assert datetime.fromisoformat(row["created_at"]) < stopped_at
    log = sidecar.log_path.read_text()
    assert re.search(r"WARNING exporters\.phoenix .*annotations not stored in Phoenix", log), log[-3000:]


# --- issue: scorer spans in every OTLP backend, by default --------------------------------------------------


@pytest.mark.parametrize(
    ("protocol", "events"),
    [("http/protobuf", None), ("grpc", None), ("http/protobuf", "log"), ("grpc", "both")],
    ids=["http-defaults", "grpc-defaults", "http-with-logs", "grpc-with-logs"],
)
@pytest.mark.slow
async def test_scores_reach_phoenix_over_otlp_with_defaults_in_the_agents_project_whatever_arrives_first(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    phoenix: PhoenixServer,
    protocol: str,
    events: str | None,
) -> None:
    """The defaults of exporters.otlp against Phoenix (which takes no OTLP logs): the exporter is up,
    /readyz 200, offsets committed. The agents' spans reach Phoenix only after the scores: the scores' spans
    carry the agents' project all the same, so the whole trace is in it, none in `default`. Asking for the
    log records anyway costs one ERROR line, not the commits."""
    judge_server.reset(heuristic_reply)
    project, traces = project_traces(6, seed=43)
    topics = await fresh_topics(new_topic, 1)
    await produce_traces(kafka_bootstrap, topics[0], traces)
    group = unique_name("group")
    endpoint = phoenix.url if protocol == "http/protobuf" else phoenix.grpc_endpoint
    otlp: dict[str, Any] = {"endpoint": endpoint, "protocol": protocol}
    if events is not None:
        otlp["events"] = events
    sidecar = sidecar_with_phoenix(
        tmp_path, topics, judge_server, bootstrap=kafka_bootstrap, group=group, otlp=otlp
    )  # fmt: skip
    try:
        sidecar.start()
        await sidecar.wait_ready()
        assert await wait_committed(kafka_bootstrap, group, topics[0], 1, len(traces)) == len(traces)
        scores_only = await wait_for_named_spans(phoenix, project, "scorer run:", len(SCORERS) * len(traces))
        await poll_readyz(sidecar, 200)
        metrics = await sidecar.metrics_text()
        assert sample(metrics, "scoring_sidecar_exporter_up", {"exporter": "otlp"}) == 1
        assert sample(metrics, "scoring_sidecar_exporter_flush_failures_total", {"exporter": "otlp"}) == 0
        disabled = sample(metrics, "scoring_sidecar_exporter_signal_disabled", {"exporter": "otlp", "signal": "logs"})
        assert disabled == (1 if events else 0)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    # Only the sidecar's spans so far (scorer runs, their judge calls): the agents' are not there yet.
    assert {s["name"] for s in scores_only} == {f"scorer run: '{s}'" for s in SCORERS} | {"chat gpt-4o-mini"}

    for trace in traces:  # the agents' spans arrive late
        await phoenix.send_traces(trace.request)
    spans = await wait_for_named_spans(phoenix, project, "invoke_agent", len(traces))
    runs = [s for s in spans if s["name"].startswith("scorer run:")]
    assert {(s["context"]["trace_id"], s["parent_id"]) for s in runs} == {(t.trace_id, t.agent_span_id) for t in traces}
    assert {s["span_kind"] for s in runs} == {"EVALUATOR"}
    assert all(isinstance(s["attributes"].get("gen_ai.evaluation.score.value"), float) for s in runs)
    if events != "log":  # the default and `both` put the evaluation on the spans (with `log`, only runs after
        # Phoenix said it has no logs do: tests/test_exporters_otlp.py)
        assert all(any(e["name"] == "gen_ai.evaluation.result" for e in s.get("events") or []) for s in runs)
    agent_spans = {s["context"]["span_id"] for s in spans if s["name"].startswith("invoke_agent")}
    assert agent_spans == {t.agent_span_id for t in traces}
    for trace in traces[:2]:  # and none of it in Phoenix's default project
        assert await phoenix.spans("default", trace_id=trace.trace_id) == []

    log = sidecar.log_path.read_text()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    if events:
        assert len(errors) == 1 and "no logs signal" in errors[0] and "exporters.otlp.events" in errors[0]
    else:
        assert errors == []
    assert json.dumps(SECRET_KEY) not in log
