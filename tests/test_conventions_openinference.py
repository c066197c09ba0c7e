"""OpenInference: AGENT spans with input.value/output.value, LLM spans with flattened messages."""

from __future__ import annotations

import json

from sidecar.conventions import Selection, spans_to_runs
from sidecar.core import names as n
from sidecar.ingest import decode_traces
from tests.support.otel import otlp_json, otlp_proto
from tests.support.traces import agent_trace

LLM_ATTRS = {
    n.OPENINFERENCE_SPAN_KIND: "LLM",
    n.LLM_MODEL_NAME: "gpt-4o",
    n.LLM_PROVIDER: "openai",
    "llm.token_count.prompt": 40,
    "llm.token_count.completion": 9,
    "llm.input_messages.0.message.role": "system",
    "llm.input_messages.0.message.content": "You are a support agent for Acme.",
    "llm.input_messages.1.message.role": "user",
    "llm.input_messages.1.message.contents.0.message_content.type": "text",
    "llm.input_messages.1.message.contents.0.message_content.text": "Where is order 17?",
    "llm.input_messages.1.message.contents.1.message_content.type": "image",
    "llm.input_messages.1.message.contents.1.message_content.image.image.url": "https://x/y.png",
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.content": "Let me check.",
    "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_a",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "order_status",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"order": 17}',
}


def test_llm_span_flattened_messages_with_tool_calls() -> None:
    data = otlp_json(agent_trace({n.OPENINFERENCE_SPAN_KIND: "CHAIN"}, child_attributes=LLM_ATTRS))

    result = spans_to_runs(decode_traces(data, "otlp_json"), Selection(kinds=frozenset({"inference"})))

    (run,) = result.runs
    t = run.target
    assert (t.kind, t.convention, t.model, t.provider) == ("inference", "openinference", "gpt-4o", "openai")
    assert (t.input_tokens, t.output_tokens) == (40, 9)
    assert [s.content for s in run.input.system_messages] == ["You are a support agent for Acme."]
    assert [m.text for m in run.input.input_messages] == ["Where is order 17?"]
    (answer,) = run.output
    assert answer.text == "Let me check."
    (call,) = answer.tool_invocations
    assert (call.tool_call_id, call.tool_name, call.args) == ("call_a", "order_status", {"order": 17})


def test_agent_span_input_and_output_values() -> None:
    attrs = {
        n.OPENINFERENCE_SPAN_KIND: "AGENT",
        n.OI_AGENT_NAME: "acme-support",
        n.INPUT_VALUE: json.dumps({"messages": [{"role": "user", "content": "Cancel my order"}]}),
        n.INPUT_MIME_TYPE: "application/json",
        n.OUTPUT_VALUE: "Your order is cancelled.",
        n.OUTPUT_MIME_TYPE: "text/plain",
    }
    (run,) = spans_to_runs(decode_traces(otlp_proto(agent_trace(attrs)))).runs

    assert (run.target.kind, run.target.convention, run.target.agent_name) == (
        "agent",
        "openinference",
        "acme-support",
    )
    assert [m.text for m in run.input.input_messages] == ["Cancel my order"]
    assert [(m.role, m.text) for m in run.output] == [("assistant", "Your order is cancelled.")]


def test_plain_text_input_value_that_looks_like_json_stays_text() -> None:
    attrs = {
        n.OPENINFERENCE_SPAN_KIND: "AGENT",
        n.INPUT_VALUE: "[urgent] refund please",
        n.OUTPUT_VALUE: '{"answer": "Refund issued"}',
        n.OUTPUT_MIME_TYPE: "application/json",
    }
    (run,) = spans_to_runs(decode_traces(otlp_proto(agent_trace(attrs)))).runs

    assert run.input.input_messages[0].text == "[urgent] refund please"
    assert run.output[0].text == '{"answer": "Refund issued"}'  # unknown JSON shape: kept as text for the judge


def test_sparse_and_image_only_messages_leave_no_empty_turns() -> None:
    attrs = {
        n.OPENINFERENCE_SPAN_KIND: "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.contents.0.message_content.type": "image",
        "llm.input_messages.0.message.contents.0.message_content.image.image.url": "https://x/cat.png",
        "llm.input_messages.2.message.role": "user",  # index 1 never written
        "llm.input_messages.2.message.content": "What is in the picture?",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "A cat.",
    }
    data = otlp_proto(agent_trace({n.OPENINFERENCE_SPAN_KIND: "CHAIN"}, child_attributes=attrs))

    (run,) = spans_to_runs(decode_traces(data), Selection(kinds=frozenset({"inference"}))).runs

    assert run.input.remembered_messages == ()
    assert [(m.role, m.text) for m in run.input.input_messages] == [("user", "What is in the picture?")]
    assert [m.text for m in run.output] == ["A cat."]
