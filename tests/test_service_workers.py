"""``runtime.workers: 2``: one supervisor, two worker processes in the consumer group, one ``/metrics``.

All real on loopback: the broker, the judge server, ``scoring-sidecar run`` as a subprocess whose
workers are processes of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.sidecar_process import SidecarProcess, committed_total, produce_traces, read_topic, score_values
from tests.test_service_e2e import backlog, sample, sidecar_for

PARTITIONS = 4


def worker_pids(sidecar: SidecarProcess) -> list[int]:
    assert sidecar.process is not None
    pid = sidecar.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(int(child) for child in children)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


async def gone(pids: list[int], timeout_s: float) -> bool:
    """Whether every process in ``pids`` has exited within ``timeout_s`` (polled: they are not our children)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        await asyncio.sleep(0.1)
    return False


def by_worker(text: str, name: str, labels: dict[str, str]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for worker in ("0", "1"):
        totals[worker] = sample(text, name, {**labels, "worker": worker})
    return totals


async def scored_ids(bootstrap: str, topic: str, expect: int) -> set[str]:
    records = await read_topic(bootstrap, topic, expect=expect, timeout_s=60)
    return {v["scoreId"] for v in score_values(records)}


@pytest.mark.slow
async def test_two_workers_share_the_group_serve_one_metrics_endpoint_and_survive_a_killed_worker(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge_server.reset(heuristic_reply)
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 40, seed=21, partitions=PARTITIONS)
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=group,
        judge={"max_concurrency": 8},
        runtime={"workers": 2},
    )
    sidecar.start()
    try:
        await sidecar.wait_ready(60)
        pids = worker_pids(sidecar)
        assert len(pids) == 2
        assert len(await scored_ids(kafka_bootstrap, scores, 2 * len(traces))) == 2 * len(traces)
        await asyncio.sleep(1.0)  # a checkpoint in each worker
        text = await sidecar.metrics_text()

        # One endpoint, both workers' series, each labelled; the pool's own gauges.
        runs = by_worker(text, "scoring_sidecar_scorer_runs_total", {"outcome": "scored"})
        assert sum(runs.values()) == 2 * len(traces)
        assert all(n > 0 for n in runs.values()), f"a worker scored nothing: {runs}"  # Kafka spread the partitions
        assert sample(text, "scoring_sidecar_workers", {}) == 2
        assert by_worker(text, "scoring_sidecar_worker_up", {}) == {"0": 1.0, "1": 1.0}
        # OpenMetrics (what Prometheus asks for) keeps the workers' exemplars: trace ids on score observations.
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                sidecar.metrics_url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            ) as response,
        ):
            openmetrics = await response.text()
        exemplars = {
            s.exemplar.labels["trace_id"]
            for family in openmetrics_families(openmetrics)
            for s in family.samples
            if s.exemplar is not None and s.name == "scoring_sidecar_scorer_runs_total"
        }
        assert exemplars and exemplars <= {t.trace_id for t in traces}

        # A worker killed with SIGKILL is restarted; it rejoins the group and nothing is lost.
        os.kill(pids[0], signal.SIGKILL)
        more = list(TrafficGenerator(seed=22).traces(30))
        await produce_traces(kafka_bootstrap, spans, more)
        expected = 2 * (len(traces) + len(more))
        deadline = time.monotonic() + 120
        ids: set[str] = set()
        while len(ids) < expected and time.monotonic() < deadline:
            ids = await scored_ids(kafka_bootstrap, scores, expected)
        assert len(ids) == expected
        await sidecar.wait_ready(60)
        new_pids = worker_pids(sidecar)
        assert pids[1] in new_pids and pids[0] not in new_pids and len(new_pids) == 2
        text = await sidecar.metrics_text()
        restarts = by_worker(text, "scoring_sidecar_worker_restarts_total", {})
        assert sorted(restarts.values()) == [0.0, 1.0]
        await asyncio.sleep(1.0)
        assert sidecar.terminate(60) == 0
        assert not any(alive(pid) for pid in new_pids)
    finally:
        sidecar.kill()
    assert await committed_total(kafka_bootstrap, group, spans, PARTITIONS) == len(traces) + len(more)
    log = sidecar.log_path.read_text()
    assert "worker=0 " in log and "worker=1 " in log  # each worker's lines say which it is
    assert "restarting in" in log


@pytest.mark.slow
async def test_workers_stop_when_their_supervisor_is_killed(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge_server.reset(heuristic_reply)
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 10, seed=23, partitions=PARTITIONS)
    group = unique_name("group")
    sidecar = sidecar_for(tmp_path, (spans, scores, dead), judge_server, bootstrap=kafka_bootstrap, group=group)
    sidecar.args = ("--workers", "2")  # the command line overrides runtime.workers (1 in this config)
    sidecar.start()
    try:
        await sidecar.wait_ready(60)
        pids = worker_pids(sidecar)
        assert len(pids) == 2
        assert len(await scored_ids(kafka_bootstrap, scores, 2 * len(traces))) == 2 * len(traces)
        sidecar.kill()
        assert await gone(pids, 30), "orphaned workers outlived their supervisor"
    finally:
        sidecar.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    # They stopped the clean way (drain, commit), not killed: everything scored was committed.
    assert await committed_total(kafka_bootstrap, group, spans, PARTITIONS) == len(traces)


@pytest.mark.slow
async def test_sigusr1_to_the_supervisor_resumes_every_workers_paused_judge(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    # The judge refuses the key (401) until the operator fixes it; then it answers.
    fixed = False

    def judge(body: dict[str, Any]) -> Reply:
        return heuristic_reply(body) if fixed else Reply.error(401, "Incorrect API key provided")

    judge_server.reset(judge)
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 24, seed=25, partitions=PARTITIONS)
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path, (spans, scores, dead), judge_server, bootstrap=kafka_bootstrap, group=group, runtime={"workers": 2}
    )
    sidecar.start()
    try:
        # Both workers meet the 401 and pause their judge (they are not ready meanwhile: runs are held).
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                text = await sidecar.metrics_text()
                paused = by_worker(text, "scoring_sidecar_judge_state", {"state": "paused"})
                if paused == {"0": 1.0, "1": 1.0}:
                    break
            assert time.monotonic() < deadline, "both workers' judges never paused"
            await asyncio.sleep(0.5)
        pids = worker_pids(sidecar)
        reasons = by_worker(text, "scoring_sidecar_judge_pause_reason", {"reason": "authentication"})
        assert reasons == {"0": 1.0, "1": 1.0}
        assert sum(by_worker(text, "scoring_sidecar_judge_pause_reason", {}).values()) == 2  # that reason only
        # Held: no call reaches the judge while paused (the re-check is 300 s away).
        calls = len(judge_server.requests)
        await asyncio.sleep(2.0)
        assert len(judge_server.requests) == calls
        assert await committed_total(kafka_bootstrap, group, spans, PARTITIONS) < len(traces)

        # The operator fixes the key and signals the supervisor only (kill -USR1 <pid>).
        fixed = True
        assert sidecar.process is not None
        os.kill(sidecar.process.pid, signal.SIGUSR1)
        assert len(await scored_ids(kafka_bootstrap, scores, 2 * len(traces))) == 2 * len(traces)
        text = await sidecar.metrics_text()
        assert by_worker(text, "scoring_sidecar_judge_state", {"state": "closed"}) == {"0": 1.0, "1": 1.0}
        assert sum(by_worker(text, "scoring_sidecar_judge_pause_reason", {}).values()) == 0
        # Neither the supervisor nor a worker was ended by the signal.
        assert sidecar.process.poll() is None and worker_pids(sidecar) == pids
        await asyncio.sleep(1.0)  # a checkpoint in each worker
        assert sidecar.terminate(60) == 0
    finally:
        sidecar.kill()
    assert await committed_total(kafka_bootstrap, group, spans, PARTITIONS) == len(traces)
    log = sidecar.log_path.read_text()
    pauses = [line for line in log.splitlines() if "paused (authentication)" in line]
    assert len(pauses) == 2 and all("kill -USR1" in line for line in pauses)  # once per worker, saying how
    assert "supervisor: SIGUSR1: resuming the judges of workers 0,1" in log
    assert log.count("resumed by an operator (was paused)") == 2
    assert "Incorrect API key" in log and "SECRET" not in log
