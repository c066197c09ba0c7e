"""What the sections of ``bench/e2e.py`` share: the traffic (a pool of generated traces, re-keyed or
re-stamped per record), fresh topics on the embedded broker, the sidecar as a subprocess with the bench's
settings, and reading its progress (committed offsets, CPU and RSS of its process tree, its metrics).

The settings the command line changes for every section (score partitions, the score sink, runtime limits)
are module-level cells that ``bench/e2e.py`` fills before the sections run.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.embedded.broker import create_topics
from sidecar.embedded.traffic import TrafficGenerator
from tests.support.sidecar_process import SidecarProcess, free_port, sidecar_config

ROOT = Path(__file__).resolve().parent.parent  # the repository

PARTITIONS = 4
SCORE_PARTITIONS = [1]  # --score-partitions
KAFKA_SCORES = [True]  # --no-kafka-scores: prometheus sink only (diagnosis)
SIMILARITY = [{"id": "similarity", "kind": "content-similarity"}]
API_KEY = "sk-bench"
SIDECAR_ENV = {
    "JUDGE_API_KEY": API_KEY,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
_topic_ids = iter(range(1, 1_000_000))
RUNTIME: dict[str, Any] = {}  # runtime settings overriding the service's defaults (--max-in-flight-runs …)


@dataclass(frozen=True)
class Template:
    data: bytes
    trace_id: bytes


def build_pool(size: int, seed: int = 7) -> list[Template]:
    pool = []
    for trace in TrafficGenerator(seed=seed).traces(size):
        pool.append(Template(trace.request.SerializeToString(), bytes.fromhex(trace.trace_id)))
    return pool


def rekey(template: Template, trace_id: bytes) -> bytes:
    return template.data.replace(template.trace_id, trace_id)


def restamp(template: Template, trace_id: bytes) -> tuple[bytes, int]:
    """A copy with a new trace id whose spans are shifted to end now; returns it and the agent span's end."""
    request = ExportTraceServiceRequest.FromString(template.data)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    delta = time.time_ns() - max(s.end_time_unix_nano for s in spans)
    agent_end = 0
    for s in spans:
        s.trace_id = trace_id
        s.start_time_unix_nano += delta
        s.end_time_unix_nano += delta
        if s.name.startswith("invoke_agent"):
            agent_end = s.end_time_unix_nano
    return request.SerializeToString(), agent_end or time.time_ns()


def producer_for(bootstrap: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=10, max_batch_size=512 * 1024, max_request_size=8 * 1024 * 1024
    )


async def produce_backlog(bootstrap: str, topic: str, pool: list[Template], count: int) -> float:
    """``count`` distinct traces; returns records/s."""
    producer = producer_for(bootstrap)
    await producer.start()
    started = time.perf_counter()
    try:
        pending = []
        for i in range(count):
            trace_id = random.randbytes(16)
            pending.append(
                await producer.send(topic, rekey(pool[i % len(pool)], trace_id), key=trace_id.hex().encode())
            )
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return count / (time.perf_counter() - started)


async def new_topics(bootstrap: str, name: str) -> tuple[str, str, str]:
    suffix = f"{os.getpid()}-{next(_topic_ids)}"
    spans, scores, dead = f"bench-{name}-spans-{suffix}", f"bench-{name}-scores-{suffix}", f"bench-{name}-dead-{suffix}"
    await create_topics(bootstrap, {spans: PARTITIONS, scores: SCORE_PARTITIONS[0], dead: 1})
    return spans, scores, dead


def make_sidecar(
    bootstrap: str,
    topics: tuple[str, str, str],
    workdir: Path,
    *,
    judge_url: str = "http://127.0.0.1:9/v1",
    group: str = "group",
    kafka_scores: bool | None = None,
    workers: int = 1,
    kafka: dict[str, Any] | None = None,
    **kw: Any,
) -> SidecarProcess:
    spans, scores, dead = topics
    config = sidecar_config(
        bootstrap=bootstrap,
        spans_topic=spans,
        scores_topic=scores,
        dead_topic=dead,
        group=f"{spans}-{group}",
        judge_url=judge_url,
        metrics_port=free_port(),
        **{"scorers": SIMILARITY, **kw},
    )
    config["runtime"] = {**RUNTIME, **config["runtime"], "workers": workers}
    config["kafka"].update(kafka or {})
    config["log_level"] = "WARNING"
    if not (KAFKA_SCORES[0] if kafka_scores is None else kafka_scores):
        config["exporters"]["kafka_scores"] = {"enabled": False}
    workdir.mkdir(parents=True, exist_ok=True)
    return SidecarProcess(config, workdir, env=SIDECAR_ENV)


class Committed:
    """The sidecar group's committed offsets, summed over the spans topic's partitions."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        self._partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    async def __aenter__(self) -> Committed:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def total(self) -> int:
        return sum([await self._consumer.committed(tp) or 0 for tp in self._partitions])


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a multi-worker sidecar: the supervisor and its workers)."""
    tree, index = [pid], 0
    while index < len(tree):
        current = tree[index]
        index += 1
        try:
            tree.extend(int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split())
        except OSError:
            continue
    return tree


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its living descendants."""
    total = 0.0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` and its living descendants, in MB."""
    total = 0.0
    for member in process_tree(pid):
        try:
            lines = Path(f"/proc/{member}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) / 1024.0 for line in lines if line.startswith("VmRSS:"))
    return total


def metric_by_label(metrics_text: str, name: str, label: str) -> dict[str, float]:
    """``{label value: sum}`` of a Prometheus counter's samples."""
    totals: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if line.startswith(name + "{") and f'{label}="' in line:
            key = line.split(f'{label}="', 1)[1].split('"', 1)[0]
            totals[key] = totals.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return totals


async def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.1)
    return condition()


def stop_sidecar(sidecar: SidecarProcess) -> None:
    try:
        if sidecar.process is not None and sidecar.process.poll() is None:
            sidecar.terminate(30)
    except subprocess.TimeoutExpired:
        pass
    finally:
        sidecar.kill()


async def drain(
    sidecar: SidecarProcess,
    committed: Committed,
    expect: int,
    timeout_s: float,
    interval_s: float = 0.1,
    *,
    partial: bool = False,
) -> dict[str, Any]:
    """Poll committed offsets (and the sidecar's RSS and CPU) until ``expect`` are committed."""
    assert sidecar.process is not None
    pid = sidecar.process.pid
    deadline = time.monotonic() + timeout_s
    # From readiness (the sidecar's first poll returned): the sidecar commits only once its score sink has
    # confirmed everything before the commit point, so under a backlog the first commit can be the last.
    first: tuple[float, int, float] = (time.monotonic(), 0, process_cpu_s(pid))
    samples: list[tuple[float, float]] = []  # (t, rss MB)
    done = 0
    while time.monotonic() < deadline:
        done = await committed.total()
        now = time.monotonic()
        if sidecar.process.poll() is not None:
            raise RuntimeError(f"the sidecar exited:\n{sidecar.log_path.read_text()[-3000:]}")
        samples.append((now, rss_mb(pid)))
        if done >= expect:
            break
        await asyncio.sleep(interval_s)
    else:
        if not partial:
            raise TimeoutError(f"{done} of {expect} committed in {timeout_s}s; log: {sidecar.log_path}")
        print(f"  (timed out: {done} of {expect} committed in {timeout_s:g} s; log: {sidecar.log_path})")
    wall = time.monotonic() - first[0]
    cpu = process_cpu_s(pid) - first[2]
    return {
        "rate": (done - first[1]) / wall if wall > 0 else float("inf"),
        "committed": done,
        "wall_s": wall,
        "cpu_s": cpu,
        "samples": samples,
    }
