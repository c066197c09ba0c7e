"""Legacy GenAI: gen_ai.prompt/gen_ai.completion (JSON and OpenLLMetry's flattened form) and the
deprecated per-message span events."""

from __future__ import annotations

import json

from sidecar.conventions import Selection, spans_to_runs
from sidecar.core import names as n
from sidecar.core.runs import ScorerRunRequest
from sidecar.ingest import decode_traces
from tests.support.otel import otlp_json, otlp_proto
from tests.support.traces import agent_trace, hex_ids, span_by_name

INFERENCE = Selection(kinds=frozenset({"agent", "inference"}))


def _only(data: bytes, encoding: str = "otlp_proto") -> ScorerRunRequest:
    result = spans_to_runs(decode_traces(data, encoding), INFERENCE)  # type: ignore[arg-type]
    assert result.rejects == () and len(result.runs) == 1, result
    return result.runs[0]


def test_prompt_and_completion_as_json_strings() -> None:
    attrs = {
        n.GEN_AI_OPERATION_NAME: "chat",
        n.GEN_AI_SYSTEM: "anthropic",
        n.GEN_AI_REQUEST_MODEL: "claude-3-5-sonnet",
        n.GEN_AI_USAGE_PROMPT_TOKENS: 11,
        n.GEN_AI_USAGE_COMPLETION_TOKENS: 7,
        n.GEN_AI_PROMPT: json.dumps(
            [
                {"role": "system", "content": "You summarise."},
                {"role": "user", "content": "Summarise: cats sleep a lot."},
            ]
        ),
        n.GEN_AI_COMPLETION: json.dumps([{"role": "assistant", "content": "Cats nap often."}]),
    }
    spans = agent_trace(attrs, agent_span_name="chat claude")

    run = _only(otlp_json(spans), "otlp_json")

    t = run.target
    assert t.kind == "inference" and t.convention == "genai_legacy"
    assert (t.provider, t.model, t.input_tokens, t.output_tokens) == ("anthropic", "claude-3-5-sonnet", 11, 7)
    assert t.span_id == hex_ids(span_by_name(spans, "chat claude"))["span_id"]
    assert [s.content for s in run.input.system_messages] == ["You summarise."]
    assert [m.text for m in run.input.input_messages] == ["Summarise: cats sleep a lot."]
    assert [(m.role, m.text) for m in run.output] == [("assistant", "Cats nap often.")]


def test_openllmetry_flattened_prompt_and_completion_with_tool_calls() -> None:
    attrs = {
        n.GEN_AI_OPERATION_NAME: "chat",
        n.GEN_AI_SYSTEM: "openai",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": "You book flights.",
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.1.content": "Earlier question",
        "gen_ai.prompt.2.role": "assistant",
        "gen_ai.prompt.2.content": "Earlier answer",
        "gen_ai.prompt.3.role": "user",
        "gen_ai.prompt.3.content": "Book LHR to JFK tomorrow",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.id": "call_7",
        "gen_ai.completion.0.tool_calls.0.name": "book_flight",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"from": "LHR", "to": "JFK"}',
    }
    run = _only(otlp_proto(agent_trace(attrs, agent_span_name="openai.chat")))

    assert run.target.convention == "genai_legacy"
    assert [s.content for s in run.input.system_messages] == ["You book flights."]
    assert [(m.role, m.text) for m in run.input.remembered_messages] == [
        ("user", "Earlier question"),
        ("assistant", "Earlier answer"),
    ]
    assert [m.text for m in run.input.input_messages] == ["Book LHR to JFK tomorrow"]
    (call,) = run.output[0].tool_invocations
    assert (call.tool_call_id, call.tool_name, call.args) == (
        "call_7",
        "book_flight",
        {"from": "LHR", "to": "JFK"},
    )


def test_deprecated_message_events() -> None:
    events = [
        (n.EVENT_SYSTEM_MESSAGE, {"content": "You are a weather bot."}),
        (n.EVENT_USER_MESSAGE, {"content": "Weather in Oslo?"}),
        (
            n.EVENT_ASSISTANT_MESSAGE,
            {
                "tool_calls": json.dumps(
                    [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ]
                )
            },
        ),
        (n.EVENT_TOOL_MESSAGE, {"content": "snow", "id": "t1"}),
        (
            n.EVENT_CHOICE,
            {
                "index": 0,
                "finish_reason": "stop",
                "message": json.dumps({"role": "assistant", "content": "Snowing in Oslo."}),
            },
        ),
    ]
    attrs = {n.GEN_AI_OPERATION_NAME: "invoke_agent", n.GEN_AI_AGENT_NAME: "weather-bot"}
    run = _only(otlp_proto(agent_trace(attrs, events=events)))

    assert run.target.convention == "genai_events" and run.target.agent_name == "weather-bot"
    assert [s.content for s in run.input.system_messages] == ["You are a weather bot."]
    assert run.input.input_messages[0].text == "Weather in Oslo?"
    (call,) = run.input.input_messages[1].tool_invocations
    assert (call.state, call.tool_name, call.args, call.result) == (
        "result",
        "weather",
        {"city": "Oslo"},
        "snow",
    )
    assert [(m.role, m.text) for m in run.output] == [("assistant", "Snowing in Oslo.")]
