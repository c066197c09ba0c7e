"""OTel GenAI semantic conventions (current): invoke_agent spans, messages as JSON or structured values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.conventions import Selection, spans_to_runs
from sidecar.core import names as n
from sidecar.core.runs import ScorerRunRequest
from sidecar.ingest import decode_traces
from sidecar.scoring.agent import ReasoningPart, TextPart, ToolInvocationPart
from tests.support.otel import otlp_json, otlp_proto, otlp_request, set_structured
from tests.support.traces import agent_trace, hex_ids, span_by_name

SYSTEM = [{"type": "text", "content": "You are a concise travel agent."}]
INPUT = [
    {"role": "user", "parts": [{"type": "text", "content": "Hi, I'm Ana."}]},
    {"role": "assistant", "parts": [{"type": "text", "content": "Hello Ana, where to?"}]},
    {"role": "user", "parts": [{"type": "text", "content": "What's the weather in Paris?"}]},
    {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}],
    },
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "rain, 12C"}]},
]
OUTPUT = [
    {
        "role": "assistant",
        "parts": [
            {"type": "reasoning", "content": "The tool said rain."},
            {"type": "text", "content": "It is raining in Paris, 12C."},
        ],
        "finish_reason": "stop",
    }
]
AGENT_ATTRS: dict[str, Any] = {
    n.GEN_AI_OPERATION_NAME: "invoke_agent",
    n.GEN_AI_AGENT_NAME: "travel-agent",
    n.GEN_AI_AGENT_ID: "agent_42",
    n.GEN_AI_PROVIDER_NAME: "openai",
    n.GEN_AI_REQUEST_MODEL: "gpt-4o",
    n.GEN_AI_USAGE_INPUT_TOKENS: 120,
    n.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
    n.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps(SYSTEM),
    n.GEN_AI_INPUT_MESSAGES: json.dumps(INPUT),
    n.GEN_AI_OUTPUT_MESSAGES: json.dumps(OUTPUT),
}
CHAT_ATTRS = {
    n.GEN_AI_OPERATION_NAME: "chat",
    n.GEN_AI_SYSTEM: "openai",  # the deprecated provider attribute
    n.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
    n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather?"}]}]),
    n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "Rain."}], "finish_reason": "stop"}]
    ),
}


def _single(runs: tuple[ScorerRunRequest, ...]) -> ScorerRunRequest:
    assert len(runs) == 1, runs
    return runs[0]


def _assert_travel_run(run: ScorerRunRequest, ids: dict[str, Any]) -> None:
    t = run.target
    assert (t.trace_id, t.span_id, t.parent_span_id) == (
        ids["trace_id"],
        ids["span_id"],
        ids["parent_span_id"],
    )
    assert t.kind == "agent" and t.convention == "genai"
    assert (t.agent_name, t.agent_id, t.service_name) == ("travel-agent", "agent_42", "travel-api")
    assert (t.model, t.provider, t.input_tokens, t.output_tokens) == ("gpt-4o", "openai", 120, 30)
    assert t.span_name == "invoke_agent travel-agent" and t.end_time_unix_nano > 0 and t.sampled

    assert [s.content for s in run.input.system_messages] == ["You are a concise travel agent."]
    assert [(m.role, m.text) for m in run.input.remembered_messages] == [
        ("user", "Hi, I'm Ana."),
        ("assistant", "Hello Ana, where to?"),
    ]
    current = run.input.input_messages
    assert [m.role for m in current] == ["user", "assistant"]  # the tool message merged into the call
    assert current[0].text == "What's the weather in Paris?"
    (call,) = current[1].tool_invocations
    assert (call.state, call.tool_call_id, call.tool_name) == ("result", "call_1", "get_weather")
    assert call.args == {"city": "Paris"} and call.result == "rain, 12C"
    assert run.input.tagged_system_messages == {}

    (answer,) = run.output
    assert answer.role == "assistant" and answer.text == "It is raining in Paris, 12C."
    assert isinstance(answer.content.parts[0], ReasoningPart)
    assert answer.content.parts[0].reasoning == "The tool said rain."
    assert answer.id.startswith(t.span_id) and answer.created_at.endswith("Z")


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_invoke_agent_span_maps_field_by_field(encoding: str) -> None:
    spans = agent_trace(AGENT_ATTRS, child_attributes=CHAT_ATTRS)
    data = otlp_proto(spans) if encoding == "otlp_proto" else otlp_json(spans)

    result = spans_to_runs(decode_traces(data, encoding))  # type: ignore[arg-type]

    assert result.spans_seen == 4 and result.rejects == ()
    _assert_travel_run(_single(result.runs), hex_ids(span_by_name(spans, "invoke_agent travel-agent")))


def test_structured_attribute_values_map_like_json_strings() -> None:
    spans = agent_trace(AGENT_ATTRS)
    request = otlp_request(spans)
    set_structured(request, n.GEN_AI_SYSTEM_INSTRUCTIONS, SYSTEM)
    set_structured(request, n.GEN_AI_INPUT_MESSAGES, INPUT)
    set_structured(request, n.GEN_AI_OUTPUT_MESSAGES, OUTPUT)
    assert request.resource_spans[0].scope_spans[0].spans[1].attributes[-1].value.HasField("array_value")

    for data, encoding in ((otlp_proto(request), "otlp_proto"), (otlp_json(request), "otlp_json")):
        run = _single(spans_to_runs(decode_traces(data, encoding)).runs)  # type: ignore[arg-type]
        _assert_travel_run(run, hex_ids(span_by_name(spans, "invoke_agent travel-agent")))


def test_inference_spans_only_on_request() -> None:
    traces = decode_traces(otlp_proto(agent_trace(AGENT_ATTRS, child_attributes=CHAT_ATTRS)))

    default = spans_to_runs(traces)
    both = spans_to_runs(traces, Selection(kinds=frozenset({"agent", "inference"})))
    only_inference = spans_to_runs(traces, Selection(kinds=frozenset({"inference"})))

    assert [r.target.kind for r in default.runs] == ["agent"]
    assert sorted(r.target.kind for r in both.runs) == ["agent", "inference"]
    chat = _single(only_inference.runs)
    assert (chat.target.kind, chat.target.provider, chat.target.model) == (
        "inference",
        "openai",
        "gpt-4o-mini",
    )
    assert chat.input.input_messages[0].text == "Weather?" and chat.output[0].text == "Rain."
    assert chat.target.parent_span_id == default.runs[0].target.span_id


def test_plain_text_system_instructions_and_tool_call_output() -> None:
    attrs = {
        n.GEN_AI_OPERATION_NAME: "invoke_agent",
        n.GEN_AI_SYSTEM_INSTRUCTIONS: "[Policy] Be brief.",  # plain text that merely starts with a bracket
        n.GEN_AI_INPUT_MESSAGES: json.dumps(
            [
                {"role": "system", "parts": [{"type": "text", "content": "Answer in French."}]},
                {"role": "user", "parts": [{"type": "text", "content": "Book a table"}]},
            ]
        ),
        n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "tool_call", "id": "c9", "name": "book", "arguments": '{"n": 2}'}],
                    "finish_reason": "tool_call",
                }
            ]
        ),
    }
    run = _single(spans_to_runs(decode_traces(otlp_proto(agent_trace(attrs)))).runs)

    assert [s.content for s in run.input.system_messages] == ["[Policy] Be brief.", "Answer in French."]
    assert run.input.remembered_messages == ()
    assert [m.text for m in run.input.input_messages] == ["Book a table"]
    (call,) = run.output[0].tool_invocations
    assert (call.state, call.tool_name, call.args) == ("call", "book", {"n": 2})
    assert not any(isinstance(p, TextPart) for p in run.output[0].content.parts)
    assert isinstance(run.output[0].content.parts[0], ToolInvocationPart)
