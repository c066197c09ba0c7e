"""``bench/e2e.py --only trace``: whole-trace scoring (``scope: trace``) on traces of 10 spans in 3 records.

Traffic: a GenAI agent trace made by the real SDK (HTTP root → agent → an LLM call asking for tools, three
``execute_tool`` spans, a retriever, the answering LLM call, two database calls), its spans split in end
order into 3 records as a Collector batching by time writes them, re-keyed with a fresh trace id per trace.
The scorer is content-similarity (code, no judge) in both scopes, so the figures are the runtime's.

* ``trace_throughput`` (one process): a backlog of ``--trace-traces`` traces drained twice, on fresh topics,
  by the sidecar with ``scope: span`` (the agent span alone, scored at once) and with ``scope: trace``
  (every span buffered, each trace assembled once done; ``idle_s`` 0.5 so the last traces wait little),
  from readiness to the last committed record. ``trace_vs_span`` = trace / span, in traces/s.
* ``trace_latency``: ``--trace-rate`` traces/s for ``--duration-s``, the three records of a trace sent back
  to back, re-stamped so the trace's last span ends now; per score: arrival at a consumer of the score
  topic − that end. The pod as deployed here (``--workers``, default 2). Goal: p99 < ``idle_s``
  (``--trace-idle-s``) + 1 s. Run again at half the rate; each run prints the CPU the sidecar, the load
  generator (this process: it re-stamps every record) and the broker took while sending, in cores of this
  machine, since all three share them.
* ``trace_rss`` (one process): a backlog of ``--trace-backlog`` traces drained with ``scope: trace``, VmRSS
  sampled every 0.5 s. ``trace_rss_flat`` = the max over the second half of the samples ≤ 1.1 × the first half's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from bench import e2e_harness as harness

__all__ = ["section_trace"]

SIMILARITY = "content-similarity"
_RECORDS = (
    ("chat plan", "execute_tool search_flights", "execute_tool check_weather"),
    ("execute_tool book_hotel", "retrieve fares", "SELECT users", "SELECT trips"),
    ("chat answer", "invoke_agent travel", "POST /trips"),
)


@dataclass(frozen=True)
class TraceTemplate:
    records: tuple[bytes, ...]
    trace_id: bytes


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def _spans(seed: int) -> list[ReadableSpan]:
    rng = random.Random(seed)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-api"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    city = rng.choice(["Oslo", "Lyon", "Porto", "Krakow", "Gent"])
    answer = f"Flights to {city}, the weather and a hotel are set."
    with (
        tracer.start_as_current_span("POST /trips", kind=SpanKind.SERVER),
        tracer.start_as_current_span(
            "invoke_agent travel",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "travel",
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Plan trips. Be brief."}]),
                "gen_ai.input.messages": _messages("user", f"A weekend in {city}, please."),
                "gen_ai.output.messages": _messages("assistant", answer),
            },
        ),
    ):
        with tracer.start_as_current_span(
            "chat plan",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.output.messages": _messages("assistant", "Searching flights, weather, hotels."),
                "gen_ai.usage.input_tokens": 300,
                "gen_ai.usage.output_tokens": 40,
            },
        ):
            pass
        for tool, result in (("search_flights", "SK 812"), ("check_weather", "snow"), ("book_hotel", "Grand")):
            with tracer.start_as_current_span(
                f"execute_tool {tool}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps({"city": city}),
                    "gen_ai.tool.call.result": json.dumps({"result": result}),
                },
            ):
                pass
        with tracer.start_as_current_span(
            "retrieve fares",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.content": f"Weekend fares to {city} start at 89 EUR.",
            },
        ):
            pass
        for table in ("users", "trips"):
            with tracer.start_as_current_span(
                f"SELECT {table}", kind=SpanKind.CLIENT, attributes={"db.system.name": "postgresql"}
            ):
                pass
        with tracer.start_as_current_span(
            "chat answer",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.output.messages": _messages("assistant", answer),
                "gen_ai.usage.input_tokens": 500,
                "gen_ai.usage.output_tokens": 30,
            },
        ):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def build_trace_pool(size: int) -> list[TraceTemplate]:
    pool = []
    for seed in range(size):
        spans = {s.name: s for s in _spans(seed)}
        assert len(spans) == 10
        records = tuple(encode_spans([spans[name] for name in group]).SerializeToString() for group in _RECORDS)
        context = spans["POST /trips"].get_span_context()
        assert context is not None
        pool.append(TraceTemplate(records, context.trace_id.to_bytes(16, "big")))
    return pool


def _restamp(data: bytes, trace_id: bytes, delta_ns: int) -> bytes:
    request = ExportTraceServiceRequest.FromString(data)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                span.trace_id = trace_id
                span.start_time_unix_nano += delta_ns
                span.end_time_unix_nano += delta_ns
    return request.SerializeToString()


def _last_end(template: TraceTemplate) -> int:
    request = ExportTraceServiceRequest.FromString(template.records[-1])
    return max(s.end_time_unix_nano for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)


async def produce_trace_backlog(bootstrap: str, topic: str, pool: list[TraceTemplate], count: int) -> float:
    """``count`` traces (3 records each), interleaved by waves of 100 as a busy partition holds them."""
    producer = harness.producer_for(bootstrap)
    await producer.start()
    started = time.perf_counter()
    try:
        pending = []
        for wave in range(0, count, 100):
            traces = [(random.randbytes(16), pool[i % len(pool)]) for i in range(wave, min(count, wave + 100))]
            for part in range(3):
                for trace_id, template in traces:
                    value = template.records[part].replace(template.trace_id, trace_id)
                    pending.append(await producer.send(topic, value, key=trace_id.hex().encode()))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return count / (time.perf_counter() - started)


def _scorers(scope: str) -> list[dict[str, Any]]:
    return [{"id": "similarity", "kind": SIMILARITY, "targets": {"kinds": ["agent"], "scope": scope}}]


async def _drain_backlog(
    args: argparse.Namespace, bootstrap: str, pool: list[TraceTemplate], work: Path, scope: str, count: int,
    *, interval_s: float = 0.1, name: str = "trace",
) -> dict[str, Any]:  # fmt: skip
    topics = await harness.new_topics(bootstrap, name)
    await produce_trace_backlog(bootstrap, topics[0], pool, count)
    sidecar = harness.make_sidecar(
        bootstrap,
        topics,
        work / f"{name}-{scope}",
        scorers=_scorers(scope),
        runtime={"trace_buffer": {"idle_s": 0.5}},
    )
    sidecar.start()
    try:
        async with harness.Committed(bootstrap, f"{topics[0]}-group", topics[0]) as committed:
            await sidecar.wait_ready(60)
            return await harness.drain(sidecar, committed, 3 * count, args.timeout_s, interval_s, partial=True)
    finally:
        harness.stop_sidecar(sidecar)


async def _throughput(args: argparse.Namespace, bootstrap: str, pool: list[TraceTemplate], work: Path) -> dict:
    figures: dict[str, Any] = {}
    rates = {}
    for scope in ("span", "trace"):
        result = await _drain_backlog(args, bootstrap, pool, work, scope, args.trace_traces)
        rates[scope] = result["rate"] / 3  # records/s → traces/s
        print(
            f"trace: scope {scope}: {rates[scope]:.0f} traces/s ({rates[scope] * 10:.0f} spans/s) draining "
            f"{args.trace_traces} traces of 10 spans in 3 records; CPU {result['cpu_s']:.1f} s over "
            f"{result['wall_s']:.1f} s wall"
        )
        figures[f"trace_{scope}_traces_per_s"] = round(rates[scope], 1)
    figures["trace_vs_span"] = round(rates["trace"] / rates["span"], 3)
    print(f"trace: scope trace / scope span = {figures['trace_vs_span']:.3f}")
    return figures


async def _latency(
    args: argparse.Namespace, bootstrap: str, pool: list[TraceTemplate], work: Path, rate: float, broker_pid: int | None
) -> dict:
    topics = await harness.new_topics(bootstrap, "trace-latency")
    spans_topic, scores_topic, _ = topics
    idle_s = args.trace_idle_s
    sidecar = harness.make_sidecar(
        bootstrap,
        topics,
        work / "trace-latency",
        scorers=_scorers("trace"),
        runtime={"trace_buffer": {"idle_s": idle_s}},
        workers=args.workers,
    )
    sidecar.start()
    arrivals: dict[str, float] = {}
    ends: dict[str, int] = {}
    last_ends = [_last_end(t) for t in pool]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest")
    producer = harness.producer_for(bootstrap)
    stopping = asyncio.Event()

    async def collect() -> None:
        while not stopping.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batches.values():
                for r in records:
                    arrivals.setdefault(json.loads(r.value)["traceId"], now)

    async def send(i: int) -> str:
        template = pool[i % len(pool)]
        trace_id = random.randbytes(16)
        now = time.time_ns()
        delta = now - last_ends[i % len(pool)]
        key = trace_id.hex()
        ends[key] = now
        for data in template.records:
            await producer.send(spans_topic, _restamp(data, trace_id, delta), key=key.encode())
        return key

    try:
        await consumer.start()
        consumer.assign([TopicPartition(scores_topic, 0)])
        await producer.start()
        collector = asyncio.create_task(collect())
        await sidecar.wait_ready(60)
        warm = [await send(i) for i in range(50)]
        await harness.wait_until(lambda: all(k in arrivals for k in warm), 60)
        ends.clear()
        total = int(rate * args.duration_s)
        assert sidecar.process is not None
        pids = (sidecar.process.pid, broker_pid)
        cpu0 = [harness.process_cpu_s(pid) if pid else 0.0 for pid in pids]
        own0 = _own_cpu_s()
        started = time.monotonic()
        sent = 0
        while sent < total:
            due = min(total, int((time.monotonic() - started) * rate) + 1)
            while sent < due:
                await send(sent)
                sent += 1
            await asyncio.sleep(0.005)
        send_s = time.monotonic() - started
        cpu1 = [harness.process_cpu_s(pid) if pid else 0.0 for pid in pids]
        sidecar_cores, broker_cores = ((b - a) / send_s for a, b in zip(cpu0, cpu1, strict=True))
        generator_cores = (_own_cpu_s() - own0) / send_s
        await harness.wait_until(lambda: all(k in arrivals for k in ends), args.latency_grace_s + idle_s)
        stopping.set()
        await collector
    finally:
        harness.stop_sidecar(sidecar)
        await producer.stop()
        await consumer.stop()
    latencies = sorted(arrivals[k] - end / 1e9 for k, end in ends.items() if k in arrivals)
    missing = len(ends) - len(latencies)

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    p50, p99 = pct(0.5), pct(0.99)
    goal = idle_s + 1.0
    per_trace_ms = 1000 * sidecar_cores * send_s / max(1, len(ends))
    print(
        f"trace: latency at {len(ends) / send_s:.0f} traces/s for {send_s:.1f} s (idle_s {idle_s:g}, "
        f"{args.workers} workers): last span end → score p50 {p50:.2f} s, p99 {p99:.2f} s, max "
        f"{latencies[-1]:.2f} s; {missing} missing"
    )
    print(
        f"trace: CPU while sending, in cores: sidecar {sidecar_cores:.2f} ({per_trace_ms:.2f} ms per trace), "
        f"load generator {generator_cores:.2f}, broker {broker_cores:.2f}; together "
        f"{sidecar_cores + generator_cores + broker_cores:.2f} of {os.cpu_count()}"
    )
    verdict = "OK" if p99 < goal and not missing else "MISSED"
    print(f"trace: p99 {p99:.2f} s at {rate:g} traces/s (goal < idle_s + 1 = {goal:g} s): {verdict}")
    tag = f"_{rate:g}"
    return {
        f"trace_p50_s{tag}": round(p50, 3),
        f"trace_p99_s{tag}": round(p99, 3),
        f"trace_p99_over_idle_s{tag}": round(p99 - idle_s, 3),
        f"trace_latency_missing{tag}": missing,
        f"trace_sidecar_cores{tag}": round(sidecar_cores, 2),
        f"trace_generator_cores{tag}": round(generator_cores, 2),
        f"trace_broker_cores{tag}": round(broker_cores, 2),
        f"trace_sidecar_ms_per_trace{tag}": round(per_trace_ms, 3),
    }


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


async def _rss(args: argparse.Namespace, bootstrap: str, pool: list[TraceTemplate], work: Path) -> dict:
    result = await _drain_backlog(
        args, bootstrap, pool, work, "trace", args.trace_backlog, interval_s=0.5, name="trace-rss"
    )
    samples = [mb for _, mb in result["samples"]]
    half = len(samples) // 2
    first_max, last_max = max(samples[: max(half, 1)]), max(samples[half:])
    flat = last_max <= 1.1 * first_max
    print(
        f"trace: rss draining {args.trace_backlog} traces ({args.trace_backlog * 10} spans): "
        f"{result['committed'] // 3} traces at {result['rate'] / 3:.0f}/s; RSS max {max(samples):.0f} MB "
        f"(first half {first_max:.0f}, second half {last_max:.0f}), flat={flat}"
    )
    return {
        "trace_rss_mb": round(max(samples), 1),
        "trace_rss_flat": str(flat).lower(),
        "trace_rss_first_half_mb": round(first_max, 1),
        "trace_rss_second_half_mb": round(last_max, 1),
        "trace_rss_drained_traces": result["committed"] // 3,
    }


async def section_trace(
    args: argparse.Namespace, bootstrap: str, work: Path, broker_pid: int | None = None
) -> dict[str, Any]:
    started = time.perf_counter()
    pool = build_trace_pool(args.trace_pool)
    print(f"trace: pool of {len(pool)} traces (10 spans, 3 records) built in {time.perf_counter() - started:.1f} s")
    figures: dict[str, Any] = {}
    figures.update(await _throughput(args, bootstrap, pool, work))
    for rate in (args.trace_rate, args.trace_rate / 2):
        figures.update(await _latency(args, bootstrap, pool, work, rate, broker_pid))
    figures.update(await _rss(args, bootstrap, pool, work))
    return figures
