"""Conversations as agents trace them: one trace per turn, made by the real OpenTelemetry SDK, the conversation
named by ``gen_ai.conversation.id`` (OTel GenAI) on the agent span or by ``session.id`` (OpenInference) on
another span of the trace. Each turn is a :class:`~tests.support.trace_scope.SplitTrace` (its records keyed by
its trace id, as the Collector writes them), so a conversation's turns land on several partitions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from opentelemetry.trace import SpanKind, Tracer

from sidecar.conventions.trace_runs import TraceSpan, group_by_trace
from sidecar.core import names as n
from sidecar.ingest import decode_traces
from tests.support.otel import record_spans
from tests.support.trace_scope import SplitTrace, split_spans

__all__ = ["Turn", "conversation", "trace_spans", "turn_trace"]

IdOn = Literal["agent", "llm", "nowhere"]


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str
    tool: tuple[str, str, str] | None = None  # name, arguments (JSON), result


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def turn_trace(
    conversation_id: str,
    turn: Turn,
    *,
    agent: str = "support-bot",
    service: str = "support-api",
    instructions: str = "You help customers with their orders.",
    id_on: IdOn = "agent",
) -> SplitTrace:
    """One turn: ``POST /chat`` → ``invoke_agent`` (request, answer, instructions) → a ``chat`` call (and a tool call);
    two records, the agent span (which ends last) in the second."""

    def build(tracer: Tracer) -> None:
        agent_attributes = {
            n.GEN_AI_OPERATION_NAME: "invoke_agent",
            n.GEN_AI_AGENT_NAME: agent,
            n.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps([{"type": "text", "content": instructions}]),
            n.GEN_AI_INPUT_MESSAGES: _messages("user", turn.question),
            n.GEN_AI_OUTPUT_MESSAGES: _messages("assistant", turn.answer),
        }
        if id_on == "agent":
            agent_attributes[n.GEN_AI_CONVERSATION_ID] = conversation_id
        chat_attributes = {
            n.GEN_AI_OPERATION_NAME: "chat",
            n.GEN_AI_OUTPUT_MESSAGES: _messages("assistant", turn.answer),
        }
        if id_on == "llm":
            chat_attributes["session.id"] = conversation_id
        with (
            tracer.start_as_current_span("POST /chat", kind=SpanKind.SERVER),
            tracer.start_as_current_span(f"invoke_agent {agent}", attributes=agent_attributes),
        ):
            if turn.tool is not None:
                name, arguments, result = turn.tool
                tool_attributes = {
                    n.GEN_AI_OPERATION_NAME: "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": f"call-{name}",
                    "gen_ai.tool.call.arguments": arguments,
                    "gen_ai.tool.call.result": result,
                }
                with tracer.start_as_current_span(f"execute_tool {name}", attributes=tool_attributes):
                    pass
            with tracer.start_as_current_span("chat", kind=SpanKind.CLIENT, attributes=chat_attributes):
                pass

    spans = record_spans(build, service_name=service)
    names = [s.name for s in spans]
    first = [name for name in names if name.startswith(("execute_tool", "chat"))]
    return split_spans(spans, [first, [f"invoke_agent {agent}", "POST /chat"]], f"invoke_agent {agent}")


def conversation(conversation_id: str, turns: list[Turn], **options: object) -> list[SplitTrace]:
    """A conversation's turns in order, each its own trace."""
    return [turn_trace(conversation_id, turn, **options) for turn in turns]  # type: ignore[arg-type]


def trace_spans(trace: SplitTrace) -> list[TraceSpan]:
    """A turn's spans as the whole-trace stage holds them once its trace is ready."""
    spans: list[TraceSpan] = []
    for record in trace.records:
        for grouped in group_by_trace(decode_traces(record, "otlp_proto")).values():
            spans.extend(grouped)
    return spans
