"""Worker mode's stop deadline, through real processes: a supervisor SIGKILLed mid-backlog, a broker that
is gone, a worker whose event loop is stuck. Processes are looked up by command line (the test's own
config path), not only as the supervisor's children: orphans are not anyone's children.

``runtime.shutdown_timeout_s`` (S) bounds every stop: a worker exits within S of the stop (its own
watchdog ends it at S + STOP_GRACE_S), the supervisor kills what is left at S + STOP_GRACE_S +
KILL_MARGIN_S. docs/worker-lifecycle.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from sidecar.app.lifecycle import EXIT_STOP_OVERRUN
from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.sidecar_process import SidecarProcess, committed_total, produce_traces
from tests.test_service_e2e import backlog, sidecar_for
from tests.test_service_workers import alive, gone, worker_pids

PARTITIONS = 4
SCORERS = ("prompt-alignment", "similarity")


def sidecar_processes(sidecar: SidecarProcess) -> list[int]:
    """Every live process whose command line names this test's configuration file: the supervisor, its
    workers, and any worker of an earlier supervisor still running."""
    marker = str(sidecar.workdir / "sidecar.yaml").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in command and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_everything(sidecar: SidecarProcess) -> None:
    sidecar.kill()
    for pid in sidecar_processes(sidecar):
        os.kill(pid, signal.SIGKILL)


async def read_all(bootstrap: str, topic: str, *, quiet_s: float = 1.5) -> list[Any]:
    """Every record of ``topic``, read until none arrived for ``quiet_s``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest")
    await consumer.start()
    records: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or {0}])
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
                last = time.monotonic()
    finally:
        await consumer.stop()
    return records


def slow_heuristic(delay_s: float) -> Callable[[dict[str, Any]], Reply]:
    def reply(body: dict[str, Any]) -> Reply:
        return dataclasses.replace(heuristic_reply(body), delay_s=delay_s)

    return reply


@pytest.mark.slow
async def test_a_supervisor_sigkilled_three_times_mid_backlog_then_sigterm_leaves_nothing_behind(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    # A slow judge while the supervisor is killed: every kill is mid-backlog, with runs in flight. (Orphans
    # with nothing to drain leave together before the new workers join, which meets a Tansu bug:
    # docs/worker-lifecycle.md, "Tansu findings".)
    judge_server.reset(slow_heuristic(1.0))
    (spans, scores, dead), traces = await backlog(kafka_bootstrap, new_topic, 200, seed=41, partitions=PARTITIONS)
    expected = {(t.trace_id, s) for t in traces for s in SCORERS}
    group = unique_name("group")
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=group,
        judge={"max_concurrency": 8},
        runtime={"workers": 2, "shutdown_timeout_s": 6},
    )
    budget = 6
    scored_at_kills: list[int] = []
    orphans_gone_in: list[float] = []
    try:
        sidecar.start()
        for _ in range(3):
            await sidecar.wait_ready(120)
            await asyncio.sleep(1.0)
            workers = worker_pids(sidecar)
            assert len(workers) == 2
            done = {(v["traceId"], v["scorerId"]) for v in await scored(kafka_bootstrap, scores)}
            scored_at_kills.append(len(done))
            sidecar.kill()
            killed = time.monotonic()
            sidecar.start()  # at once, as an orchestrator does: the orphans stop beside the new workers
            # The orphaned workers stop on their own (drain, commit, leave) within the budget.
            assert await gone(workers, budget + 5), f"workers {workers} outlived their supervisor by {budget + 5} s"
            orphans_gone_in.append(time.monotonic() - killed)
        assert max(scored_at_kills) < len(expected), "a kill came after the backlog was done"

        judge_server.reset(heuristic_reply)  # the last supervisor drains the rest quickly
        await sidecar.wait_ready(120)
        deadline = time.monotonic() + 150
        values: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            values = await scored(kafka_bootstrap, scores)
            if {(v["traceId"], v["scorerId"]) for v in values} >= expected:
                break
        await asyncio.sleep(1.0)  # a checkpoint in each worker
        stopping = time.monotonic()
        assert sidecar.terminate(budget + 10) == 0
        stopped_in = time.monotonic() - stopping
        assert stopped_in <= budget + 5, f"SIGTERM took {stopped_in:.1f} s"
        await asyncio.sleep(15)
        assert sidecar_processes(sidecar) == [], "a process of the sidecar is still running 15 s after SIGTERM"
    finally:
        kill_everything(sidecar)
    # Every trace scored by every scorer; one score id per (trace, scorer), one value per score id.
    values = await scored(kafka_bootstrap, scores)
    print(
        f"scored at the kills {scored_at_kills}/{len(expected)}; orphans gone in",
        [round(t, 1) for t in orphans_gone_in],
        f"s; SIGTERM {stopped_in:.1f} s; {len(values)} score records for {len(expected)} score ids",
    )
    assert {(v["traceId"], v["scorerId"]) for v in values} == expected
    ids = {v["scoreId"]: (v["traceId"], v["scorerId"], v["score"]) for v in values}
    assert len(ids) == len(expected)
    assert all(ids[v["scoreId"]] == (v["traceId"], v["scorerId"], v["score"]) for v in values)
    assert await committed_total(kafka_bootstrap, group, spans, PARTITIONS) == len(traces)
    log = sidecar.log_path.read_text()
    assert "stop overran" not in log  # every stop ended by itself, within its budget
    assert "the supervisor (pid" in log and "is gone" in log


async def scored(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in await read_all(bootstrap, topic)]


@pytest.mark.slow
async def test_workers_of_a_sigkilled_supervisor_exit_in_time_while_the_broker_is_down(
    tmp_path: Path, unique_name: Callable[[str], str], judge_server: JudgeServer
) -> None:
    judge_server.reset(slow_heuristic(0.3))  # runs in flight when the broker goes
    broker = EmbeddedBroker()  # this test's own: it is stopped under the workers
    await broker.start_async()
    sidecar: SidecarProcess | None = None
    try:
        spans, scores, dead = (unique_name(t) for t in ("spans", "scores", "dead"))
        await create_topics(broker.bootstrap_servers, {spans: PARTITIONS, scores: 1, dead: 1})
        await produce_traces(broker.bootstrap_servers, spans, list(TrafficGenerator(seed=43).traces(300)))
        sidecar = sidecar_for(
            tmp_path,
            (spans, scores, dead),
            judge_server,
            bootstrap=broker.bootstrap_servers,
            group=unique_name("group"),
            judge={"max_concurrency": 8},
            runtime={"workers": 2, "shutdown_timeout_s": 6},
        )
        budget = 6
        sidecar.start()
        await sidecar.wait_ready(60)
        await asyncio.sleep(1.0)  # mid-backlog: runs in flight, scores not yet committed
        workers = worker_pids(sidecar)
        assert len(workers) == 2
        await broker.stop_async()
        await asyncio.sleep(1.0)  # the clients notice: connections refused from now on
        killed = time.monotonic()
        sidecar.kill()
        assert await gone(workers, budget + 5), f"workers outlived their supervisor by {budget + 5} s, broker down"
        gone_in = time.monotonic() - killed
        assert sidecar_processes(sidecar) == []
    finally:
        if sidecar is not None:
            kill_everything(sidecar)
        await broker.stop_async()
    print(f"workers gone {gone_in:.1f} s after the supervisor's SIGKILL, broker down (budget {budget} s)")
    log = sidecar.log_path.read_text()
    assert log.count("is gone (") == 2
    # Each worker gave up what the broker could not take, and said so; none needed its watchdog.
    assert log.count("with work given up") == 2, log[-4000:]
    assert "stop overran" not in log


@pytest.mark.slow
async def test_a_worker_stuck_in_its_loop_is_killed_by_the_supervisor_or_ends_itself_when_orphaned(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """A scorer that blocks the event loop: SIGTERM cannot reach the service (its handler runs on the loop),
    so the supervisor kills the worker past the deadline and exits 3; and when the supervisor is SIGKILLed
    instead, the worker's watchdog thread notices and ends the worker at the deadline."""
    judge_server.reset(heuristic_reply)
    (spans, scores, dead), _ = await backlog(kafka_bootstrap, new_topic, 20, seed=45, partitions=PARTITIONS)
    marker = tmp_path / "blocked"
    budget = 3
    sidecar = sidecar_for(
        tmp_path,
        (spans, scores, dead),
        judge_server,
        bootstrap=kafka_bootstrap,
        group=unique_name("group"),
        runtime={"workers": 2, "shutdown_timeout_s": budget},
        scorers=[
            {
                "id": "blocking",
                "kind": "python: tests.support.custom_scorer:create_loop_blocking_scorer",
                "options": {"marker": str(marker)},
            }
        ],
    )

    async def both_blocked() -> list[int]:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            pids = set(marker.read_text().split()) if marker.exists() else set()
            if len(pids) == 2:
                return sorted(int(p) for p in pids)
            await asyncio.sleep(0.2)
        raise TimeoutError(f"the workers did not both block:\n{sidecar.log_path.read_text()[-3000:]}")

    try:
        # 1. SIGTERM: the supervisor escalates to SIGKILL at S + 2 + 1 s and says so.
        sidecar.start()
        blocked = await both_blocked()
        stopping = time.monotonic()
        assert sidecar.terminate(budget + 10) == EXIT_STOP_OVERRUN
        sigterm_took = time.monotonic() - stopping
        assert budget + 2 <= sigterm_took <= budget + 5, sigterm_took
        assert not any(alive(pid) for pid in blocked)
        log = sidecar.log_path.read_text()
        for pid in blocked:
            assert f"(pid {pid}) did not exit within 6 s of SIGTERM" in log
        assert "killing it with SIGKILL" in log and "overran its stop deadline" in log

        # 2. SIGKILL: nobody is left to kill the stuck workers; their watchdogs end them.
        marker.unlink()
        sidecar.config["kafka"]["group_id"] = unique_name("group")  # a fresh group joins in seconds
        sidecar.start()
        blocked = await both_blocked()
        killed = time.monotonic()
        sidecar.kill()
        assert await gone(blocked, budget + 5)
        orphans_took = time.monotonic() - killed
        assert orphans_took >= budget + 2 - 0.5, f"gone after {orphans_took:.1f} s: before their deadline?"
    finally:
        kill_everything(sidecar)
    print(f"stuck workers: SIGTERM ended the pod in {sigterm_took:.1f} s, orphans gone in {orphans_took:.1f} s")
    log = sidecar.log_path.read_text()
    assert log.count("stop overran its deadline") == 2, log[-3000:]
    assert "since the supervisor is gone" in log
    assert "still consuming" in log  # what it was doing when it was ended
