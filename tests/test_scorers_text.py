"""Text extraction accepts every run shape Mastra's scorers accept."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.scorers.text import (
    get_assistant_message_from_run_output,
    get_combined_system_prompt,
    get_text_content_from_message,
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
    ToolInvocationPart,
    assistant_message,
    user_message,
)
from sidecar.scoring.types import to_json_value

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


_roles = st.sampled_from(["user", "assistant", "system", "tool"])
_texts = st.lists(st.text(max_size=12), max_size=3)
_tools = st.lists(st.sampled_from(["search", "lookup"]), max_size=2)


@st.composite
def agent_messages(draw: st.DrawFn) -> AgentMessage:
    parts: list[Any] = [TextPart(text=t) for t in draw(_texts)]
    parts += [ToolInvocationPart(tool_invocation=ToolInvocation(tool_call_id="c", tool_name=n)) for n in draw(_tools)]
    order = draw(st.permutations(parts))
    return AgentMessage(id="m", role=draw(_roles), content=MessageContent(parts=tuple(order)))


@given(st.lists(agent_messages(), max_size=4))
def test_typed_messages_read_like_their_json(messages: list[AgentMessage]) -> None:
    # The service's runs are typed; users and eval hand JSON. Every helper must read both alike.
    as_json = to_json_value(messages)
    assert get_assistant_message_from_run_output(tuple(messages)) == get_assistant_message_from_run_output(as_json)
    for message, plain in zip(messages, as_json, strict=True):
        assert get_text_content_from_message(message) == get_text_content_from_message(plain)
    run_input = AgentRunInput(input_messages=tuple(messages))
    assert is_agent_run_input(run_input) and is_agent_run_input(to_json_value(run_input))
