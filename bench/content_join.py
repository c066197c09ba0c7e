"""CPU per trace with the content join on (``kafka.log_topics``) against spans-only traffic, in one run.

The service's record handler and stages in process (no broker): a span-scope content-similarity scorer over LLM call
spans, real claims, a dispatcher with no sinks. Three sides, each over ``--traces`` traces of one LLM call, made with
the OpenTelemetry SDK and encoded as the Collector writes them (ids changed per trace):

- ``spans_only``: the content on the span (openai-v2 ``span_only``), no logs topic: the baseline;
- ``join``: the content in a log record (openai-v2 ``event_only``: the span has none), the logs topic joined: the span
  record arrives first and waits, its log record completes it (the usual order: a span ends before its content's
  batch is exported);
- ``join_idle``: the traffic of ``spans_only`` with the join configured: what the join costs content that needs none.

Sides interleave over ``--rounds`` rounds (a noisy neighbour slows them alike); each reports its best round.

    .venv/bin/python bench/content_join.py [--traces 2000] [--rounds 5]

The last line holds the figures as ``key=value`` pairs (``*_us``: CPU µs per trace; ``join_vs_spans_only``,
``join_idle_vs_spans_only``: the ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import TopicPartition
from opentelemetry import trace as otel_trace
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.conventions.selection import Selection
from sidecar.core.observers import ServiceObserver
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.engine import Engine
from sidecar.runtime.records import RecordHandler
from sidecar.runtime.stages import build_stages
from sidecar.scorers import create_content_similarity_scorer

INPUT = json.dumps(
    [
        {"role": "system", "parts": [{"type": "text", "content": "You answer geography questions briefly."}]},
        {"role": "user", "parts": [{"type": "text", "content": "What is the capital of France, and why?"}]},
    ]
)
OUTPUT = json.dumps(
    [{"role": "assistant", "parts": [{"type": "text", "content": "Paris: the seat of government since 987."}]}]
)


@dataclass(frozen=True)
class Template:
    trace_id: bytes
    span_id: bytes
    span_with_content: bytes  # otlp_spans record, span_only
    span_without_content: bytes  # otlp_spans record, event_only
    logs: bytes  # otlp_logs record: the details event


def template() -> Template:
    resource = Resource.create({"service.name": "app"})
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    tracer = tracer_provider.get_tracer("bench")
    base = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.provider.name": "openai"}
    with tracer.start_as_current_span("chat gpt-4o", attributes=base) as bare:
        context = otel_trace.set_span_in_context(bare)
        details = {**base, "gen_ai.input.messages": INPUT, "gen_ai.output.messages": OUTPUT}
        logger_provider.get_logger("bench").emit(
            LogRecord(event_name="gen_ai.client.inference.operation.details", attributes=details, context=context)
        )
    with tracer.start_as_current_span("chat gpt-4o", attributes={**base, **details}):
        pass
    bare_span, full_span = spans.get_finished_spans()
    # The span with content gets the bare span's ids, so that one id swap serves all three records.
    full = encode_spans([full_span])
    full.resource_spans[0].scope_spans[0].spans[0].span_id = bare_span.context.span_id.to_bytes(8, "big")
    full.resource_spans[0].scope_spans[0].spans[0].trace_id = bare_span.context.trace_id.to_bytes(16, "big")
    return Template(
        trace_id=bare_span.context.trace_id.to_bytes(16, "big"),
        span_id=bare_span.context.span_id.to_bytes(8, "big"),
        span_with_content=full.SerializeToString(),
        span_without_content=encode_spans([bare_span]).SerializeToString(),
        logs=encode_logs(logs.get_finished_logs()).SerializeToString(),
    )


@dataclass
class Record:
    """What intake hands the record handler (aiokafka's ConsumerRecord, the fields read)."""

    value: bytes
    key: bytes
    offset: int
    timestamp: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()


class Tally(ServiceObserver):
    def __init__(self) -> None:
        self.finished = 0
        self.joined = 0

    def run_finished(self, run: Any) -> None:
        self.finished += 1

    def content_waits(self, outcome: Any, n: int = 1) -> None:
        self.joined += n if outcome == "joined" else 0


async def side(name: str, plan: Template, traces: int, rng: random.Random) -> float:
    """CPU seconds per trace of one side."""
    join = name != "spans_only"
    ingest = IngestConfig(topic="spans", log_topics=frozenset({"logs"}) if join else frozenset())
    tally = Tally()
    engine = Engine.build((), observer=tally)
    dead_letters = DeadLetterPublisher("127.0.0.1:1", "dead", encoding="otlp_proto")  # no dead letters here
    scorer = ConfiguredScorer(create_content_similarity_scorer(), selection=Selection(kinds=frozenset({"inference"})))
    stages = build_stages([scorer], engine, dead_letters=dead_letters, ingest=ingest)
    handler = RecordHandler(
        ingest, stages, claims=engine.claims, capacity=engine.capacity, observer=tally, dead_letters=dead_letters
    )
    spans, logs = TopicPartition("spans", 0), TopicPartition("logs", 0)
    started = time.process_time()
    for i in range(traces):
        trace_id = rng.randbytes(16)
        key = trace_id.hex().encode()
        if name == "join":
            await handler.handle(spans, Record(plan.span_without_content.replace(plan.trace_id, trace_id), key, i))
            await handler.handle(logs, Record(plan.logs.replace(plan.trace_id, trace_id), key, i))
        else:
            await handler.handle(spans, Record(plan.span_with_content.replace(plan.trace_id, trace_id), key, i))
        if i % 200 == 199:
            await engine.dispatcher.drain(30)
    await engine.dispatcher.drain(30)
    seconds = time.process_time() - started
    assert tally.finished == traces, (name, tally.finished)  # every trace scored: the work was done
    assert tally.joined == (traces if name == "join" else 0), (name, tally.joined)
    assert engine.claims.held == 0  # every record done, both topics
    return seconds / traces


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    plan = template()
    rng = random.Random(11)
    best = {"spans_only": float("inf"), "join": float("inf"), "join_idle": float("inf")}
    for _ in range(args.rounds):
        for name in best:
            best[name] = min(best[name], await side(name, plan, args.traces, rng))
    us = {name: seconds * 1e6 for name, seconds in best.items()}
    print("CPU per trace: " + ", ".join(f"{name} {value:.1f} µs" for name, value in us.items()))
    print(
        f"traces={args.traces} rounds={args.rounds} "
        + " ".join(f"{name}_us={value:.1f}" for name, value in us.items())
        + f" join_vs_spans_only={us['join'] / us['spans_only']:.2f}"
        + f" join_idle_vs_spans_only={us['join_idle'] / us['spans_only']:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
