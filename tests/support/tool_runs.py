"""Runs with tool calls, built as Mastra's test helpers build them (``createTestMessage``,
``createToolInvocation``, ``createAgentTestRun``) and as the service builds them (typed messages)."""

from __future__ import annotations

import textwrap
from typing import Any, Literal

from sidecar.scoring.agent import AgentRunInput, ToolInvocation, assistant_message, user_message

Shape = Literal["mastra", "typed"]


def invocation(
    name: str,
    call_id: str,
    args: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
    state: str = "result",
) -> dict[str, Any]:
    """Mastra's ``createToolInvocation`` (state defaults to ``result``)."""
    return {"toolCallId": call_id, "toolName": name, "args": args or {}, "result": result or {}, "state": state}


def message(
    content: str, role: str, id: str = "test-message", tool_invocations: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Mastra's ``createTestMessage``: a text part, ``content`` and the legacy ``toolInvocations`` array."""
    body: dict[str, Any] = {"format": 2, "parts": [{"type": "text", "text": content}], "content": content}
    if tool_invocations:
        body["toolInvocations"] = tool_invocations
    return {"id": id, "role": role, "content": body, "createdAt": "2025-01-01T00:00:00.000Z"}


def agent_run(input_messages: list[dict[str, Any]], output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Mastra's ``createAgentTestRun``: ``scorer.run(**agent_run(...))``."""
    return {
        "input": {
            "inputMessages": input_messages,
            "rememberedMessages": [],
            "systemMessages": [],
            "taggedSystemMessages": {},
        },
        "output": output,
        **extra,
    }


def run_with_tools(
    user: str,
    answer: str,
    calls: list[dict[str, Any]] | None = None,
    *,
    shape: Shape = "mastra",
) -> dict[str, Any]:
    """One user message in, one assistant message (with ``calls``) out, in Mastra's dict shape or typed."""
    calls = calls or []
    if shape == "mastra":
        return agent_run([message(user, "user", "input-1")], [message(answer, "assistant", "output-1", calls or None)])
    typed_calls = tuple(
        ToolInvocation(
            state=c["state"],
            tool_call_id=c["toolCallId"],
            tool_name=c["toolName"],
            args=c.get("args"),
            result=c.get("result") if c["state"] == "result" else None,
        )
        for c in calls
    )
    return {
        "input": AgentRunInput(input_messages=(user_message(user, id="input-1"),)),
        "output": (assistant_message(answer, tool_invocations=typed_calls, id="output-1"),),
    }


def live_config(kind: str, options: str, *, judge: bool = False) -> str:
    """A `run` configuration with one scorer of ``kind`` and the ``options`` YAML (flow mapping or block)."""
    head = "kafka:\n  bootstrap_servers: localhost:9092\n"
    if judge:
        head += "judges:\n  default:\n    model: openai/gpt-4o-mini\n    api_key: sk-test\n"
    scorer = f"- id: s\n  kind: {kind}\n" + ("  judge: default\n" if judge else "") + f"  options: {options}\n"
    return head + "scorers:\n" + textwrap.indent(scorer, "  ")
