"""The tool calls of a run (sidecar/scorers/tools.py), read as Mastra's extractToolCalls and its quick
checks read them, from typed messages and from Mastra's stored dict shapes."""

from __future__ import annotations

from typing import Any

from sidecar.scorers.tools import extract_tool_calls, tool_invocations, turn_messages
from sidecar.scoring.agent import AgentRunInput, ToolInvocation, assistant_message, user_message
from tests.support.tool_runs import invocation, message, run_with_tools


def parts_message(*invocations: dict[str, Any], text: str = "ok", role: str = "assistant") -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "tool-invocation", "toolInvocation": i} for i in invocations]
    parts.append({"type": "text", "text": text})
    return {"id": "m", "role": role, "content": {"format": 2, "parts": parts}, "createdAt": ""}


def test_typed_and_mastra_shapes_give_the_same_calls() -> None:
    calls = [invocation("search", "c1", {"q": "x"}, {"hits": 2}), invocation("summarize", "c2", state="call")]
    typed = run_with_tools("q", "a", calls, shape="typed")
    mastra = run_with_tools("q", "a", calls, shape="mastra")
    a = extract_tool_calls(typed["input"], typed["output"])
    b = extract_tool_calls(mastra["input"], mastra["output"])
    assert a.tools == b.tools == ["search", "summarize"]
    first = a.calls[0]
    assert (first.name, first.arguments, first.result, first.order, first.call_id) == (
        "search",
        {"q": "x"},
        {"hits": 2},
        0,
        "c1",
    )
    assert [c.state for c in b.calls] == ["result", "call"]
    assert a.infos()[1]["toolName"] == b.infos()[1]["toolName"] == "summarize"
    assert a.infos()[1]["toolCallId"] == "c2" and a.infos()[1]["messageIndex"] == 0


def test_the_legacy_array_wins_over_parts_when_present() -> None:
    # extractToolCalls: `legacy ?? fromParts` (an empty legacy array still hides the parts).
    msg = parts_message(invocation("from-parts", "p1"))
    msg["content"]["toolInvocations"] = [invocation("legacy", "l1")]
    assert extract_tool_calls(None, [msg]).tools == ["legacy"]
    msg["content"]["toolInvocations"] = []
    assert extract_tool_calls(None, [msg]).tools == []
    del msg["content"]["toolInvocations"]
    assert extract_tool_calls(None, [msg]).tools == ["from-parts"]


def test_message_level_tool_invocations_of_the_first_scorers_are_read() -> None:
    msg = {"id": "m", "role": "assistant", "content": "hi", "toolInvocations": [invocation("old", "o1")]}
    assert extract_tool_calls(None, [msg]).tools == ["old"]


def test_only_named_calls_and_results_count() -> None:
    msg = parts_message(
        invocation("a", "1"),
        invocation("b", "2", state="call"),
        invocation("c", "3", state="partial-call"),
        invocation("d", "4", state="output-error"),
        {"toolCallId": "5", "state": "result"},  # no name
    )
    assert extract_tool_calls(None, [msg]).tools == ["a", "b"]
    assert [c.order for c in extract_tool_calls(None, [msg]).calls] == [0, 1]
    assert [c.name for c in tool_invocations(None, [msg])] == ["a", "b", "c", "d", ""]


def test_an_id_less_call_is_named_by_its_position() -> None:
    msgs = [message("x", "assistant"), parts_message({"toolName": "t", "state": "result", "result": {}})]
    assert extract_tool_calls(None, msgs).calls[0].call_id == "1-0"


def test_merged_invocations_let_parts_win_and_keep_legacy_only_calls() -> None:
    thrown = {"toolCallId": "a", "toolName": "fetch", "state": "output-error", "errorText": "boom"}
    msg = parts_message(thrown, invocation("store", "b"))
    msg["content"]["toolInvocations"] = [
        invocation("fetch", "a", state="call"),  # the parts hold this call's final state
        invocation("log", "x"),  # only in the legacy array
        invocation("store", "b"),
    ]
    merged = tool_invocations(None, [msg])
    assert [(c.name, c.state) for c in merged] == [("fetch", "output-error"), ("log", "result"), ("store", "result")]
    assert merged[0].error == "boom" and merged[0].failed


def test_errors_as_every_failure_form() -> None:
    msg = parts_message(
        invocation("ok", "1", result={"data": 1}),
        invocation("pending", "2", state="call"),
        {**invocation("flagged", "3", result={"data": 1}), "isError": True},
        invocation("errored", "4", result={"error": "Network timeout"}),
        invocation("empty-error", "5", result={"error": ""}),
        {"toolCallId": "6", "toolName": "thrown", "state": "output-error", "errorText": "boom"},
    )
    calls = {c.name: c for c in tool_invocations(None, [msg])}
    assert {n for n, c in calls.items() if c.failed} == {"pending", "flagged", "errored", "thrown"}
    assert calls["errored"].error == "Network timeout"
    assert calls["flagged"].error == "the tool reported an error"
    assert calls["ok"].error is None and calls["ok"].succeeded
    assert not calls["flagged"].succeeded and not calls["pending"].succeeded


def test_the_turn_includes_earlier_calls_of_the_turn_given_as_input() -> None:
    # A model call late in a turn: the turn's earlier tool calls arrive as input after the user message.
    earlier = assistant_message(
        tool_invocations=(
            ToolInvocation(state="result", tool_call_id="c1", tool_name="search", args={"q": "x"}, result={"n": 1}),
        ),
        id="a-1",
    )
    history_call = assistant_message(
        tool_invocations=(ToolInvocation(state="result", tool_call_id="old", tool_name="previous-turn"),), id="a-0"
    )
    run_input = AgentRunInput(input_messages=(user_message("q", id="u-1"), earlier))
    output = (assistant_message("answer", id="o"),)
    assert extract_tool_calls(run_input, output).tools == ["search"]
    # Only messages after the *last* user message belong to this turn.
    two_turns = AgentRunInput(input_messages=(user_message("a"), history_call, user_message("b"), earlier))
    assert extract_tool_calls(two_turns, output).tools == ["search"]
    # The same in Mastra's dict shape.
    as_dict = {"inputMessages": [message("q", "user"), parts_message(invocation("search", "c1"))]}
    assert extract_tool_calls(as_dict, [message("answer", "assistant")]).tools == ["search"]
    assert len(turn_messages(as_dict, [message("answer", "assistant")])) == 2


def test_inputs_not_in_the_agent_shape_add_nothing() -> None:
    out = [parts_message(invocation("a", "1"))]
    assert extract_tool_calls("a question", out).tools == ["a"]
    assert extract_tool_calls([{"role": "user", "content": "q"}], out).tools == ["a"]
    assert extract_tool_calls(None, "just text").tools == []
    assert extract_tool_calls(None, {"text": "x"}).tools == []
