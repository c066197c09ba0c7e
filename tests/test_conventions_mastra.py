"""Mastra's OTel exporter: agent_run spans carry mastra.agent_run.input/output plus gen_ai.* identity."""

from __future__ import annotations

import json

from sidecar.conventions import spans_to_runs
from sidecar.core import names as n
from sidecar.ingest import decode_traces
from tests.support.otel import otlp_proto
from tests.support.traces import agent_trace


def test_agent_run_as_the_current_exporter_writes_it() -> None:
    attrs = {
        n.GEN_AI_OPERATION_NAME: "invoke_agent",
        n.MASTRA_SPAN_TYPE: "agent_run",
        n.GEN_AI_AGENT_ID: "weatherAgent",
        n.GEN_AI_AGENT_NAME: "Weather Agent",
        n.GEN_AI_CONVERSATION_ID: "thread-1",
        # Mastra writes the agent's instructions verbatim, not as a JSON parts list.
        n.GEN_AI_SYSTEM_INSTRUCTIONS: "You are a helpful weather assistant.",
        "mastra.agent_run.input": json.dumps(
            [
                {"role": "user", "content": "I live in Lyon."},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": [{"type": "text", "text": "Weather at home?"}]},
            ]
        ),
        "mastra.agent_run.output": json.dumps(
            {
                "text": "Sunny in Lyon, 25C.",
                "toolCalls": [{"toolCallId": "tc1", "toolName": "weatherTool", "args": {"city": "Lyon"}}],
                "toolResults": [{"toolCallId": "tc1", "toolName": "weatherTool", "result": {"temp": 25}}],
                "finishReason": "stop",
            }
        ),
        "mastra.agent_run.max_steps": 5,
    }
    (run,) = spans_to_runs(
        decode_traces(otlp_proto(agent_trace(attrs, agent_span_name="invoke_agent Weather Agent")))
    ).runs

    t = run.target
    assert (t.kind, t.convention, t.agent_id, t.agent_name) == (
        "agent",
        "mastra",
        "weatherAgent",
        "Weather Agent",
    )
    assert [s.content for s in run.input.system_messages] == ["You are a helpful weather assistant."]
    assert [(m.role, m.text) for m in run.input.remembered_messages] == [
        ("user", "I live in Lyon."),
        ("assistant", "Noted."),
    ]
    assert [m.text for m in run.input.input_messages] == ["Weather at home?"]
    (answer,) = run.output
    assert answer.text == "Sunny in Lyon, 25C."
    (call,) = answer.tool_invocations
    assert (call.state, call.tool_name, call.args, call.result) == (
        "result",
        "weatherTool",
        {"city": "Lyon"},
        {"temp": 25},
    )


def test_agent_run_with_string_input_and_older_exporter_attributes() -> None:
    attrs = {
        n.GEN_AI_OPERATION_NAME: "agent.run",  # @mastra/otel-exporter before the GenAI conventions
        n.MASTRA_SPAN_TYPE: "agent_run",
        n.MASTRA_LEGACY_AGENT_ID: "supportAgent",
        "input": "How do I reset my password?",
        "output": json.dumps({"text": "Use the 'Forgot password' link."}),
    }
    (run,) = spans_to_runs(decode_traces(otlp_proto(agent_trace(attrs, agent_span_name="agent.supportAgent")))).runs

    assert (run.target.convention, run.target.agent_id, run.target.agent_name) == (
        "mastra",
        "supportAgent",
        None,
    )
    assert [m.text for m in run.input.input_messages] == ["How do I reset my password?"]
    assert [m.text for m in run.output] == ["Use the 'Forgot password' link."]
