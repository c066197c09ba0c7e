"""``scoring-sidecar run`` as a subprocess: all real on loopback (broker, judge server, OTLP receiver)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.s3 import S3Emulator
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    kill_mid_work,
    produce_traces,
    read_scores,
    read_topic,
    score_values,
    sidecar_config,
)
from tests.support.sidecar_process import (
    metric_sample as sample,
)

POISON = b"\x0a\xff\xff\xff\xff garbage that is not OTLP"


async def topics(new_topic: Callable[..., Any], partitions: int = 3) -> tuple[str, str, str]:
    return (
        await new_topic("spans", partitions=partitions),
        await new_topic("scores", partitions=1),
        await new_topic("dead", partitions=1),
    )


async def backlog(
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    count: int,
    *,
    seed: int,
    partitions: int = 3,
    poison: dict[int, bytes] | None = None,
) -> tuple[tuple[str, str, str], list[GeneratedTrace]]:
    """Fresh (spans, scores, dead-letter) topics and ``count`` generated traces already on the spans topic."""
    names = await topics(new_topic, partitions)
    traces = list(TrafficGenerator(seed=seed).traces(count))
    await produce_traces(kafka_bootstrap, names[0], traces, poison=poison)
    return names, traces


def sidecar_for(
    tmp_path: Path, topic_names: tuple[str, str, str], judge_server: JudgeServer, **config: Any
) -> SidecarProcess:
    """A sidecar on the given (spans, scores, dead-letter) topics, judged by the scripted server."""
    spans, scores, dead = topic_names
    settings = sidecar_config(
        spans_topic=spans, scores_topic=scores, dead_topic=dead, judge_url=judge_server.url,
        metrics_port=free_port(), **config,
    )  # fmt: skip
    return SidecarProcess(settings, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})


@pytest.mark.slow
async def test_scores_every_agent_span_exports_everywhere_and_stops_cleanly(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    otlp_receiver: OtlpReceiver,
) -> None:
    judge_server.reset(heuristic_reply)
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 30, seed=11, poison={15: POISON})
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=group,
        otlp_endpoint=otlp_receiver.endpoint("http/protobuf"),
    )
    sidecar.start()
    try:
        await sidecar.wait_ready()
        records = await read_topic(kafka_bootstrap, scores, expect=60)
        await asyncio.sleep(1.0)  # let a checkpoint commit and the OTLP batch go out
        metrics_text = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()

    values = score_values(records)
    ids = {v["scoreId"] for v in values}
    assert len(values) == len(ids) == 60  # N traces in → exactly N distinct score ids per scorer
    targets = {(t.trace_id, t.agent_span_id) for t in traces}
    for scorer in ("prompt-alignment", "similarity"):
        assert {(v["traceId"], v["spanId"]) for v in values if v["scorerId"] == scorer} == targets

    # Offsets: every record, the poison one included, is committed.
    assert await committed_total(kafka_bootstrap, group, spans, 3) == len(traces) + 1
    dead_letters = await read_topic(kafka_bootstrap, dead, expect=1, timeout_s=5)
    assert [dict(d.headers)["x-dead-letter-reason"] for d in dead_letters] == [b"decode_error"]

    # Score spans sit in the scored traces, under the scored spans.
    run_spans = [s for s in otlp_receiver.spans if s.name.startswith("scorer run:")]
    assert {(s.trace_id, s.parent_span_id) for s in run_spans} == targets
    assert len(run_spans) == 60

    # Prometheus: token and cost counters equal the judge records' sums.
    executions = [
        e for v in values for step in (v.get("judge") or {}).values() for e in step["executions"]
    ]  # fmt: skip
    for usage_key, token_type in (("inputTokens", "input"), ("outputTokens", "output")):
        expected = sum(e["usage"].get(usage_key, 0) for e in executions)
        assert expected > 0
        assert sample(metrics_text, "scoring_sidecar_judge_tokens_total", {"type": token_type}) == expected
    assert sample(metrics_text, "scoring_sidecar_scorer_runs_total", {"outcome": "scored"}) == 60
    assert sample(metrics_text, "scoring_sidecar_dead_letters_total", {"reason": "decode_error"}) == 1

    # The judge API key is nowhere: logs, metrics, score records, spans.
    exported = b"".join(s.span.SerializeToString() for s in otlp_receiver.spans)
    haystacks = [sidecar.log_path.read_bytes(), metrics_text.encode(), b"".join(r.value for r in records), exported]
    for haystack in haystacks:
        assert SECRET_KEY.encode() not in haystack and SECRET_KEY[:12].encode() not in haystack
    assert any(r.headers.get("Authorization") == f"Bearer {SECRET_KEY}" for r in judge_server.requests)


@pytest.mark.slow
async def test_kill_9_at_random_points_loses_no_score(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    async def slow_judge(body: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.02)
        return heuristic_reply(body)

    judge_server.reset(slow_judge)
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 240, seed=5)
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=group,
        judge={"max_concurrency": 8},
        runtime={"max_in_flight_runs": 16},
    )
    try:
        await kill_mid_work(sidecar, random.Random(1))
        records = await read_scores(kafka_bootstrap, scores, score_ids=2 * len(traces), timeout_s=120)
        await asyncio.sleep(0.5)  # the last checkpoint
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    values = score_values(records)
    ids = {v["scoreId"] for v in values}
    assert len(ids) == 2 * len(traces), f"{len(ids)} distinct of {2 * len(traces)}; log: {sidecar.log_path}"
    targets = {(t.trace_id, t.agent_span_id) for t in traces}
    assert {(v["traceId"], v["spanId"]) for v in values if v["scorerId"] == "prompt-alignment"} == targets
    # Redelivered runs carry the same score id and the same content.
    first: dict[str, dict[str, Any]] = {}
    for v in values:
        if v["scoreId"] in first:
            assert first[v["scoreId"]]["score"] == v["score"]
        first.setdefault(v["scoreId"], v)
    committed = await committed_total(kafka_bootstrap, group, spans, 3)
    assert committed == len(traces), sidecar.log_path.read_text()[-6000:]


@pytest.mark.slow
async def test_judge_faults_are_counted_and_nothing_is_lost(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    rng = random.Random(3)

    async def faulty(body: dict[str, Any]) -> Reply:
        roll = rng.random()
        if roll < 0.2:
            return Reply.error(429, "rate limited", retry_after=0.05)
        if roll < 0.3:
            return Reply.error(500, "boom")
        if roll < 0.35:
            return Reply(content="{}", delay_s=3.0)  # beyond the 1 s timeout
        if roll < 0.45:
            return Reply(content="I refuse to answer in JSON.")
        return heuristic_reply(body)

    judge_server.reset(faulty)
    poison = {7: POISON, 30: b"{not json either"}
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 40, seed=8, partitions=2, poison=poison)
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=unique_name("group"),
        judge={"timeout_s": 1, "max_retries": 2, "circuit_breaker": {"failure_threshold": 1000}},
        scorers=[{"id": "prompt-alignment", "kind": "prompt-alignment", "judge": "default"}],
    )
    sidecar.start()
    try:
        await sidecar.wait_ready()
        deadline = asyncio.get_running_loop().time() + 90
        text = ""
        while asyncio.get_running_loop().time() < deadline:
            text = await sidecar.metrics_text()
            finished = sum(
                sample(text, "scoring_sidecar_scorer_runs_total", {"outcome": o})
                for o in ("scored", "failed", "not_scorable", "shed")
            )
            if finished >= len(traces):
                break
            await asyncio.sleep(0.5)
        assert sidecar.process is not None and sidecar.process.poll() is None  # no crash
        records = await read_topic(kafka_bootstrap, scores, expect=1, timeout_s=10)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    scored = sample(text, "scoring_sidecar_scorer_runs_total", {"outcome": "scored"})
    failed = sample(text, "scoring_sidecar_scorer_runs_total", {"outcome": "failed"})
    assert scored + failed == len(traces)  # every eligible span ends scored or failed, none vanish
    assert scored >= 1 and len({json.loads(r.value)["scoreId"] for r in records}) == scored
    assert sample(text, "scoring_sidecar_judge_calls_total", {"outcome": "rate_limited"}) > 0
    assert sample(text, "scoring_sidecar_judge_calls_total", {"outcome": "error"}) > 0
    assert sample(text, "scoring_sidecar_judge_calls_total", {"outcome": "timeout"}) > 0
    assert sample(text, "scoring_sidecar_judge_calls_total", {"outcome": "invalid_output"}) > 0
    assert sample(text, "scoring_sidecar_dead_letters_total", {"reason": "decode_error"}) == 2


@pytest.mark.slow
async def test_broker_restart_mid_stream_loses_nothing(
    tmp_path: Path,
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    s3_emulator: S3Emulator,
) -> None:
    judge_server.reset(heuristic_reply)
    bucket = unique_name("tansu").lower()
    s3_emulator.create_bucket(bucket)
    broker = EmbeddedBroker(port=free_port(), storage_engine=f"s3://{bucket}/", env=s3_emulator.broker_env())
    await broker.start_async()
    bootstrap = broker.bootstrap_servers
    spans, scores, dead = "spans", "scores", "dead"
    await create_topics(bootstrap, {spans: 2, scores: 1, dead: 1})
    generator = TrafficGenerator(seed=21)
    before, after = list(generator.traces(20)), list(generator.traces(20))
    await produce_traces(bootstrap, spans, before)
    sidecar = sidecar_for(
        tmp_path, (spans, scores, dead), judge_server, bootstrap=bootstrap, group=unique_name("group")
    )
    sidecar.start()
    try:
        await sidecar.wait_ready()
        await read_topic(bootstrap, scores, expect=10, timeout_s=30)
        await broker.stop_async(timeout_s=2)  # mid-stream: scores and commits in flight
        await asyncio.sleep(2)
        await broker.start_async()
        await produce_traces(bootstrap, spans, after)
        expected = 2 * (len(before) + len(after))
        ids: set[str] = set()
        deadline = asyncio.get_running_loop().time() + 90
        while len(ids) < expected and asyncio.get_running_loop().time() < deadline:
            records = await read_topic(bootstrap, scores, expect=expected, timeout_s=5)
            ids = {json.loads(r.value)["scoreId"] for r in records}
        assert sidecar.process is not None and sidecar.process.poll() is None  # survived the outage
        assert len(ids) == expected, sidecar.log_path.read_text()[-4000:]
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
        await broker.stop_async(timeout_s=2)


async def readyz(sidecar: SidecarProcess) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(sidecar.metrics_url + "/readyz") as response:
        return response.status, await response.text()


async def poll_readyz(sidecar: SidecarProcess, status: int, containing: str = "", timeout_s: float = 30) -> str:
    deadline = asyncio.get_running_loop().time() + timeout_s
    seen: tuple[int, str] = (0, "")
    while asyncio.get_running_loop().time() < deadline:
        assert sidecar.process is not None and sidecar.process.poll() is None, sidecar.log_path.read_text()
        with contextlib.suppress(aiohttp.ClientError):
            seen = await readyz(sidecar)
            if seen[0] == status and containing in seen[1]:
                return seen[1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"/readyz never answered {status} in {timeout_s}s (last: {seen})")


@pytest.mark.slow
async def test_an_exporter_outage_makes_the_sidecar_unready_and_commits_nothing_until_it_recovers(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    otlp_receiver: OtlpReceiver,
) -> None:
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 10, seed=5)
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=group,
        otlp_endpoint=otlp_receiver.endpoint("http/protobuf"),
        scorers=[{"id": "similarity", "kind": "content-similarity"}],
    )
    sidecar.config["exporters"]["otlp"]["timeout_s"] = 1
    # Down (a 503 that lasts): a 400 is no outage under the one rule for refusals (dropped and set aside, commits go on:
    # tests/test_backends_e2e.py), so the outage is what a receiver that is down answers.
    otlp_receiver.fail(http_status=503)
    sidecar.start()
    try:
        await poll_readyz(sidecar, 503, containing="exporter not confirming exports: otlp")
        await read_topic(kafka_bootstrap, scores, expect=10)  # the other exporters work on
        assert await committed_total(kafka_bootstrap, group, spans, 3) == 0  # nothing past an unexported span
        failing = await sidecar.metrics_text()
        assert sample(failing, "scoring_sidecar_exporter_up", {"exporter": "otlp"}) == 0
        assert sample(failing, "scoring_sidecar_exporter_up", {"exporter": "kafka_scores"}) == 1
        assert sample(failing, "scoring_sidecar_exporter_flush_failures_total", {"exporter": "otlp"}) >= 3
        assert sample(failing, "scoring_sidecar_exporter_pending_items", {"exporter": "otlp"}) == 10  # held

        otlp_receiver.recover()
        await poll_readyz(sidecar, 200)
        for _ in range(100):
            if await committed_total(kafka_bootstrap, group, spans, 3) == len(traces):
                break
            await asyncio.sleep(0.1)
        assert await committed_total(kafka_bootstrap, group, spans, 3) == len(traces)
        recovered = await sidecar.metrics_text()
        assert sample(recovered, "scoring_sidecar_exporter_up", {"exporter": "otlp"}) == 1
        assert sample(recovered, "scoring_sidecar_exporter_pending_items", {"exporter": "otlp"}) == 0
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    run_spans = [s for s in otlp_receiver.spans if s.name.startswith("scorer run:")]
    assert {(s.trace_id, s.parent_span_id) for s in run_spans} == {(t.trace_id, t.agent_span_id) for t in traces}


@pytest.mark.slow
async def test_a_traces_only_receiver_costs_one_error_line_not_the_commits(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    traces_only_receiver: OtlpReceiver,
) -> None:
    """Tempo, Jaeger, Phoenix, Langfuse take no OTLP logs (HTTP 404 here). With the evaluation log records
    asked for anyway: the exporter stays up, /readyz 200, every offset committed, one ERROR line that names
    the endpoint and the key; the scores' spans all arrive."""
    judge_server.reset(heuristic_reply)
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 12, seed=19)
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=group,
        otlp_endpoint=traces_only_receiver.endpoint("http/protobuf"),
    )
    sidecar.config["exporters"]["otlp"]["events"] = "both"
    sidecar.start()
    try:
        await sidecar.wait_ready()
        for _ in range(150):
            if await committed_total(kafka_bootstrap, group, spans, 3) == len(traces):
                break
            await asyncio.sleep(0.2)
        assert await committed_total(kafka_bootstrap, group, spans, 3) == len(traces)
        await poll_readyz(sidecar, 200)
        metrics = await sidecar.metrics_text()
        assert sample(metrics, "scoring_sidecar_exporter_up", {"exporter": "otlp"}) == 1
        assert sample(metrics, "scoring_sidecar_exporter_pending_items", {"exporter": "otlp"}) == 0
        assert sample(metrics, "scoring_sidecar_exporter_signal_disabled", {"exporter": "otlp", "signal": "logs"}) == 1
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    errors = [line for line in sidecar.log_path.read_text().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
    assert "no logs signal" in errors[0] and "exporters.otlp.events" in errors[0]
    assert traces_only_receiver.endpoint("http/protobuf") in errors[0]
    run_spans = [s for s in traces_only_receiver.spans if s.name.startswith("scorer run:")]
    assert {(s.trace_id, s.parent_span_id) for s in run_spans} == {(t.trace_id, t.agent_span_id) for t in traces}
    assert traces_only_receiver.logs == [] and traces_only_receiver.refused_logs >= 1


@pytest.mark.slow
async def test_a_receiver_refusing_the_traces_blocks_commits_and_readyz_says_which_key_to_change(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    otlp_receiver: OtlpReceiver,
) -> None:
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 6, seed=23)
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=group,
        otlp_endpoint=otlp_receiver.endpoint("http/protobuf"),
        scorers=[{"id": "similarity", "kind": "content-similarity"}],
    )
    otlp_receiver.fail(http_status=401)
    sidecar.start()
    try:
        reason = await poll_readyz(sidecar, 503, containing="check exporters.otlp.headers")
        assert "otlp: traces refused: HTTP 401" in reason
        await poll_readyz(sidecar, 503, containing="exporter not confirming exports: otlp")
        assert await committed_total(kafka_bootstrap, group, spans, 3) == 0
        otlp_receiver.recover()
        await poll_readyz(sidecar, 200)
        for _ in range(100):
            if await committed_total(kafka_bootstrap, group, spans, 3) == len(traces):
                break
            await asyncio.sleep(0.1)
        assert await committed_total(kafka_bootstrap, group, spans, 3) == len(traces)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    refusals = [line for line in sidecar.log_path.read_text().splitlines() if "ERROR exporters.otlp" in line]
    assert len(refusals) == 1 and "refuses traces" in refusals[0], refusals
