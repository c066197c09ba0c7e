"""Traces (and logs) written by a real instrumentation library, as the Collector's Kafka exporter writes them.

Runs inside one of the test-only environments (``tests/support/instrumented/environments.py``), never in the
project's own: it imports nothing of the project. It instruments the ``openai`` client (or the OpenAI Agents SDK)
with the library the scenario names, calls a local OpenAI-compatible server (the scripted judge server of the test,
``--base-url``), and writes what the SDK's exporters handed over as OTLP protobuf records, one per trace for spans
(``otlp_spans``, keyed by trace id as ``partition_traces_by_id`` does) and one per trace for log records
(``otlp_logs``), in a JSON file: ``{"spans": [{"key", "value"}], "logs": [...]}``, values base64.

The conversation it has is fixed, its content planted with a tag (``--tag``) so that a test can find each piece in
the judge's prompt: the system prompt ``(system:TAG:...)``, the question ``(question:TAG:...)``; the server answers
``(answer:TAG:...)`` and the tool returns ``(result:TAG:...)``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from collections import defaultdict
from typing import Any

# Set before any instrumentation is imported: some read them when imported.
_MODES = {
    # openai-v2: the content mode of the latest experimental GenAI conventions.
    "span_only": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
    },
    "span_and_event": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_and_event",
    },
    "event_only": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only",
    },
    # Traceloop: content on the span (the default) or as log events (use_attributes=False).
    "attributes": {"TRACELOOP_TRACE_CONTENT": "true"},
    "events": {"TRACELOOP_TRACE_CONTENT": "true"},
    "default": {},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instrumentation", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--out", required=True)
    return parser.parse_args()


def _providers() -> tuple[Any, Any, Any, Any]:
    from opentelemetry import _logs, trace
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    resource = Resource.create({"service.name": "instrumented-app"})
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracer_provider)
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    _logs.set_logger_provider(logger_provider)
    return tracer_provider, logger_provider, spans, logs


def _instrument(name: str, mode: str, tracer_provider: Any, logger_provider: Any) -> None:
    if name == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
    elif name in ("traceloop", "traceloop-legacy"):
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as Traceloop

        kwargs = {"use_attributes": False} if mode == "events" else {}
        Traceloop(**kwargs).instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
    elif name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        OpenInference().instrument(tracer_provider=tracer_provider)
    elif name == "openinference-agents":
        from agents.tracing import set_trace_processors
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        set_trace_processors([])  # no export to OpenAI's own tracing backend
        OpenAIAgentsInstrumentor().instrument(tracer_provider=tracer_provider)
    elif name == "otel-agents":
        from agents.tracing import set_trace_processors
        from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        set_trace_processors([])
        OpenAIAgentsInstrumentor().instrument(tracer_provider=tracer_provider)
    else:
        raise SystemExit(f"unknown instrumentation {name!r}")


def _chat(base_url: str, tag: str) -> None:
    """Two conversations: a plain question, and one where the model calls a tool before it answers."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="sk-not-a-real-key", max_retries=0)
    client.chat.completions.create(
        model="agent-model",
        messages=[
            {"role": "system", "content": f"You answer geography questions. (system:{tag}:chat)"},
            {"role": "user", "content": f"What is the capital of France? (question:{tag}:chat)"},
        ],
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You report the weather. (system:{tag}:tool)"},
        {"role": "user", "content": f"What is the weather in Paris? (question:{tag}:tool)"},
    ]
    first = client.chat.completions.create(model="agent-model", messages=messages, tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": f"18C and sunny (result:{tag}:tool)"})
    client.chat.completions.create(model="agent-model", messages=messages, tools=[WEATHER_TOOL])


def _agents(base_url: str, tag: str) -> None:
    """One agent run: a function tool, then a sub-agent called as a tool, then the answer."""
    from agents import Agent, Runner, function_tool, set_default_openai_api, set_default_openai_client
    from openai import AsyncOpenAI

    set_default_openai_client(AsyncOpenAI(base_url=base_url, api_key="sk-not-a-real-key", max_retries=0), False)
    set_default_openai_api("chat_completions")

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"18C and sunny in {city} (result:{tag}:tool)"

    translator = Agent(
        name="Translator",
        instructions=f"You translate into French. (system:{tag}:translator)",
        model="agent-model",
    )
    planner = Agent(
        name="Planner",
        instructions=f"You plan trips. (system:{tag}:planner)",
        model="agent-model",
        tools=[
            get_weather,
            translator.as_tool(tool_name="translate", tool_description="Translate a sentence into French."),
        ],
    )
    asyncio.run(Runner.run(planner, f"Plan my day in Paris. (question:{tag}:planner)"))


def _records(spans: list[Any], logs: list[Any]) -> dict[str, list[dict[str, str]]]:
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    by_trace: dict[int, list[Any]] = defaultdict(list)
    for span in spans:
        by_trace[span.context.trace_id].append(span)
    logs_by_trace: dict[int, list[Any]] = defaultdict(list)
    for log in logs:
        logs_by_trace[log.log_record.trace_id or 0].append(log)

    def record(trace_id: int, payload: bytes) -> dict[str, str]:
        return {"key": f"{trace_id:032x}", "value": base64.b64encode(payload).decode("ascii")}

    return {
        "spans": [record(t, encode_spans(batch).SerializeToString()) for t, batch in by_trace.items()],
        "logs": [record(t, encode_logs(batch).SerializeToString()) for t, batch in logs_by_trace.items()],
    }


def main() -> None:
    args = _args()
    os.environ.update(_MODES[args.mode])
    tracer_provider, logger_provider, spans, logs = _providers()
    _instrument(args.instrumentation, args.mode, tracer_provider, logger_provider)
    if args.instrumentation.endswith("agents"):
        _agents(args.base_url, args.tag)
    else:
        _chat(args.base_url, args.tag)
    tracer_provider.force_flush()
    logger_provider.force_flush()
    written = _records(list(spans.get_finished_spans()), list(logs.get_finished_logs()))
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(written, out)
    print(f"{len(spans.get_finished_spans())} spans, {len(logs.get_finished_logs())} log records", file=sys.stderr)


if __name__ == "__main__":
    main()
