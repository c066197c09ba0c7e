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
  raw consumer's, so the re-read hardly matters to it). Against it: ``vs_floor`` (the sidecar's traces/s /
  the floor's) and ``cpu_vs_floor`` (the floor's CPU per trace, this process / the sidecar's, all its
  processes: less sensitive to other load on the host), each per variant; goal for one process ≥ 0.5.
* ``sampling`` — sampling decided from the record key (``kafka.key_sampling``): the records are keyed by
  their trace id as the Collector's ``partition_traces_by_id`` keys them, and one process of the sidecar
  (content similarity, kafka_scores + prometheus) drains a fresh topic of the same traffic in three ways:
  ``full`` (``sampling: 1``), ``decode`` (``sampling: --sample-rate``, ``key_sampling: false``: every record
  decoded, the sampled-out ones dropped after) and ``key`` (the same rate, ``key_sampling: true``: a record
  whose trace is sampled out is counted and committed undecoded). ``--sampling-rounds`` rounds, the order
  rotating each round; figures: the mean over rounds of traces/s and of the sidecar's CPU ms per trace,
  and per round the ratios ``key / decode`` and ``key / full`` (``sampling_key_vs_decode``,
  ``sampling_key_vs_full``: their mean, with min–max ``_spread``).
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
  CPU in the same windows, per judge call counted at the server: ``judge_sidecar_cpu_ms_per_run`` (the
  sidecar, all its processes: the record, the run, the call, the export) and ``raw_client_cpu_ms_per_call``
  (this process, driving the raw client).

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

Here: the throughput, latency and rss sections and the command line. What every section shares (traffic,
topics, the sidecar subprocess, its progress): ``bench/e2e_harness.py``; the judge section:
``bench/e2e_judge.py``; the trace section: ``bench/e2e_traces.py``.

    .venv/bin/python bench/e2e.py [--only throughput|sampling|latency|rss|judge|trace] [--traces 20000] [--rate 1000]
        [--duration-s 20] [--backlog 250000] [--rss-timeout-s S] [--judge-records 12000]
        [--judge-calls 6000] [--workers N] [--no-kafka-scores] [--workdir DIR] [--sampling-traces 60000]
        [--sample-rate 0.1] [--sampling-rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from bench.e2e_harness import (  # noqa: E402
    KAFKA_SCORES,
    PARTITIONS,
    RUNTIME,
    SCORE_PARTITIONS,
    Committed,
    Template,
    build_pool,
    drain,
    make_sidecar,
    new_topics,
    produce_backlog,
    producer_for,
    restamp,
    rss_mb,
    stop_sidecar,
    wait_until,
)
from bench.e2e_judge import section_judge  # noqa: E402
from bench.python_floor import bare_score_records  # noqa: E402
from sidecar.embedded.broker import EmbeddedBroker  # noqa: E402

# --- throughput -------------------------------------------------------------------------------------------


async def raw_consume(
    bootstrap: str, topic: str, expect: int, work: Callable[[bytes], object] = ExportTraceServiceRequest.FromString
) -> tuple[float, float]:
    """Records/s and this process's CPU seconds per record, both from the first batch to the last record."""
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
                first = (time.perf_counter(), count, time.process_time())
        assert first is not None
        done = count - first[1]
        return done / (time.perf_counter() - first[0]), (time.process_time() - first[2]) / done
    finally:
        await consumer.stop()


async def section_throughput(args: argparse.Namespace, bootstrap: str, pool: list[Template], work: Path) -> dict:
    topics = await new_topics(bootstrap, "throughput")
    produced = await produce_backlog(bootstrap, topics[0], pool, args.traces)
    print(f"throughput: produced {args.traces} traces ({args.traces * 4} spans) at {produced:.0f}/s")
    raw, raw_cpu = await raw_consume(bootstrap, topics[0], args.traces)
    print(f"throughput: raw aiokafka consume + FromString: {raw:.0f} traces/s, {1000 * raw_cpu:.4f} ms CPU each")
    floor, floor_cpu = await raw_consume(bootstrap, topics[0], args.traces, bare_score_records)
    print(
        f"throughput: the Python floor (same consume + bench/python_floor.py's bare scoring, no produce): "
        f"{floor:.0f} traces/s, {floor / raw:.3f} of raw; {1000 * floor_cpu:.4f} ms CPU per trace"
    )
    figures: dict[str, Any] = {
        "floor_traces_per_s": round(floor, 1),
        "floor_ratio": round(floor / raw, 3),
        "floor_cpu_ms_per_trace": round(1000 * floor_cpu, 4),
    }
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
        cpu_ms = 1000 * result["cpu_s"] / args.traces
        print(
            f"throughput: sidecar (content-similarity, {label}): {ours:.0f} traces/s, ratio {ratio:.3f}, "
            f"{ours / floor:.3f} of the floor; sidecar CPU {result['cpu_s']:.1f} s over {result['wall_s']:.1f} s wall "
            f"({100 * result['cpu_s'] / result['wall_s']:.0f} % of one core, all its processes), {cpu_ms:.4f} ms "
            f"per trace ({1000 * floor_cpu / cpu_ms:.3f} of the floor's CPU per trace)"
        )
        figures[f"traces_per_s{suffix}"] = round(ours, 1)
        figures[f"ratio{suffix}"] = round(ratio, 3)
        figures[f"vs_floor{suffix}"] = round(ours / floor, 3)
        figures[f"sidecar_cpu_frac{suffix}"] = round(result["cpu_s"] / result["wall_s"], 2)
        figures[f"cpu_ms_per_trace{suffix}"] = round(cpu_ms, 4)
        figures[f"cpu_vs_floor{suffix}"] = round(1000 * floor_cpu / cpu_ms, 3)
    figures["raw_traces_per_s"] = round(raw, 1)
    ratio = figures.get("ratio", figures["ratio_prometheus_only"])
    print(f"throughput: ratio {ratio:.3f} (goal ≥ 0.5): {'OK' if ratio >= 0.5 else 'MISSED'}")
    return figures


# --- sampling ------------------------------------------------------------------------------------------


async def section_sampling(args: argparse.Namespace, bootstrap: str, pool: list[Template], work: Path) -> dict:
    rate = args.sample_rate
    variants: dict[str, dict[str, Any]] = {
        "full": {"sampling": 1.0, "key_sampling": True},
        "decode": {"sampling": rate, "key_sampling": False},
        "key": {"sampling": rate, "key_sampling": True},
    }
    names = list(variants)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu_ms: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(args.sampling_rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            variant = variants[name]
            topics = await new_topics(bootstrap, "sampling")
            await produce_backlog(bootstrap, topics[0], pool, args.sampling_traces)
            group = f"group-{name}"
            sidecar = make_sidecar(
                bootstrap,
                topics,
                work / f"sampling-{name}-{round_index}",
                group=group,
                scorers=[{"id": "similarity", "kind": "content-similarity", "sampling": variant["sampling"]}],
                kafka={"key_sampling": variant["key_sampling"]},
            )
            sidecar.start()
            try:
                async with Committed(bootstrap, f"{topics[0]}-{group}", topics[0]) as committed:
                    await sidecar.wait_ready(60)
                    result = await drain(sidecar, committed, args.sampling_traces, args.timeout_s)
            finally:
                stop_sidecar(sidecar)
            rates[name].append(result["rate"])
            cpu_ms[name].append(1000 * result["cpu_s"] / args.sampling_traces)
            print(
                f"sampling: round {round_index + 1}, {name} (sampling {variant['sampling']:g}, key_sampling "
                f"{str(variant['key_sampling']).lower()}): {result['rate']:.0f} traces/s, "
                f"{cpu_ms[name][-1]:.3f} ms of sidecar CPU per trace"
            )
    figures: dict[str, Any] = {"sampling_rate": rate, "sampling_rounds": args.sampling_rounds}
    for name in names:
        figures[f"sampling_{name}_traces_per_s"] = round(statistics.fmean(rates[name]), 1)
        figures[f"sampling_{name}_cpu_ms_per_trace"] = round(statistics.fmean(cpu_ms[name]), 4)
    for other in ("decode", "full"):
        ratios = [k / o for k, o in zip(rates["key"], rates[other], strict=True)]
        cpu_ratios = [o / k for k, o in zip(cpu_ms["key"], cpu_ms[other], strict=True)]
        figures[f"sampling_key_vs_{other}"] = round(statistics.fmean(ratios), 2)
        figures[f"sampling_key_vs_{other}_spread"] = f"{min(ratios):.2f}-{max(ratios):.2f}"
        figures[f"sampling_key_vs_{other}_cpu"] = round(statistics.fmean(cpu_ratios), 2)
    print(
        f"sampling: at {rate:g}, sampling from the key: x{figures['sampling_key_vs_decode']} the rate of decoding "
        f"every record (x{figures['sampling_key_vs_decode_cpu']} less CPU per trace), "
        f"x{figures['sampling_key_vs_full']} the rate at sampling 1"
    )
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


# --- main -------------------------------------------------------------------------------------------------

SECTIONS = ("throughput", "sampling", "latency", "rss", "judge", "trace")


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
                elif name == "sampling":
                    figures.update(await section_sampling(args, bootstrap, pool, work))
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
    parser.add_argument("--sampling-traces", type=int, default=60_000, help="sampling: records (4 spans each)")
    parser.add_argument("--sample-rate", type=float, default=0.1, help="sampling: the scorer's sampling rate")
    parser.add_argument("--sampling-rounds", type=int, default=2, help="sampling: rounds of the three variants")
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
