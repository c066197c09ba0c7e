"""Whole-trace runs from traces made by the real OpenTelemetry SDK (OpenInference and OTel GenAI shapes)."""

from __future__ import annotations

import json

from opentelemetry.trace import Status, StatusCode, Tracer

from sidecar.conventions import Selection
from sidecar.conventions.trace_runs import group_by_trace, trace_runs
from sidecar.core import names as n
from sidecar.core.runs import ScorerRunRequest
from sidecar.ingest import decode_traces
from tests.support.otel import otlp_proto, record_spans

AGENTS = Selection()


def runs_of(build, *, ready_reason: str = "root_idle") -> tuple[ScorerRunRequest, ...]:  # type: ignore[no-untyped-def]
    traces = decode_traces(otlp_proto(record_spans(build)), "otlp_proto")
    [spans] = group_by_trace(traces).values()
    result = trace_runs(spans, AGENTS, ready_reason=ready_reason)  # type: ignore[arg-type]
    assert result.rejects == (), result.rejects
    return result.runs


def test_openinference_agent_judged_with_the_instructions_of_its_llm_child() -> None:
    def build(tracer: Tracer) -> None:
        with (
            tracer.start_as_current_span(
                "agent",
                attributes={
                    n.OPENINFERENCE_SPAN_KIND: "AGENT",
                    n.OI_AGENT_NAME: "support-bot",
                    n.INPUT_VALUE: "Where is my parcel?",
                    n.OUTPUT_VALUE: "It ships tomorrow.",
                },
            ),
            tracer.start_as_current_span(
                "llm",
                attributes={
                    n.OPENINFERENCE_SPAN_KIND: "LLM",
                    "llm.input_messages.0.message.role": "system",
                    "llm.input_messages.0.message.content": "Answer in one sentence. Never promise dates.",
                    "llm.input_messages.1.message.role": "user",
                    "llm.input_messages.1.message.content": "Where is my parcel?",
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": "It ships tomorrow.",
                    "llm.token_count.prompt": 40,
                    "llm.token_count.completion": 6,
                },
            ),
        ):
            pass

    [run] = runs_of(build)
    assert [s.content for s in run.input.system_messages] == ["Answer in one sentence. Never promise dates."]
    assert [m.text for m in run.input.input_messages] == ["Where is my parcel?"]
    assert [m.text for m in run.output] == ["It ships tomorrow."]
    assert run.scope == "trace" and run.assembly is not None
    assert (run.assembly.system_from, run.assembly.llm_calls, run.assembly.spans) == ("llm_call", 1, 2)
    assert (run.assembly.input_tokens, run.assembly.output_tokens, run.assembly.complete) == (40, 6, True)


def _tool(tracer: Tracer, name: str, call_id: str, args: dict[str, str], result: str | None, error: str | None) -> None:
    attributes = {
        n.GEN_AI_OPERATION_NAME: "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": json.dumps(args),
    }
    if result is not None:
        attributes["gen_ai.tool.call.result"] = result
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))


def test_genai_agent_with_three_tool_calls_in_order_and_retrieved_documents() -> None:
    def build(tracer: Tracer) -> None:
        with tracer.start_as_current_span(
            "invoke_agent travel",
            attributes={
                n.GEN_AI_OPERATION_NAME: "invoke_agent",
                n.GEN_AI_AGENT_NAME: "travel",
                n.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps([{"type": "text", "content": "Book cheap trains."}]),
                n.GEN_AI_INPUT_MESSAGES: json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Train to Lyon on Friday?"}]}]
                ),
                n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "Booked the 9:04, 39 EUR."}]}]
                ),
            },
        ):
            with tracer.start_as_current_span(
                "chat gpt-4o",
                attributes={
                    n.GEN_AI_OPERATION_NAME: "chat",
                    n.GEN_AI_USAGE_INPUT_TOKENS: 100,
                    n.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
                    n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [
                                    {"type": "tool_call", "id": "c1", "name": "search", "arguments": {"to": "Lyon"}},
                                    {"type": "tool_call", "id": "c9", "name": "notify", "arguments": {}},
                                ],
                            }
                        ]
                    ),
                },
            ):
                pass
            _tool(tracer, "search", "c1", {"to": "Lyon"}, '[{"train": "9:04"}]', None)
            with tracer.start_as_current_span(
                "retrieve fares",
                attributes={
                    n.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
                    "retrieval.documents.0.document.content": "Friday fares: 9:04 at 39 EUR.",
                    "retrieval.documents.1.document.content": "Discount cards do not apply on Fridays.",
                },
            ):
                pass
            _tool(tracer, "price", "c2", {"train": "9:04"}, "39", None)
            _tool(tracer, "book", "c3", {"train": "9:04"}, None, "payment declined")

    [run] = runs_of(build)
    [answer] = run.output
    calls = answer.tool_invocations
    assert [(c.tool_name, c.tool_call_id, c.args) for c in calls] == [
        ("search", "c1", {"to": "Lyon"}),
        ("price", "c2", {"train": "9:04"}),
        ("book", "c3", {"train": "9:04"}),
        ("notify", "c9", {}),  # asked for by the LLM, no tool span: a call without a result
    ]
    assert [c.result for c in calls] == [[{"train": "9:04"}], "39", {"error": "payment declined"}, None]
    assert [c.state for c in calls] == ["result", "result", "result", "call"]
    assert answer.text == "Booked the 9:04, 39 EUR."  # the tool calls ride inside the answer's message
    assert run.context == ("Friday fares: 9:04 at 39 EUR.", "Discount cards do not apply on Fridays.")
    assert [s.content for s in run.input.system_messages] == ["Book cheap trains."]
    assert run.assembly is not None and run.assembly.system_from == "agent"
    assert (run.assembly.tool_calls, run.assembly.retrieved_documents, run.assembly.spans) == (4, 2, 6)


def test_a_sub_agent_gets_its_own_run_and_is_one_call_in_the_outer_one() -> None:
    def agent(tracer: Tracer, name: str, question: str, answer: str):  # type: ignore[no-untyped-def]
        return tracer.start_as_current_span(
            f"invoke_agent {name}",
            attributes={
                n.GEN_AI_OPERATION_NAME: "invoke_agent",
                n.GEN_AI_AGENT_NAME: name,
                n.GEN_AI_INPUT_MESSAGES: json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": question}]}]
                ),
                n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
                ),
            },
        )

    def build(tracer: Tracer) -> None:
        with (
            agent(tracer, "planner", "Plan my trip", "Day 1: museum."),
            agent(tracer, "researcher", "Museums in Lyon?", "Musée des Confluences."),
        ):
            _tool(tracer, "web_search", "w1", {"q": "museums lyon"}, "Confluences", None)

    planner, researcher = runs_of(build, ready_reason="max_wait")
    assert (planner.target.agent_name, researcher.target.agent_name) == ("planner", "researcher")
    [outer_call] = planner.output[0].tool_invocations
    assert (outer_call.tool_name, outer_call.args, outer_call.result) == (
        "researcher",
        "Museums in Lyon?",
        "Musée des Confluences.",
    )
    assert [c.tool_name for c in researcher.output[0].tool_invocations] == ["web_search"]
    assert planner.assembly is not None and planner.assembly.complete is False  # given up at max_wait
