"""``scoring-sidecar run`` at start-up, as real processes: a broker not there yet, a taken metrics port, the
lines that say what the process is doing. No traceback for any of them (docs/worker-lifecycle.md, "Starting")."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.cli import _guarded
from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.runtime.startup import StartupFailure
from tests.support.sidecar_process import (
    SidecarProcess,
    free_port,
    produce_traces,
    read_topic,
    score_values,
    sidecar_config,
)

SIMILARITY = {"id": "similarity", "kind": "content-similarity"}
# Selects agents no trace has: every span is filtered, which the intake line must say.
NOBODY = {"id": "nobody", "kind": "content-similarity", "targets": {"agents": {"include": ["nobody-*"]}}}


def config_for(bootstrap: str, *, kafka: dict[str, Any] | None = None, **runtime: Any) -> dict[str, Any]:
    config = sidecar_config(
        bootstrap=bootstrap, spans_topic="spans", scores_topic="scores", dead_topic="dead", group="startup",
        judge_url="http://127.0.0.1:9/v1", metrics_port=free_port(), scorers=[SIMILARITY], runtime=runtime,
    )  # fmt: skip
    config["kafka"].update(kafka or {})
    del config["judges"]  # code scorers only: no judge, no API key
    return config


async def health(sidecar: SidecarProcess) -> tuple[int, int, str]:
    """``/healthz`` status, ``/readyz`` status and its reason; (0, 0, "") while the server is not up yet."""
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(sidecar.metrics_url + "/healthz") as live:
                live_status = live.status
            async with session.get(sidecar.metrics_url + "/readyz") as ready:
                body = json.loads(await ready.text())
                return live_status, ready.status, str(body.get("reason", ""))
    except aiohttp.ClientError:
        return 0, 0, ""


async def until_reason(sidecar: SidecarProcess, pattern: str, timeout_s: float = 30) -> tuple[int, int, str]:
    """Poll until ``/readyz``'s reason matches ``pattern``; the last answer."""
    deadline = time.monotonic() + timeout_s
    answer = (0, 0, "")
    while time.monotonic() < deadline:
        assert sidecar.process is not None and sidecar.process.poll() is None, sidecar.log_path.read_text()
        answer = await health(sidecar)
        if re.search(pattern, answer[2]):
            return answer
        await asyncio.sleep(0.1)
    raise AssertionError(f"/readyz never said {pattern!r}; last {answer}:\n{sidecar.log_path.read_text()}")


async def exit_code(sidecar: SidecarProcess, timeout_s: float) -> int:
    assert sidecar.process is not None
    deadline = time.monotonic() + timeout_s
    while sidecar.process.poll() is None:
        assert time.monotonic() < deadline, f"still running after {timeout_s} s:\n{sidecar.log_path.read_text()}"
        await asyncio.sleep(0.1)
    return sidecar.process.returncode


def lines(sidecar: SidecarProcess, needle: str) -> list[str]:
    return [line for line in sidecar.log_path.read_text().splitlines() if needle in line]


@pytest.mark.slow
async def test_no_broker_readyz_says_why_then_one_line_and_exit_4(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    sidecar = SidecarProcess(config_for(bootstrap, kafka={"startup_timeout_s": 5}), tmp_path)
    started = time.monotonic()
    sidecar.start()
    try:
        live, ready, reason = await until_reason(sidecar, "attempt 2")
        assert (live, ready) == (200, 503)
        assert reason.startswith(f"waiting for the Kafka broker at {bootstrap}: starting exporter kafka_scores: ")
        assert "cannot connect" in reason and "Connect call failed" in reason
        assert "gives up after kafka.startup_timeout_s=5" in reason
        assert await exit_code(sidecar, 30) == 4
    finally:
        sidecar.kill()
    assert time.monotonic() - started < 25  # 5 s of retries, plus the interpreter's start
    log = sidecar.log_path.read_text()
    assert "Traceback" not in log
    assert "Unable connect" not in log  # aiokafka's line per attempt: the wait's WARNING says it instead
    # One WARNING for the first failure: the next would come 30 s later.
    assert len(lines(sidecar, "WARNING sidecar.runtime.startup waiting for the Kafka broker")) == 1
    (final,) = lines(sidecar, "scoring-sidecar run:")
    assert final.startswith(f"scoring-sidecar run: the Kafka broker at {bootstrap} was not reachable for 5 s (")
    assert "attempts; the last: starting exporter kafka_scores: cannot connect" in final
    assert "check kafka.bootstrap_servers" in final and "raise kafka.startup_timeout_s (now 5)" in final
    assert log.rstrip().endswith(final)  # the last word, nothing after it


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_sigterm_while_waiting_for_the_broker_exits_0_at_once(tmp_path: Path, workers: str) -> None:
    sidecar = SidecarProcess(config_for(f"127.0.0.1:{free_port()}"), tmp_path, args=("--workers", workers))
    sidecar.start()
    try:
        # Every process waits (a worker still importing when SIGTERM comes ends by the signal's default).
        await until_reason(sidecar, "worker 0: waiting.*; worker 1: waiting" if workers == "2" else "waiting for the")
        asked = time.monotonic()
        assert sidecar.terminate(timeout_s=10) == 0
        took = time.monotonic() - asked
    finally:
        sidecar.kill()
    assert took < 5, sidecar.log_path.read_text()
    # Each process that waited says it stopped while waiting (one, or each worker of the pod).
    stopped = lines(sidecar, "while waiting for the Kafka broker; nothing was consumed")
    assert len(stopped) == int(workers), sidecar.log_path.read_text()
    assert "Traceback" not in sidecar.log_path.read_text()


@pytest.mark.slow
async def test_workers_say_they_wait_for_the_broker_and_the_pod_exits_4(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    sidecar = SidecarProcess(config_for(bootstrap, kafka={"startup_timeout_s": 6}), tmp_path, args=("--workers", "2"))
    sidecar.start()
    try:
        # The supervisor serves the pod's /readyz: each worker's reason, merged.
        live, ready, reason = await until_reason(sidecar, "worker 0: waiting.*; worker 1: waiting")
        assert (live, ready) == (200, 503)
        assert f"worker 1: waiting for the Kafka broker at {bootstrap}" in reason
        assert await exit_code(sidecar, 40) == 4
    finally:
        sidecar.kill()
    log = sidecar.log_path.read_text()
    assert "Traceback" not in log
    # The first worker to give up says why; the supervisor stops the pod instead of restarting it.
    assert lines(sidecar, f"scoring-sidecar run: the Kafka broker at {bootstrap} was not reachable for 6 s")
    assert lines(sidecar, "supervisor: stopped in") and not lines(sidecar, "restarting in")


@pytest.mark.slow
async def test_a_broker_started_late_is_joined_and_everything_is_scored(tmp_path: Path) -> None:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    config = config_for(bootstrap, intake_log_interval_s=1)
    config["scorers"] = [SIMILARITY, NOBODY]
    sidecar = SidecarProcess(config, tmp_path)
    sidecar.start()
    traces = list(TrafficGenerator(seed=5).traces(6))
    try:
        # At the third failure the next attempt is 4 s away: room to start the broker and create the topics
        # before the consumer subscribes.
        await until_reason(sidecar, "attempt 3")
        async with EmbeddedBroker(port=port) as broker:
            await create_topics(broker.bootstrap_servers, {"spans": 2, "scores": 1, "dead": 1})
            await produce_traces(broker.bootstrap_servers, "spans", traces)
            await sidecar.wait_ready(timeout_s=60)
            scores = await read_topic(broker.bootstrap_servers, "scores", expect=len(traces), timeout_s=60)
            assert sidecar.terminate() == 0  # the stop logs the last period's intake: no tick to wait for
    finally:
        sidecar.kill()
    values = score_values(scores)
    assert {v["scorerId"] for v in values} == {"similarity"}  # the other scorer selects nothing
    assert len({v["spanId"] for v in values}) == len(values) == len(traces)
    log = sidecar.log_path.read_text()
    assert "Traceback" not in log
    assert lines(sidecar, f"the Kafka broker at {bootstrap} answered after")
    (joined,) = lines(sidecar, "joined consumer group startup")
    assert joined.endswith(
        f"joined consumer group startup on topics spans: 2 partitions assigned (spans-0, spans-1); "
        f"metrics on {sidecar.metrics_url}/metrics"
    )
    intake = lines(sidecar, "INFO sidecar.app.intake_log intake in the last ")
    assert intake, log
    scored = [re.search(r"similarity scored (\d+)", line) for line in intake]
    assert sum(int(match.group(1)) for match in scored if match) == len(traces)
    assert any(re.search(r"nobody filtered \d+", line) for line in intake)


def test_a_taken_metrics_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for workers in ("1", "2"):  # the supervisor serves the pod's port in worker mode
            # The configured port is free: the option overrides it.
            config = config_for(f"127.0.0.1:{free_port()}")
            path = tmp_path / f"sidecar-{workers}.yaml"
            path.write_text(json.dumps(config))
            command = ["run", "--config", str(path), "--metrics-port", str(port), "--workers", workers]
            done = subprocess.run([sys.executable, "-m", "sidecar.cli", *command], capture_output=True, text=True)
            assert done.returncode == 2, done.stderr
            assert "Traceback" not in done.stderr
            (line,) = [line for line in done.stderr.splitlines() if line.startswith("scoring-sidecar run:")]
            assert line == (
                f"scoring-sidecar run: cannot serve /metrics, /healthz and /readyz on 127.0.0.1:{port}: the port is "
                "taken (another process listens on it): change exporters.prometheus.port (or "
                "exporters.prometheus.host), or pass run --metrics-port N (0: a free port)"
            )


def test_expected_failures_are_one_line_and_anything_else_is_a_bug(capsys: pytest.CaptureFixture[str]) -> None:
    def unreachable() -> int:
        raise StartupFailure("the Kafka broker at k:9092 was not reachable", 4)

    def broken() -> int:
        return {}["missing"]  # type: ignore[no-any-return]

    assert _guarded("run", unreachable) == 4
    assert capsys.readouterr().err == "scoring-sidecar run: the Kafka broker at k:9092 was not reachable\n"
    assert _guarded("validate", broken) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):" and err[-2] == "KeyError: 'missing'"
    assert err[-1].startswith("scoring-sidecar validate: the error above is a bug in scoring-sidecar ")
    assert err[-1].endswith("please report it to its maintainers with this traceback")


def test_the_intake_line_says_why_nothing_was_scored() -> None:
    from sidecar.app.intake_log import IntakeTally

    tally = IntakeTally()
    assert tally.take(60) is None  # nothing happened: no line
    for _ in range(3):
        tally.record_consumed("spans", 4)
    tally.spans_skipped("filtered", 12)
    tally.runs_skipped("prompt-alignment", "not_read", "filtered", 12)
    tally.dead_lettered("decode_error")
    line = tally.take(60)
    assert line is not None and line.startswith(
        "intake in the last 60 s: 3 records, 12 spans; runs: prompt-alignment filtered 12; "
        "spans set aside: filtered 12; dead letters: decode_error 1; nothing scored: see why above (filtered: "
        "no span matched scorers[].targets"
    )
    assert tally.take(60) is None  # counted since the last line only


async def test_a_judge_without_its_key_is_named_once_at_start(tmp_path: Path) -> None:
    """The key may be set only where the service runs, so `run` warns rather than refusing: once per pod."""
    config = config_for(f"127.0.0.1:{free_port()}", kafka={"startup_timeout_s": 2})
    config["judges"] = {"default": {"model": "openai/gpt-4o-mini"}}  # no api_key, no api_base
    config["scorers"] = [{"id": "pa", "kind": "prompt-alignment", "judge": "default"}]
    sidecar = SidecarProcess(config, tmp_path, args=("--workers", "2"))  # the test's environment has no *_API_KEY
    sidecar.start()
    try:
        assert await exit_code(sidecar, 60) == 4  # no broker: what ends it is not the key
    finally:
        sidecar.kill()
    (warning,) = lines(sidecar, "has no API key")
    expected = "WARNING sidecar.app.serve judge 'default' (openai/gpt-4o-mini) has no API key: set OPENAI_API_KEY"
    assert expected in warning
    assert "its calls will be refused (401) and the judge paused" in warning


async def test_sigterm_while_starting_the_dead_letter_producer_with_no_exporter_exits_0(tmp_path: Path) -> None:
    # No exporter to start first: the start waits on the dead-letter producer, and the stop has nothing to close
    # but what never started.
    config = config_for(f"127.0.0.1:{free_port()}")
    config["exporters"]["kafka_scores"] = {"enabled": False}
    sidecar = SidecarProcess(config, tmp_path)
    sidecar.start()
    try:
        await until_reason(sidecar, "waiting for the Kafka broker at .*: starting the dead-letter producer")
        assert sidecar.terminate(timeout_s=10) == 0
    finally:
        sidecar.kill()
    log = sidecar.log_path.read_text()
    assert "Traceback" not in log and "this is a bug" not in log, log
    assert lines(sidecar, "while waiting for the Kafka broker; nothing was consumed"), log
