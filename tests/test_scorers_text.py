"""Text extraction accepts every run shape Mastra's scorers accept."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.scorers.text import (
    get_assistant_message_from_run_output,
    get_combined_system_prompt,
    get_user_message_from_run_input,
    is_agent_run_input,
)
from sidecar.scoring.agent import (
    AgentMessage,
    AgentRunInput,
    MessageContent,
    SystemMessage,
    TextPart,
    ToolInvocation,
    assistant_message,
    user_message,
)

AGENT_INPUT = AgentRunInput(
    input_messages=(
        AgentMessage(
            id="u1", role="user", content=MessageContent(parts=(TextPart(text="draft"), TextPart(text="final ask")))
        ),
        user_message("second user message", id="u2"),
    ),
    system_messages=(SystemMessage(content="Be concise."),),
    tagged_system_messages={"memory": (SystemMessage(content="User likes Python."),)},
)


@pytest.mark.parametrize(
    ("run_input", "expected"),
    [
        (AGENT_INPUT, "final ask"),  # first user message, last text part wins
        ("plain string", "plain string"),
        ([{"role": "system", "content": "s"}, {"role": "user", "content": "from list"}], "from list"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]}]}, "parts"),
        ({"prompt": "workflow prompt"}, "workflow prompt"),
        ({"text": "t"}, "t"),
        ({"content": "c"}, "c"),
        ({"input": {"content": "nested"}}, "nested"),
        ({"nothing": 1}, None),
        (42, None),
    ],
)
def test_user_message(run_input: Any, expected: str | None) -> None:
    assert get_user_message_from_run_input(run_input) == expected


def test_system_prompt_order_and_joining() -> None:
    run_input = {
        "systemMessages": [
            {"role": "system", "content": "A."},
            {"role": "system", "content": [{"type": "text", "text": "B1"}, {"type": "text", "text": "B2"}]},
        ],
        "inputMessages": [{"role": "system", "content": "C."}, {"role": "user", "content": "hi"}],
        "taggedSystemMessages": {"memory": [{"role": "system", "content": "D."}]},
    }
    assert get_combined_system_prompt(run_input) == "A.\n\nB1 B2\n\nC.\n\nD."
    assert get_combined_system_prompt(AGENT_INPUT) == "Be concise.\n\nUser likes Python."
    assert get_combined_system_prompt("no system") == ""


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ((assistant_message("agent answer", tool_invocations=(ToolInvocation(tool_call_id="1", tool_name="t"),)),),
         "agent answer"),
        ([{"role": "user", "content": "x"}, {"role": "assistant", "content": "second"}], "second"),
        ({"role": "assistant", "text": "text field"}, "text field"),
        ({"text": "no role"}, "no role"),
        ({"content": "content field"}, "content field"),
        ({"role": "assistant", "content": {"format": 2, "parts": [{"type": "text", "text": "db message"}]}},
         "db message"),
        ({"role": "user", "text": "not the assistant"}, None),
        ("bare", "bare"),
        (None, None),
    ],
)  # fmt: skip
def test_assistant_message(output: Any, expected: str | None) -> None:
    assert get_assistant_message_from_run_output(output) == expected


def test_agent_shape_detection() -> None:
    assert is_agent_run_input(AGENT_INPUT)
    assert not is_agent_run_input({"inputMessages": []})
