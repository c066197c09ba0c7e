"""Agent traces spread over several Kafka records, made by the real OpenTelemetry SDK.

Each builder returns a :class:`SplitTrace`: the trace's spans encoded as the Collector's Kafka exporter writes
them (one ``ExportTraceServiceRequest`` per record, keyed by the trace id in hex), split into records in the
order the spans end, as a Collector batching by time splits a long trace.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, Tracer

from sidecar.core import names as n
from tests.support.otel import otlp_proto, record_spans

__all__ = [
    "INSTRUCTIONS",
    "RETRIEVED",
    "TOOLS",
    "SplitTrace",
    "azure_events_trace",
    "genai_agent_with_three_tools",
    "openinference_agent_with_llm_child",
    "produce_records",
    "semconv_1_26_events_trace",
    "split_spans",
    "unfinished_root_trace",
]

INSTRUCTIONS = "Answer in one sentence. Never promise a delivery date."
RETRIEVED = "Parcel 4411 left the Lyon depot on Monday."
TOOLS = ("search_flights", "check_weather", "book_hotel")


@dataclass(frozen=True)
class SplitTrace:
    trace_id: str
    agent_span_id: str
    records: tuple[bytes, ...]  # encoded ExportTraceServiceRequest, in the order they are produced
    spans: tuple[ReadableSpan, ...]

    @property
    def key(self) -> bytes:
        return self.trace_id.encode()


def split_spans(spans: Sequence[ReadableSpan], groups: Sequence[Sequence[str]], agent: str) -> SplitTrace:
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == sorted(name for group in groups for name in group), sorted(by_name)
    agent_context = by_name[agent].get_span_context()
    assert agent_context is not None
    records = tuple(otlp_proto([by_name[name] for name in group]) for group in groups)
    return SplitTrace(f"{agent_context.trace_id:032x}", f"{agent_context.span_id:016x}", records, tuple(spans))


def openinference_agent_with_llm_child(question: str = "Where is my parcel 4411?") -> SplitTrace:
    """An OpenInference AGENT span carrying only input/output values; the system instructions are on its LLM
    child, the retrieved document on a RETRIEVER span. Two records."""

    def build(tracer: Tracer) -> None:
        with (
            tracer.start_as_current_span("POST /support", kind=SpanKind.SERVER),
            tracer.start_as_current_span(
                "support agent",
                attributes={
                    n.OPENINFERENCE_SPAN_KIND: "AGENT",
                    n.OI_AGENT_NAME: "support-bot",
                    n.INPUT_VALUE: question,
                    n.OUTPUT_VALUE: "It left the Lyon depot on Monday.",
                },
            ),
        ):
            with tracer.start_as_current_span(
                "retrieve",
                attributes={
                    n.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
                    "retrieval.documents.0.document.content": RETRIEVED,
                },
            ):
                pass
            with tracer.start_as_current_span(
                "llm",
                attributes={
                    n.OPENINFERENCE_SPAN_KIND: "LLM",
                    "llm.input_messages.0.message.role": "system",
                    "llm.input_messages.0.message.content": INSTRUCTIONS,
                    "llm.input_messages.1.message.role": "user",
                    "llm.input_messages.1.message.content": question,
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": "It left the Lyon depot on Monday.",
                    "llm.token_count.prompt": 60,
                    "llm.token_count.completion": 9,
                },
            ):
                pass

    spans = record_spans(build, service_name="support-api")
    return split_spans(spans, [["retrieve", "llm"], ["support agent", "POST /support"]], "support agent")


def _genai_messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def genai_agent_with_three_tools() -> SplitTrace:
    """A GenAI ``invoke_agent`` span whose three ``execute_tool`` calls and two LLM calls reach Kafka in four
    records, the agent span (which ends last) in the last one."""

    def tool(tracer: Tracer, name: str, call_id: str, result: str) -> None:
        attributes = {
            n.GEN_AI_OPERATION_NAME: "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps({"city": "Oslo"}),
            "gen_ai.tool.call.result": result,
        }
        with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes):
            pass

    def chat(tracer: Tracer, name: str, answer: str) -> None:
        attributes = {
            n.GEN_AI_OPERATION_NAME: "chat",
            n.GEN_AI_OUTPUT_MESSAGES: _genai_messages("assistant", answer),
            n.GEN_AI_USAGE_INPUT_TOKENS: 120,
            n.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
        }
        with tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes):
            pass

    def build(tracer: Tracer) -> None:
        with (
            tracer.start_as_current_span("POST /trips", kind=SpanKind.SERVER),
            tracer.start_as_current_span(
                "invoke_agent travel",
                attributes={
                    n.GEN_AI_OPERATION_NAME: "invoke_agent",
                    n.GEN_AI_AGENT_NAME: "travel",
                    n.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps([{"type": "text", "content": "Plan trips."}]),
                    n.GEN_AI_INPUT_MESSAGES: _genai_messages("user", "A weekend in Oslo, please."),
                    n.GEN_AI_OUTPUT_MESSAGES: _genai_messages("assistant", "Flights, weather and hotel are set."),
                },
            ),
        ):
            chat(tracer, "chat plan", "I will search flights, check the weather and book a hotel.")
            tool(tracer, TOOLS[0], "call_1", '{"flight": "SK 812"}')
            tool(tracer, TOOLS[1], "call_2", '{"forecast": "snow"}')
            tool(tracer, TOOLS[2], "call_3", '{"hotel": "Grand"}')
            chat(tracer, "chat answer", "Flights, weather and hotel are set.")

    spans = record_spans(build, service_name="travel-api")
    groups = [
        ["chat plan", f"execute_tool {TOOLS[0]}"],
        [f"execute_tool {TOOLS[1]}"],
        [f"execute_tool {TOOLS[2]}", "chat answer"],
        ["invoke_agent travel", "POST /trips"],
    ]
    return split_spans(spans, groups, "invoke_agent travel")


def _agent_over_llm_with_events(
    events: Sequence[tuple[str, dict[str, str]]], *, service: str, agent: str
) -> SplitTrace:
    """An agent span without content over a chat span whose content is in span events; two records."""

    def build(tracer: Tracer) -> None:
        with (
            tracer.start_as_current_span(
                f"invoke_agent {agent}",
                attributes={n.GEN_AI_OPERATION_NAME: "invoke_agent", n.GEN_AI_AGENT_NAME: agent},
            ),
            tracer.start_as_current_span(
                "chat gpt-4o", kind=SpanKind.CLIENT, attributes={n.GEN_AI_OPERATION_NAME: "chat"}
            ) as llm,
        ):
            for name, attributes in events:
                llm.add_event(name, attributes)

    spans = record_spans(build, service_name=service)
    return split_spans(spans, [["chat gpt-4o"], [f"invoke_agent {agent}"]], f"invoke_agent {agent}")


def azure_events_trace() -> SplitTrace:
    """Azure AI Inference / Semantic Kernel: each message one JSON attribute ``gen_ai.event.content``."""
    content = n.EVENT_ATTR_EVENT_CONTENT
    return _agent_over_llm_with_events(
        [
            (n.EVENT_SYSTEM_MESSAGE, {content: json.dumps({"content": "You answer billing questions."})}),
            (n.EVENT_USER_MESSAGE, {content: json.dumps({"content": "Why was I charged twice?"})}),
            (
                n.EVENT_CHOICE,
                {content: json.dumps({"message": {"content": "One charge is a pending hold."}, "index": 0})},
            ),
        ],
        service="billing-api",
        agent="billing",
    )


def semconv_1_26_events_trace() -> SplitTrace:
    """Semantic conventions 1.26–1.27: ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` events."""
    prompt = [{"role": "system", "content": "You translate."}, {"role": "user", "content": "Translate 'bonjour'."}]
    return _agent_over_llm_with_events(
        [
            (n.EVENT_CONTENT_PROMPT, {n.GEN_AI_PROMPT: json.dumps(prompt)}),
            (n.EVENT_CONTENT_COMPLETION, {n.GEN_AI_COMPLETION: json.dumps([{"role": "assistant", "content": "hi"}])}),
        ],
        service="translate-api",
        agent="translator",
    )


def unfinished_root_trace() -> tuple[SplitTrace, bytes]:
    """An agent run under a root span that has not ended when the agent's spans are exported: the trace's
    records (the agent and its LLM call), and a record holding the root, which ends much later."""
    root_holder: list[otel_trace.Span] = []

    def build(tracer: Tracer) -> None:
        root = tracer.start_span("POST /long-job", kind=SpanKind.SERVER)
        root_holder.append(root)
        token = otel_context.attach(otel_trace.set_span_in_context(root))
        try:
            with tracer.start_as_current_span(
                "invoke_agent researcher",
                attributes={
                    n.GEN_AI_OPERATION_NAME: "invoke_agent",
                    n.GEN_AI_AGENT_NAME: "researcher",
                    n.GEN_AI_INPUT_MESSAGES: _genai_messages("user", "Summarise the report."),
                    n.GEN_AI_OUTPUT_MESSAGES: _genai_messages("assistant", "The report finds costs rose."),
                },
            ):
                pass
        finally:
            otel_context.detach(token)
        root.end()  # recorded now; produced to Kafka only after the agent run was scored

    spans = record_spans(build, service_name="research-api")
    by_name = {s.name: s for s in spans}
    split = split_spans([by_name["invoke_agent researcher"]], [["invoke_agent researcher"]], "invoke_agent researcher")
    return split, otlp_proto([by_name["POST /long-job"]])


async def produce_records(bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes]]) -> None:
    """Produce ``(key, value)`` records in order, and wait for every acknowledgement."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        for future in futures:
            await future
    finally:
        await producer.stop()
