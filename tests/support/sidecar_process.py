"""Run ``scoring-sidecar run`` as a real subprocess against loopback services, as production would."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sidecar.embedded.traffic import GeneratedTrace

__all__ = [
    "SidecarProcess",
    "committed_total",
    "free_port",
    "metric_sample",
    "produce_traces",
    "read_topic",
    "sidecar_config",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sidecar_config(
    *,
    bootstrap: str,
    spans_topic: str,
    scores_topic: str,
    dead_topic: str,
    group: str,
    judge_url: str,
    metrics_port: int,
    otlp_endpoint: str | None = None,
    judge: dict[str, Any] | None = None,
    runtime: dict[str, Any] | None = None,
    scorers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "log_level": "INFO",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "topics": [spans_topic],
            "group_id": group,
            "dead_letter_topic": dead_topic,
            "fetch_max_wait_ms": 50,
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
        },
        "judges": {
            "default": {
                "model": "openai/gpt-4o-mini",
                "api_base": judge_url,
                "api_key": "${JUDGE_API_KEY}",
                "timeout_s": 5,
                "max_retries": 2,
                "max_concurrency": 64,
                **(judge or {}),
            }
        },
        "scorers": scorers
        or [
            {"id": "prompt-alignment", "kind": "prompt-alignment", "judge": "default"},
            {"id": "similarity", "kind": "content-similarity"},
        ],
        "runtime": {"commit_interval_s": 0.2, "shutdown_timeout_s": 10, **(runtime or {})},
        "exporters": {
            "prometheus": {"host": "127.0.0.1", "port": metrics_port},
            "kafka_scores": {"topic": scores_topic},
            "otlp": {"endpoint": otlp_endpoint, "protocol": "http/protobuf", "events": "span"}
            if otlp_endpoint
            else {"enabled": False},
        },
    }
    return config


@dataclass
class SidecarProcess:
    config: dict[str, Any]
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    args: tuple[str, ...] = ()  # extra `run` options, e.g. ("--workers", "2")

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.config['exporters']['prometheus']['port']}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "sidecar.log"

    def start(self) -> None:
        config_path = self.workdir / "sidecar.yaml"
        config_path.write_text(yaml.safe_dump(self.config))
        environment = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        environment.update(self.env)
        self.starts += 1
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "run", "--config", str(config_path), *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )

    async def wait_ready(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                assert self.process is not None and self.process.poll() is None, self.log_path.read_text()
                try:
                    async with session.get(self.metrics_url + "/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"sidecar not ready in {timeout_s}s:\n{self.log_path.read_text()[-3000:]}")

    async def metrics_text(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(self.metrics_url + "/metrics") as response:
            return await response.text()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self, timeout_s: float = 30) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)


async def produce_traces(
    bootstrap: str, topic: str, traces: list[GeneratedTrace], *, poison: dict[int, bytes] | None = None
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        futures = []
        for i, trace in enumerate(traces):
            if poison and i in poison:
                futures.append(await producer.send(topic, poison[i], key=b"poison"))
            futures.append(await producer.send(topic, trace.request.SerializeToString(), key=trace.key))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def read_topic(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 60) -> list[Any]:
    """Every record of ``topic`` (all partitions) once ``expect`` have arrived or the timeout passed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest")
    await consumer.start()
    records: list[Any] = []
    try:
        partitions = consumer.partitions_for_topic(topic) or {0}
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while len(records) < expect and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        for batch in (await consumer.getmany(timeout_ms=300)).values():
            records.extend(batch)  # anything beyond what was expected (duplicates show up here)
    finally:
        await consumer.stop()
    return records


async def kill_mid_work(
    sidecar: SidecarProcess, rng: random.Random, *, times: int = 3, pause_s: tuple[float, float] = (0.3, 2.0)
) -> None:
    """Start ``sidecar`` and SIGKILL it ``times`` times, each a random ``pause_s`` after it is ready, then
    start it for good and wait until it is ready."""
    for _ in range(times):
        sidecar.start()
        await sidecar.wait_ready()
        await asyncio.sleep(rng.uniform(*pause_s))
        sidecar.kill()
    sidecar.start()
    await sidecar.wait_ready()


async def read_scores(bootstrap: str, topic: str, *, score_ids: int, timeout_s: float) -> list[Any]:
    """Every record of the score topic, read again until ``score_ids`` distinct score ids are there or the
    timeout passed (duplicates included: the caller counts them)."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = await read_topic(bootstrap, topic, expect=score_ids, timeout_s=5)
        if len({json.loads(r.value)["scoreId"] for r in records}) >= score_ids:
            break
    return records


async def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return sum([await consumer.committed(TopicPartition(topic, p)) or 0 for p in range(partitions)])
    finally:
        await consumer.stop()


def metric_sample(text: str, name: str, labels: dict[str, str]) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``, in a /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def score_values(records: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in records]
