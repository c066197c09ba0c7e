"""End-to-end benchmarks of ``scoring-sidecar run`` (a real subprocess) against an embedded Tansu broker.

Sections (``--only NAME`` runs one; each prints human lines, the script's last line holds every figure
as ``key=value`` pairs):

* ``throughput`` — N traces (4 spans each) in a 4-partition topic, each reader on a fresh topic of the same
  traffic (a re-read topic measured faster) except the floor, which re-reads the raw one: ``raw``, an
  aiokafka consumer with the sidecar's fetch settings that parses every record with
  ``ExportTraceServiceRequest.FromString`` (the least any consumer does), counted from its first batch to
  the last record; and ``ours``, the sidecar with the content-similarity scorer only (kafka_scores +
  prometheus sinks, OTLP off), counted from readiness (its first poll returned) to the last committed
  offset (it commits only once the score sink has confirmed every export before the commit point, so
  under a backlog the first commit can be the last). Goal: ``ratio`` = ours / raw ≥ 0.5. Also read once
  more by the same raw consumer running ``bench/python_floor.py``'s bare scoring on every record (parse,
  agent spans, texts, Dice, JSON; no models, metrics or produce): ``floor_ratio``, the most any Python
  implementation of the same work could reach here in one process (its CPU per record is many times the
  raw consumer's, so the re-read hardly matters to it).
* ``latency`` — the sidecar (content-similarity only) fed at a steady rate (1,000 traces/s for 20 s): every
  record is re-stamped right before sending so its spans end "now"; per score: arrival at a consumer of the
  score topic − the agent span's end time (also − the score record's Kafka timestamp). Scores still missing
  ``--latency-grace-s`` after the last send are counted (``latency_missing``), not in the percentiles.
  Goal: ``p99_s`` < 1.
* ``rss`` — a backlog of 250k records × 4 spans = 1 M spans, then the sidecar (content-similarity only)
  starts and drains it; its VmRSS is sampled every 0.5 s, for at most ``--rss-timeout-s`` (then the
  figures cover the part drained: ``rss_drained_spans``). ``rss_flat`` = the max over the second half of
  the samples ≤ 1.1 × the max over the first half. Goal: ``rss_mb`` < 300 and flat.
* ``trace`` — whole-trace scoring (``scope: trace``) on 10-span traces in 3 records: throughput against
  ``scope: span`` on the same traffic, latency from a trace's last span to its score at 1,000 traces/s
  (goal: p99 < ``idle_s`` + 1 s), RSS draining a backlog (``bench/e2e_traces.py`` says how).
* ``judge`` — a judge server subprocess with 200 ms latency that counts calls (``bench/e2e_scorers.py``;
  ``--judge-server fixed``, the default, answers from one pre-encoded reply at a fraction of the CPU of
  ``scripted``, the tests' aiohttp server, which takes its CPU from the cores of the client measured, where
  a remote provider takes none; docs/benchmarks.md has the figures); raw
  aiohttp at concurrency 256 (``bench/judge_overhead.py``'s client) against the sidecar with a one-prompt-step
  judge scorer (``python: bench.e2e_scorers:judge_factory``; judge max_concurrency 256)
  draining a backlog. Both rates are judge calls/s counted at the server between 10 % and 90 % of the
  calls (or up to the last call, if calls stop earlier). Goal: ``bound_fraction`` = ours / raw ≥ 0.9.

Workers: ``throughput`` and ``judge`` measure the sidecar twice, as deployed on this machine
(``runtime.workers`` = ``--workers``, default the number of cores, at most one per partition; the judge's
max_concurrency 256 and the in-flight bound are split among the workers, so the pod calls the judge at the
same concurrency as the raw client) and as one process (figures suffixed ``_1w``). The goal figures (no
suffix) are the first. CPU and RSS figures sum the supervisor and its workers. ``latency`` and ``rss`` run
one process.

Runtime limits: the service's defaults (``--max-in-flight-runs``, ``--max-buffered-bytes`` override them).
Before commit 8f4d37b the sidecar stalled for good at its first backpressure pause with 512 runs in flight
(a finishing run counted itself as in flight); ``--max-in-flight-runs 1000000 --max-buffered-bytes
8388608`` bounds in-flight work by bytes only, as this bench did then.
``--no-kafka-scores`` turns the score topic sink off (prometheus only), to see what the sink costs.

Traffic: a pool of ``--pool`` traces from ``TrafficGenerator`` (the SDK is slow), re-keyed with a fresh
random trace id per record (a byte replace of the 16-byte id), so every record is a distinct trace.

    .venv/bin/python bench/e2e.py [--only throughput|latency|rss|judge|trace] [--traces 20000] [--rate 1000]
        [--duration-s 20] [--backlog 250000] [--rss-timeout-s S] [--judge-records 12000]
        [--judge-calls 6000] [--workers N] [--no-kafka-scores] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import aiohttp  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from bench.python_floor import bare_score_records  # noqa: E402
from sidecar.embedded.broker import EmbeddedBroker, create_topics  # noqa: E402
from sidecar.embedded.traffic import TrafficGenerator  # noqa: E402
from tests.support.sidecar_process import SidecarProcess, free_port, sidecar_config  # noqa: E402

PARTITIONS = 4
SCORE_PARTITIONS = [1]  # --score-partitions
KAFKA_SCORES = [True]  # --no-kafka-scores: prometheus sink only (diagnosis)
SIMILARITY = [{"id": "similarity", "kind": "content-similarity"}]
API_KEY = "sk-bench"
SIDECAR_ENV = {
    "JUDGE_API_KEY": API_KEY,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
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


# --- throughput -------------------------------------------------------------------------------------------


async def raw_consume(
    bootstrap: str, topic: str, expect: int, work: Callable[[bytes], object] = ExportTraceServiceRequest.FromString
) -> float:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        fetch_max_wait_ms=50,
        max_poll_records=500,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        count, first = 0, None
        while count < expect:
            for records in (await consumer.getmany(timeout_ms=200, max_records=500)).values():
                for record in records:
                    work(record.value)
                count += len(records)
            if first is None and count:
                first = (time.perf_counter(), count)
        assert first is not None
        return (count - first[1]) / (time.perf_counter() - first[0])
    finally:
        await consumer.stop()


async def section_throughput(args: argparse.Namespace, bootstrap: str, pool: list[Template], work: Path) -> dict:
    topics = await new_topics(bootstrap, "throughput")
    produced = await produce_backlog(bootstrap, topics[0], pool, args.traces)
    print(f"throughput: produced {args.traces} traces ({args.traces * 4} spans) at {produced:.0f}/s")
    raw = await raw_consume(bootstrap, topics[0], args.traces)
    print(f"throughput: raw aiokafka consume + FromString: {raw:.0f} traces/s")
    floor = await raw_consume(bootstrap, topics[0], args.traces, bare_score_records)
    print(
        f"throughput: the Python floor (same consume + bench/python_floor.py's bare scoring, no produce): "
        f"{floor:.0f} traces/s, {floor / raw:.3f} of raw"
    )
    figures: dict[str, Any] = {"floor_traces_per_s": round(floor, 1), "floor_ratio": round(floor / raw, 3)}
    # The configured run, then (unless the sink is off already) the same records with prometheus only.
    # The goal figure (no suffix) is the pod as deployed on this machine: --workers processes, score sink on.
    variants: list[tuple[str, bool, str, int]] = []
    if args.workers > 1:
        variants.append((f"kafka_scores + prometheus, {args.workers} workers", KAFKA_SCORES[0], "", args.workers))
    suffix_1w = "_1w" if args.workers > 1 else ""
    if KAFKA_SCORES[0]:
        variants.append(("kafka_scores + prometheus, 1 process", True, suffix_1w, 1))
    variants.append(("prometheus only, 1 process", False, "_prometheus_only", 1))
    for label, kafka_scores, suffix, workers in variants:
        # A fresh backlog each, first read like the raw consumer's: a re-read topic reads faster, which made
        # the score sink look twice as costly as it is (docs/benchmarks.md).
        topics = await new_topics(bootstrap, "throughput")
        await produce_backlog(bootstrap, topics[0], pool, args.traces)
        group = f"group{suffix}"
        sidecar = make_sidecar(
            bootstrap, topics, work / f"throughput{suffix}", group=group, kafka_scores=kafka_scores, workers=workers
        )
        sidecar.start()
        try:
            async with Committed(bootstrap, f"{topics[0]}-{group}", topics[0]) as committed:
                await sidecar.wait_ready(60)
                result = await drain(sidecar, committed, args.traces, args.timeout_s)
        finally:
            stop_sidecar(sidecar)
        ours = result["rate"]
        ratio = ours / raw
        print(
            f"throughput: sidecar (content-similarity, {label}): {ours:.0f} traces/s, ratio {ratio:.3f}; "
            f"sidecar CPU {result['cpu_s']:.1f} s over {result['wall_s']:.1f} s wall "
            f"({100 * result['cpu_s'] / result['wall_s']:.0f} % of one core, all its processes)"
        )
        figures[f"traces_per_s{suffix}"] = round(ours, 1)
        figures[f"ratio{suffix}"] = round(ratio, 3)
        figures[f"sidecar_cpu_frac{suffix}"] = round(result["cpu_s"] / result["wall_s"], 2)
    figures["raw_traces_per_s"] = round(raw, 1)
    ratio = figures.get("ratio", figures["ratio_prometheus_only"])
    print(f"throughput: ratio {ratio:.3f} (goal ≥ 0.5): {'OK' if ratio >= 0.5 else 'MISSED'}")
    return figures


# --- latency ----------------------------------------------------------------------------------------------


async def section_latency(args: argparse.Namespace, bootstrap: str, pool: list[Template], work: Path) -> dict:
    topics = await new_topics(bootstrap, "latency")
    spans_topic, scores_topic, _ = topics
    sidecar = make_sidecar(bootstrap, topics, work / "latency")
    sidecar.start()
    arrivals: dict[str, tuple[float, float]] = {}  # trace id → (arrival s, record timestamp s)
    stamps: dict[str, int] = {}  # trace id → agent span end (unix ns)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest")
    producer = producer_for(bootstrap)
    stopping = asyncio.Event()

    async def collect() -> None:
        while not stopping.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batches.values():
                for r in records:
                    arrivals[json.loads(r.value)["traceId"]] = (now, r.timestamp / 1000.0)

    async def send(i: int) -> str:
        trace_id = random.randbytes(16)
        data, end_ns = restamp(pool[i % len(pool)], trace_id)
        key = trace_id.hex()
        stamps[key] = end_ns
        await producer.send(spans_topic, data, key=key.encode())
        return key

    try:
        await consumer.start()
        consumer.assign([TopicPartition(scores_topic, 0)])
        await producer.start()
        collector = asyncio.create_task(collect())
        await sidecar.wait_ready(60)
        warm = [await send(i) for i in range(50)]  # until the group has joined and the path is warm
        await wait_until(lambda: all(k in arrivals for k in warm), 60)
        stamps.clear()
        total = int(args.rate * args.duration_s)
        started = time.monotonic()
        sent = 0
        while sent < total:
            due = min(total, int((time.monotonic() - started) * args.rate) + 1)
            while sent < due:
                await send(sent)
                sent += 1
            await asyncio.sleep(0.005)
        send_s = time.monotonic() - started
        await wait_until(lambda: all(k in arrivals for k in stamps), args.latency_grace_s)
        stopping.set()
        await collector
    finally:
        stop_sidecar(sidecar)
        await producer.stop()
        await consumer.stop()
    latencies = sorted(arrivals[k][0] - end / 1e9 for k, end in stamps.items() if k in arrivals)
    by_ts = sorted(arrivals[k][1] - end / 1e9 for k, end in stamps.items() if k in arrivals)
    missing = len(stamps) - len(latencies)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
    print(
        f"latency: {len(stamps)} traces at {len(stamps) / send_s:.0f}/s for {send_s:.1f} s (content-similarity); "
        f"{missing} scores missing"
    )
    print(
        f"latency: span end → score arrival p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms, mean {statistics.fmean(latencies) * 1000:.0f} ms; "
        f"→ score record timestamp p50 {pct(by_ts, 0.5) * 1000:.0f} ms, p99 {pct(by_ts, 0.99) * 1000:.0f} ms"
    )
    print(f"latency: p99 {p99:.3f} s (goal < 1 s): {'OK' if p99 < 1.0 and not missing else 'MISSED'}")
    return {
        "p50_s": round(p50, 4),
        "p99_s": round(p99, 4),
        "p99_record_ts_s": round(pct(by_ts, 0.99), 4),
        "latency_missing": missing,
    }


# --- rss --------------------------------------------------------------------------------------------------


async def section_rss(
    args: argparse.Namespace, bootstrap: str, pool: list[Template], work: Path, broker_pid: int | None
) -> dict:
    topics = await new_topics(bootstrap, "rss")
    broker0 = rss_mb(broker_pid) if broker_pid else 0.0
    produced = await produce_backlog(bootstrap, topics[0], pool, args.backlog)
    broker1 = rss_mb(broker_pid) if broker_pid else 0.0
    print(
        f"rss: backlog of {args.backlog} records ({args.backlog * 4} spans) produced at {produced:.0f}/s; "
        f"broker RSS {broker0:.0f} → {broker1:.0f} MB"
    )
    sidecar = make_sidecar(bootstrap, topics, work / "rss")
    sidecar.start()
    try:
        async with Committed(bootstrap, f"{topics[0]}-group", topics[0]) as committed:
            await sidecar.wait_ready(60)
            timeout_s = args.rss_timeout_s or args.timeout_s
            result = await drain(sidecar, committed, args.backlog, timeout_s, interval_s=0.5, partial=True)
    finally:
        stop_sidecar(sidecar)
    samples = [mb for _, mb in result["samples"]]
    half = len(samples) // 2
    first_max, last_max = max(samples[: max(half, 1)]), max(samples[half:])
    peak = max(samples)
    flat = last_max <= 1.1 * first_max
    print(
        f"rss: {result['committed']} of {args.backlog} records committed at {result['rate']:.0f} traces/s "
        f"in {result['wall_s']:.1f} s; sidecar RSS max {peak:.0f} MB "
        f"(first half max {first_max:.0f}, second half max {last_max:.0f}, {len(samples)} samples)"
    )
    print(f"rss: {peak:.0f} MB, flat={flat} (goal < 300 MB and flat): {'OK' if peak < 300 and flat else 'MISSED'}")
    return {
        "rss_mb": round(peak, 1),
        "rss_flat": str(flat).lower(),
        "rss_first_half_mb": round(first_max, 1),
        "rss_second_half_mb": round(last_max, 1),
        "rss_spans": args.backlog * 4,
        "rss_drained_spans": result["committed"] * 4,
        "drain_traces_per_s": round(result["rate"], 1),
    }


# --- judge ------------------------------------------------------------------------------------------------


def start_judge(latency_ms: float, stats: Path, kind: str) -> tuple[subprocess.Popen[str], str]:
    stats.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.e2e_scorers",
            "--latency-ms",
            f"{latency_ms:g}",
            "--stats",
            str(stats),
            "--server",
            kind,
        ],
        cwd=_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **SIDECAR_ENV},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening"):
        process.kill()
        raise RuntimeError("the judge server did not start")
    return process, f"http://127.0.0.1:{int(line.split()[1])}/v1"


class Usage:
    """CPU seconds used by a process tree (``None``: this process) while the block runs, and its wall time."""

    def __init__(self, pid: int | None) -> None:
        self._pid = pid
        self.cpu_s = self.wall_s = 0.0

    def _cpu(self) -> float:
        return process_cpu_s(self._pid) if self._pid is not None else time.process_time()

    @property
    def fraction(self) -> float:
        """Cores used on average."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def __enter__(self) -> Usage:
        self._start = (time.monotonic(), self._cpu())
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.monotonic() - self._start[0]
        self.cpu_s = self._cpu() - self._start[1]


def judge_count(stats: Path) -> int:
    for _ in range(50):
        try:
            return int(stats.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            time.sleep(0.01)
    raise RuntimeError("cannot read the judge server's counter")


async def server_rate(stats: Path, calls: int, work: asyncio.Future[Any] | asyncio.Task[Any]) -> float:
    """Judge calls/s counted at the server between 10 % and 90 % of ``calls`` past the current count."""
    base = judge_count(stats)
    low, high = base + calls // 10, base + calls * 9 // 10
    t_low = t_high = None
    last = (time.monotonic(), base)
    while t_high is None:
        if work.done():
            work.result()  # raises if it failed
        count, now = judge_count(stats), time.monotonic()
        if count > last[1]:
            last = (now, count)
        if t_low is None and count >= low:
            t_low, c_low = now, count
        if t_low is not None and count >= high:
            t_high, c_high = now, count
        elif now - last[0] > 5.0:  # calls stopped before 90 %: the window ends at the last call
            print(f"judge: calls stopped at {count - base} of {calls}")
            if t_low is None:
                raise RuntimeError(f"judge calls stopped at {count - base} of {calls}")
            t_high, c_high = last
        await asyncio.sleep(0.05)
    return (c_high - c_low) / (t_high - t_low)


async def judged_rate(
    args: argparse.Namespace,
    bootstrap: str,
    topics: tuple[str, str, str],
    url: str,
    stats: Path,
    work: Path,
    workers: int,
) -> dict[str, float]:
    """Judge calls/s at the server while a fresh group of the sidecar (``workers`` processes) drains the backlog."""
    group = f"group-{workers}w"
    sidecar = make_sidecar(
        bootstrap,
        topics,
        work / f"sidecar-{workers}w",
        group=group,
        workers=workers,
        judge_url=url,
        judge={"max_concurrency": args.concurrency, "timeout_s": 10, "max_retries": 0},  # split among workers
        runtime={"max_in_flight_runs": max(RUNTIME.get("max_in_flight_runs", 512), 2 * args.concurrency)},
        scorers=[{"id": "bench-judge", "kind": "python: bench.e2e_scorers:judge_factory", "judge": "default"}],
    )
    sidecar.start()
    try:
        async with Committed(bootstrap, f"{topics[0]}-{group}", topics[0]) as committed:
            await sidecar.wait_ready(60)
            task = asyncio.create_task(drain(sidecar, committed, args.judge_records, args.timeout_s))
            assert sidecar.process is not None
            with Usage(sidecar.process.pid) as used:
                ours = await server_rate(stats, args.judge_records, task)
            task.cancel()  # the rate is measured; committing the whole backlog is not needed here
            text = await sidecar.metrics_text()
            (work / f"sidecar-{workers}w-metrics.txt").write_text(text)
            runs = metric_by_label(text, "scoring_sidecar_scorer_runs_total", "outcome")
            calls = metric_by_label(text, "scoring_sidecar_judge_calls_total", "outcome")
            shed = metric_by_label(text, "scoring_sidecar_judge_shed_total", "reason")
            print(f"judge: {workers} worker(s) so far: runs by outcome {runs}; judge calls {calls}; shed {shed}")
    finally:
        stop_sidecar(sidecar)
    print(
        f"judge: sidecar, {workers} worker(s) (one prompt step per run): {ours:.0f} judge calls/s at the server; "
        f"sidecar CPU {used.cpu_s:.1f} s over {used.wall_s:.1f} s ({100 * used.fraction:.0f} % of one core, "
        "all its processes)"
    )
    return {"rate": ours, "cpu_frac": used.fraction}


async def section_judge(args: argparse.Namespace, bootstrap: str, pool: list[Template], work: Path) -> dict:
    from bench.judge_overhead import _drive, _raw_call

    stats = work / "judge-stats"
    server, url = start_judge(args.latency_ms, stats, args.judge_server)
    figures: dict[str, Any] = {}
    try:
        topics = await new_topics(bootstrap, "judge")
        await produce_backlog(bootstrap, topics[0], pool, args.judge_records)
        connector = aiohttp.TCPConnector(limit=max(512, args.concurrency))
        async with aiohttp.ClientSession(connector=connector) as session:
            call = _raw_call(session, url)
            await _drive(call, args.concurrency, args.concurrency)  # warm-up: fills the pool
            task = asyncio.create_task(_drive(call, args.judge_calls, args.concurrency))
            with Usage(server.pid) as server_cpu, Usage(None) as bench_cpu:
                raw = await server_rate(stats, args.judge_calls, task)
            await task
        print(
            f"judge: raw aiohttp, concurrency {args.concurrency}, {args.latency_ms:g} ms: {raw:.0f} calls/s; "
            f"CPU: judge server {server_cpu.fraction:.2f}, raw client {bench_cpu.fraction:.2f} (cores)"
        )
        figures["raw_calls_per_s"] = round(raw, 1)
        figures["judge_server_cpu_frac_raw"] = round(server_cpu.fraction, 2)
        # The goal figure (no suffix): the pod as deployed here, --workers processes sharing the concurrency.
        for workers, suffix in ((args.workers, ""), (1, "_1w")) if args.workers > 1 else ((1, ""),):
            with Usage(server.pid) as server_cpu:
                result = await judged_rate(args, bootstrap, topics, url, stats, work, workers)
            print(f"judge: judge server CPU while the sidecar ran: {server_cpu.fraction:.2f} cores")
            figures[f"judge_server_cpu_frac{suffix}"] = round(server_cpu.fraction, 2)
            figures[f"judge_calls_per_s{suffix}"] = round(result["rate"], 1)
            figures[f"bound_fraction{suffix}"] = round(result["rate"] / raw, 3)
            figures[f"judge_sidecar_cpu_frac{suffix}"] = round(result["cpu_frac"], 2)
    finally:
        server.terminate()
        server.wait(10)
    fraction = figures["bound_fraction"]
    bound = args.concurrency / (args.latency_ms / 1000.0)
    print(
        f"judge: bound_fraction {fraction:.3f} with {args.workers} worker(s) (goal ≥ 0.9): "
        f"{'OK' if fraction >= 0.9 else 'MISSED'}; concurrency/latency bound {bound:.0f} calls/s"
    )
    return figures


# --- main -------------------------------------------------------------------------------------------------

SECTIONS = ("throughput", "latency", "rss", "judge", "trace")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    pool = build_pool(args.pool)
    print(f"pool: {len(pool)} traces built in {time.perf_counter() - started:.1f} s")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        work = Path(args.workdir or tmp)
        async with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap_servers
            process = getattr(broker, "_process", None)
            broker_pid = process.pid if process is not None else None
            for name in SECTIONS:
                if args.only and name != args.only:
                    continue
                t0 = time.perf_counter()
                if name == "throughput":
                    figures.update(await section_throughput(args, bootstrap, pool, work))
                elif name == "latency":
                    figures.update(await section_latency(args, bootstrap, pool, work))
                elif name == "rss":
                    figures.update(await section_rss(args, bootstrap, pool, work, broker_pid))
                elif name == "trace":
                    from bench.e2e_traces import section_trace  # the SDK builds its own traces

                    figures.update(await section_trace(args, bootstrap, work, broker_pid))
                else:
                    figures.update(await section_judge(args, bootstrap, pool, work / "judge"))
                print(f"{name}: section took {time.perf_counter() - t0:.0f} s")
            if broker_pid:
                print(f"broker RSS at the end: {rss_mb(broker_pid):.0f} MB")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", choices=SECTIONS)
    parser.add_argument("--pool", type=int, default=300, help="distinct generated traces to re-key")
    parser.add_argument("--traces", type=int, default=20_000, help="throughput: records (4 spans each)")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency: traces/s")
    parser.add_argument("--duration-s", type=float, default=20.0, help="latency: seconds of traffic")
    parser.add_argument("--latency-grace-s", type=float, default=30.0, help="latency: wait for late scores")
    parser.add_argument(
        "--rss-timeout-s", type=float, default=None, help="rss: sample at most this long (default --timeout-s)"
    )
    parser.add_argument("--backlog", type=int, default=250_000, help="rss: records (4 spans each)")
    parser.add_argument("--judge-records", type=int, default=12_000, help="judge: backlog for the sidecar")
    parser.add_argument("--judge-calls", type=int, default=6_000, help="judge: raw client calls")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument(
        "--workers",
        type=int,
        default=min(os.cpu_count() or 1, PARTITIONS),
        help="throughput and judge: the sidecar's runtime.workers for the goal figures (default: the cores, at "
        "most one per partition); "
        "1-process figures are measured too, suffixed _1w",
    )
    parser.add_argument("--latency-ms", type=float, default=200.0, help="judge server latency")
    parser.add_argument("--trace-pool", type=int, default=50, help="trace: distinct 10-span traces to re-key")
    parser.add_argument("--trace-traces", type=int, default=10_000, help="trace: backlog for the throughput")
    parser.add_argument("--trace-rate", type=float, default=1000.0, help="trace: latency traces/s")
    parser.add_argument("--trace-idle-s", type=float, default=2.0, help="trace: latency runtime.trace_buffer.idle_s")
    parser.add_argument("--trace-backlog", type=int, default=50_000, help="trace: rss backlog (traces)")
    parser.add_argument(
        "--judge-server",
        choices=("fixed", "scripted"),
        default="fixed",
        help="judge: the stand-in (fixed: one pre-encoded reply, a fraction of scripted's CPU per call; scripted: "
        "the tests' aiohttp server, on the cores the sidecar uses)",
    )
    parser.add_argument("--timeout-s", type=float, default=900.0, help="max drain time per section")
    parser.add_argument("--workdir", help="keep sidecar configs and logs here (default: a temporary directory)")
    parser.add_argument("--max-in-flight-runs", type=int, help="the sidecar's runtime.max_in_flight_runs")
    parser.add_argument("--max-buffered-bytes", type=int, help="the sidecar's runtime.max_buffered_bytes")
    parser.add_argument("--score-partitions", type=int, default=1, help="partitions of the score topic")
    parser.add_argument(
        "--no-kafka-scores", action="store_true", help="the sidecar exports to prometheus only (diagnosis)"
    )
    args = parser.parse_args()
    SCORE_PARTITIONS[0] = args.score_partitions
    KAFKA_SCORES[0] = not args.no_kafka_scores
    for key in ("max_in_flight_runs", "max_buffered_bytes"):
        if getattr(args, key) is not None:
            RUNTIME[key] = getattr(args, key)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the sidecar
    figures = asyncio.run(run(args))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
