"""Message content carried by span events, in every form instrumentations write it, from real SDK traces:

- the deprecated per-message events with fields as attributes (covered in test_conventions_legacy.py),
- the same events with the whole message as one JSON attribute ``gen_ai.event.content`` (Azure AI
  Inference, Azure AI Agents, Semantic Kernel),
- the semantic conventions 1.26–1.27 events ``gen_ai.content.prompt`` / ``gen_ai.content.completion``.

Property tests: whatever the (printable) texts, the run carries them, in order, in the right roles, over
both OTLP encodings.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.conventions import Selection, spans_to_runs
from sidecar.core import names as n
from sidecar.core.runs import ScorerRunRequest
from sidecar.ingest import decode_traces
from tests.support.otel import otlp_json, otlp_proto
from tests.support.traces import agent_trace

CHAT = {n.GEN_AI_OPERATION_NAME: "chat", n.GEN_AI_SYSTEM: "az.ai.inference"}
INFERENCE = Selection(kinds=frozenset({"agent", "inference"}))
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=60).filter(str.strip)


def _run(events: list[tuple[str, dict[str, str]]], encoding: str) -> ScorerRunRequest:
    spans = agent_trace(CHAT, agent_span_name="chat gpt-4o", events=events)
    data = otlp_proto(spans) if encoding == "otlp_proto" else otlp_json(spans)
    result = spans_to_runs(decode_traces(data, encoding), INFERENCE)  # type: ignore[arg-type]
    assert result.rejects == () and len(result.runs) == 1, result
    return result.runs[0]


@settings(max_examples=40, deadline=None)
@given(system=TEXT, user=TEXT, answer=TEXT, encoding=st.sampled_from(["otlp_proto", "otlp_json"]))
def test_azure_and_semantic_kernel_events_carry_json_content(
    system: str, user: str, answer: str, encoding: str
) -> None:
    content = n.EVENT_ATTR_EVENT_CONTENT
    events = [
        (n.EVENT_SYSTEM_MESSAGE, {content: json.dumps({"content": system})}),
        (n.EVENT_USER_MESSAGE, {content: json.dumps({"content": user})}),
        (
            n.EVENT_CHOICE,
            {content: json.dumps({"message": {"content": answer}, "finish_reason": "stop", "index": 0})},
        ),
    ]
    run = _run(events, encoding)
    assert [s.content for s in run.input.system_messages] == [system]
    assert [m.text for m in run.input.input_messages] == [user]
    assert [(m.role, m.text) for m in run.output] == [("assistant", answer)]


def test_azure_agents_tool_call_and_result_events() -> None:
    content = n.EVENT_ATTR_EVENT_CONTENT
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
    events = [
        (n.EVENT_USER_MESSAGE, {content: json.dumps({"content": "Weather in Oslo?"})}),
        (n.EVENT_ASSISTANT_MESSAGE, {content: json.dumps({"tool_calls": [call]})}),
        (n.EVENT_TOOL_MESSAGE, {content: json.dumps({"content": "snow", "id": "call_1"})}),
        (n.EVENT_CHOICE, {content: json.dumps({"message": {"content": "It is snowing."}, "index": 0})}),
    ]
    run = _run(events, "otlp_proto")
    [asked, acted] = run.input.input_messages
    assert asked.text == "Weather in Oslo?"
    [invocation] = acted.tool_invocations
    assert (invocation.tool_name, invocation.args, invocation.state, invocation.result) == (
        "get_weather",
        {"city": "Oslo"},
        "result",
        "snow",
    )
    assert [m.text for m in run.output] == ["It is snowing."]


@settings(max_examples=40, deadline=None)
@given(
    turns=st.lists(st.tuples(st.sampled_from(["user", "assistant"]), TEXT), min_size=1, max_size=4),
    system=TEXT,
    answer=TEXT,
    encoding=st.sampled_from(["otlp_proto", "otlp_json"]),
)
def test_semconv_1_26_prompt_and_completion_events(
    turns: list[tuple[str, str]], system: str, answer: str, encoding: str
) -> None:
    prompt = [{"role": "system", "content": system}, *({"role": r, "content": t} for r, t in turns)]
    events = [
        (n.EVENT_CONTENT_PROMPT, {n.GEN_AI_PROMPT: json.dumps(prompt)}),
        (n.EVENT_CONTENT_COMPLETION, {n.GEN_AI_COMPLETION: json.dumps([{"role": "assistant", "content": answer}])}),
    ]
    run = _run(events, encoding)
    assert [s.content for s in run.input.system_messages] == [system]
    # Earlier turns are the agent's history (remembered messages); the current turn starts at the last user one.
    history = (*run.input.remembered_messages, *run.input.input_messages)
    assert [(m.role, m.text) for m in history] == turns
    assert [(m.role, m.text) for m in run.output] == [("assistant", answer)]


def test_a_malformed_event_content_is_dead_lettered_as_unmappable() -> None:
    spans = agent_trace(CHAT, events=[(n.EVENT_USER_MESSAGE, {n.EVENT_ATTR_EVENT_CONTENT: "{not json"})])
    result = spans_to_runs(decode_traces(otlp_proto(spans), "otlp_proto"), INFERENCE)
    assert result.runs == () and [r.reason for r in result.rejects] == ["unmappable"]
    assert "gen_ai.event.content" in result.rejects[0].detail
