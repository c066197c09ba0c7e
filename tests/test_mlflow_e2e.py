"""``scoring-sidecar run`` as a subprocess with a real MLflow tracking server on loopback (tests/support/mlflow.py):
the agents' spans reach MLflow over OTLP (``/v1/traces`` with ``x-mlflow-experiment-id``, as the Collector's
``otlphttp`` exporter sends them) and the sidecar over Kafka (Tansu); the scores come back as MLflow assessments,
read through MLflow's REST API. A kill -9 mid-backlog doubles none; MLflow down for 20 s loses none; a score for a
trace MLflow never receives ends on the score dead letters within ``trace_wait_s``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporters.mlflow import assessment_id
from sidecar.core import names
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY
from tests.support.mlflow import MlflowServer
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    produce_traces,
    read_topic,
    score_values,
    sidecar_config,
)
from tests.test_phoenix_e2e import wait_committed
from tests.test_service_e2e import poll_readyz, sample

SCORERS = ("prompt-alignment", "similarity")


def sidecar_with_mlflow(
    tmp_path: Path,
    topics: tuple[str, ...],
    judge_server: JudgeServer,
    *,
    bootstrap: str,
    group: str,
    mlflow: dict[str, Any],
    **config: Any,
) -> SidecarProcess:
    spans, scores, dead, *letters = topics
    settings = sidecar_config(
        bootstrap=bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=group,
        judge_url=judge_server.url, metrics_port=free_port(), **config,
    )  # fmt: skip
    settings["exporters"]["mlflow"] = mlflow
    if letters:
        settings["exporters"]["kafka_scores"]["dead_letter_topic"] = letters[0]
    return SidecarProcess(settings, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})


async def fresh_topics(new_topic: Callable[..., Any], partitions: int, *, letters: bool = False) -> tuple[str, ...]:
    topics = (
        await new_topic("spans", partitions=partitions),
        await new_topic("scores", partitions=1),
        await new_topic("dead", partitions=1),
    )
    return (*topics, await new_topic("score-letters", partitions=1)) if letters else topics


def traces(count: int, *, seed: int) -> list[GeneratedTrace]:
    return list(TrafficGenerator(seed=seed, noise_spans=0).traces(count))


async def send_to_mlflow(mlflow: MlflowServer, generated: list[GeneratedTrace], experiment_id: str) -> None:
    for trace in generated:
        await mlflow.send_traces(trace.request, experiment_id)
    await mlflow.wait_for_traces([t.trace_id for t in generated])


def assert_one_assessment_per_scorer_with_the_records_value(
    found: dict[str, list[dict[str, Any]]], generated: list[GeneratedTrace], records: list[Any]
) -> None:
    by_score_id = {v["scoreId"]: v for v in score_values(records)}
    for trace in generated:
        rows = found[trace.trace_id]
        assert sorted(row["assessment_name"] for row in rows) == sorted(SCORERS), rows  # one per scorer, no double
        for row in rows:
            record = by_score_id[row["metadata"]["score_id"]]
            assert row["assessment_id"] == assessment_id(record["scoreId"])
            assert (row["span_id"], row["assessment_name"]) == (record["spanId"], record["scorerId"])
            assert row["span_id"] == trace.agent_span_id
            assert row["feedback"]["value"] == pytest.approx(record["score"])
            # No reason: none on a create, an empty one after an update in place (a reason gone is cleared).
            assert (row.get("rationale") or None) == record["reason"] and row["valid"] is True
            kind = "LLM_JUDGE" if record["scorerId"] == "prompt-alignment" else "CODE"
            assert row["source"] == {"source_type": kind, "source_id": record["scorerId"]}
            assert row["metadata"]["scorer_fingerprint"] == record["metadata"]["scorerFingerprint"]


@pytest.mark.slow
async def test_every_scored_trace_has_one_assessment_per_scorer_and_a_kill_9_mid_backlog_doubles_none(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    mlflow: MlflowServer,
) -> None:
    async def slow_judge(body: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.05)
        return heuristic_reply(body)

    judge_server.reset(slow_judge)
    experiment_name = f"agents-{uuid.uuid4().hex[:8]}"
    generated = traces(40, seed=51)
    topics = await fresh_topics(new_topic, 2)
    group = unique_name("group")
    sidecar = sidecar_with_mlflow(
        tmp_path, topics, judge_server, bootstrap=kafka_bootstrap, group=group,
        mlflow={"tracking_uri": mlflow.url, "experiment_name": experiment_name, "batch_size": 8},
        judge={"max_concurrency": 4}, runtime={"max_in_flight_runs": 8},
    )  # fmt: skip
    expected = len(SCORERS) * len(generated)
    try:
        sidecar.start()
        await sidecar.wait_ready()
        # The sidecar made the experiment and named its id: where the Collector sends the agents' traces.
        experiment_id = None
        for _ in range(100):
            experiment_id = await mlflow.experiment_id(experiment_name)
            if experiment_id is not None:
                break
            await asyncio.sleep(0.1)
        assert experiment_id is not None
        await send_to_mlflow(mlflow, generated, experiment_id)
        await produce_traces(kafka_bootstrap, topics[0], generated)  # the backlog, once MLflow has the traces
        trace_ids = [t.trace_id for t in generated]
        await mlflow.wait_for_assessments(trace_ids, 10)  # mid-backlog
        sidecar.kill()
        before = sum([len(await mlflow.assessments(t)) for t in trace_ids])
        assert before < expected, "the backlog was done before the kill: nothing tested"
        sidecar.start()
        await sidecar.wait_ready()
        await mlflow.wait_for_assessments(trace_ids, expected)
        assert await wait_committed(kafka_bootstrap, group, topics[0], 2, len(generated)) == len(generated)
        records = await read_topic(kafka_bootstrap, topics[1], expect=expected)
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()

    await asyncio.sleep(1)  # nothing more arrives after the stop
    found = {t: await mlflow.assessments(t) for t in trace_ids}
    assert sum(len(rows) for rows in found.values()) == expected
    assert_one_assessment_per_scorer_with_the_records_value(found, generated, records)
    assert sample(metrics, "scoring_sidecar_exporter_dropped_total", {"exporter": "mlflow", "reason": "rejected"}) == 0
    log = sidecar.log_path.read_text()
    assert f"x-mlflow-experiment-id: {experiment_id}" in log
    assert SECRET_KEY not in log


@pytest.mark.slow
async def test_mlflow_down_for_20_s_loses_nothing_and_commits_nothing_past_an_unstored_assessment(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    mlflow: MlflowServer,
) -> None:
    judge_server.reset(heuristic_reply)
    experiment_id = await mlflow.experiment(f"agents-{uuid.uuid4().hex[:8]}")
    generated = traces(30, seed=52)
    first, second = generated[:15], generated[15:]
    await send_to_mlflow(mlflow, generated, experiment_id)
    topics = await fresh_topics(new_topic, 1)  # one partition: the committed offset is a prefix of `generated`
    group = unique_name("group")
    sidecar = sidecar_with_mlflow(
        tmp_path, topics, judge_server, bootstrap=kafka_bootstrap, group=group,
        mlflow={"tracking_uri": mlflow.url, "experiment_id": experiment_id, "timeout_s": 2},
    )  # fmt: skip
    try:
        await produce_traces(kafka_bootstrap, topics[0], first)
        sidecar.start()
        await sidecar.wait_ready()
        await mlflow.wait_for_assessments([t.trace_id for t in first], 2 * len(first))
        assert await wait_committed(kafka_bootstrap, group, topics[0], 1, len(first)) == len(first)

        mlflow.stop()
        outage_started = time.monotonic()
        await produce_traces(kafka_bootstrap, topics[0], second)  # scored while MLflow is down
        committed_during: list[int] = []
        while time.monotonic() - outage_started < 20:
            committed_during.append(await committed_total(kafka_bootstrap, group, topics[0], 1))
            await asyncio.sleep(1)
        down = await sidecar.metrics_text()
        assert sample(down, "scoring_sidecar_exporter_up", {"exporter": "mlflow"}) == 0
        assert sample(down, "scoring_sidecar_exporter_pending_items", {"exporter": "mlflow"}) == 2 * len(second)
        assert max(committed_during) == len(first)  # nothing committed past an unstored assessment

        await mlflow.start()  # the same database, the same port
        found = await mlflow.wait_for_assessments([t.trace_id for t in generated], 2 * len(generated))
        await poll_readyz(sidecar, 200, timeout_s=60)
        assert await wait_committed(kafka_bootstrap, group, topics[0], 1, len(generated)) == len(generated)
        up = await sidecar.metrics_text()
        assert sample(up, "scoring_sidecar_exporter_up", {"exporter": "mlflow"}) == 1
        assert sample(up, "scoring_sidecar_exporter_pending_items", {"exporter": "mlflow"}) == 0
        records = await read_topic(kafka_bootstrap, topics[1], expect=2 * len(generated))
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
        if not mlflow.running:
            await mlflow.start()
    assert_one_assessment_per_scorer_with_the_records_value(found, generated, records)  # nothing lost, none doubled


@pytest.mark.slow
async def test_a_score_for_a_trace_mlflow_never_receives_is_dead_lettered_within_trace_wait_s(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    mlflow: MlflowServer,
) -> None:
    judge_server.reset(heuristic_reply)
    experiment_id = await mlflow.experiment(f"agents-{uuid.uuid4().hex[:8]}")
    received, lost = traces(4, seed=53)[:3], traces(5, seed=54)[4:]
    await send_to_mlflow(mlflow, received, experiment_id)  # the Collector never sends `lost` to MLflow
    topics = await fresh_topics(new_topic, 1, letters=True)
    group = unique_name("group")
    sidecar = sidecar_with_mlflow(
        tmp_path, topics, judge_server, bootstrap=kafka_bootstrap, group=group,
        mlflow={"tracking_uri": mlflow.url, "experiment_id": experiment_id, "trace_wait_s": 3},
        scorers=[{"id": "similarity", "kind": "content-similarity"}],
    )  # fmt: skip
    try:
        await produce_traces(kafka_bootstrap, topics[0], [*lost, *received])
        started = time.monotonic()
        sidecar.start()
        await sidecar.wait_ready()
        [letter] = await read_topic(kafka_bootstrap, topics[3], expect=1, timeout_s=60)
        assert time.monotonic() - started < 3 + 30  # trace_wait_s, and the checkpoint that takes the drop
        assert await wait_committed(kafka_bootstrap, group, topics[0], 1, 4) == 4  # commits went on
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    headers = {k: bytes(v).decode() for k, v in letter.headers}
    assert (headers[names.DL_EXPORTER], headers[names.DL_REASON]) == ("mlflow", "trace_not_found")
    assert f"tr-{lost[0].trace_id}" in headers[names.DL_DETAIL]
    assert letter.key == lost[0].trace_id.encode()
    labels = {"exporter": "mlflow", "reason": "trace_not_found"}
    assert sample(metrics, "scoring_sidecar_exporter_dropped_total", labels) == 1
    for trace in received:
        assert [row["assessment_name"] for row in await mlflow.assessments(trace.trace_id)] == ["similarity"]
    log = sidecar.log_path.read_text()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "exporters.mlflow.trace_wait_s" in errors[0], errors
