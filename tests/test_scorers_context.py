"""The RAG kinds' shared context lookup (sidecar.scorers.context) and a prompt step that finds nothing to judge."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from sidecar.scorers.context import (
    NO_CONTEXT_REASON,
    RetrievedContext,
    context_from_request_context,
    find_context,
    js_json,
    tool_result_context,
)
from sidecar.scoring import NotScorable, ScorerRun, StepContext, create_scorer, not_scorable
from sidecar.scoring.agent import AgentMessage, ToolInvocation, assistant_message, user_message
from sidecar.testing.judge_server import JudgeServer, Reply


def search_result(call_id: str, result: Any, *, state: str = "result") -> ToolInvocation:
    return ToolInvocation(state=state, tool_call_id=call_id, tool_name="search", args={"q": "x"}, result=result)  # type: ignore[arg-type]


def run(output: Any = "answer", request_context: dict[str, Any] | None = None) -> ScorerRun:
    return ScorerRun(input="question", output=output, run_id="r", request_context=request_context)


WITH_TOOLS = (
    assistant_message(
        "Paris is the capital.",
        tool_invocations=(
            search_result("c1", {"doc": "Paris is the capital of France.", "score": 1.0}),
            search_result("c2", "plain text result"),
            search_result("c3", None, state="call"),  # a call without its result is no context
        ),
    ),
)


# -- the order of the sources ----------------------------------------------------------------------


def test_each_source_in_order_and_the_first_present_wins() -> None:
    request_context = {"context": ["from the request"]}
    everything = run(WITH_TOOLS, request_context)
    extractor_found = find_context(everything, options_context=("opt",), extractor=lambda i, o: ["extracted"])
    assert extractor_found == RetrievedContext(("extracted",), "extractor")
    assert find_context(everything, options_context=("opt",)) == RetrievedContext(("opt",), "options")
    assert find_context(everything) == RetrievedContext(("from the request",), "request_context")
    assert find_context(run(WITH_TOOLS)) == RetrievedContext(
        ('{"doc":"Paris is the capital of France.","score":1}', '"plain text result"'), "tool_results"
    )
    assert find_context(run("no tools, no context")) is None
    assert find_context(run(WITH_TOOLS, {"tenant": "acme"})).source == "tool_results"  # type: ignore[union-attr]


def test_an_empty_source_is_present_and_stops_the_lookup() -> None:
    # "retrieval returned nothing" is an answer: the kinds treat it as Mastra treats an empty context.
    assert find_context(run(WITH_TOOLS, {"context": []})) == RetrievedContext((), "request_context")
    assert find_context(run(WITH_TOOLS), options_context=()) == RetrievedContext((), "options")
    # A null is no answer: the lookup goes on.
    assert find_context(run(WITH_TOOLS, {"context": None})).source == "tool_results"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["a", "b"], ("a", "b")),
        (("a",), ("a",)),
        ("one document", ("one document",)),
        (["text", {"id": 1, "body": "é"}, 2.0, None], ("text", '{"id":1,"body":"é"}', "2", "null")),
        ([], ()),
    ],
)
def test_request_context_pieces(value: Any, expected: tuple[str, ...]) -> None:
    assert context_from_request_context({"context": value}) == expected


def test_request_context_of_another_type_is_an_error_not_a_misread() -> None:
    assert context_from_request_context(None) is None and context_from_request_context({}) is None
    with pytest.raises(ValueError, match=r"request_context\['context'\] must be a list of strings, got dict"):
        context_from_request_context({"context": {"doc": "x"}})


# -- tool results ----------------------------------------------------------------------------------


def test_tool_results_of_every_assistant_message_typed_and_as_json() -> None:
    split_turn = (
        user_message("ignored: not an assistant message"),
        assistant_message(tool_invocations=(search_result("c1", ["first"]),), id="a1"),
        assistant_message("done", tool_invocations=(search_result("c2", {"n": 3}),), id="a2"),
    )
    assert tool_result_context(split_turn) == ('["first"]', '{"n":3}')
    # The same messages as JSON (our parts) and in Mastra's stored shape (content.toolInvocations).
    as_json = [m.model_dump(by_alias=True) for m in split_turn]
    assert tool_result_context(as_json) == ('["first"]', '{"n":3}')
    mastra_shape = [
        {
            "role": "assistant",
            "content": {
                "format": 2,
                "parts": [],
                "toolInvocations": [
                    {"state": "result", "toolCallId": "c", "toolName": "t", "args": {}, "result": {"ok": True}},
                    {"state": "call", "toolCallId": "d", "toolName": "t", "args": {}},
                ],
            },
        }
    ]
    assert tool_result_context(mastra_shape) == ('{"ok":true}',)


@pytest.mark.parametrize(
    "output",
    [
        "a plain string",
        {"text": "an object"},
        (assistant_message("no tools"),),
        (assistant_message(tool_invocations=(search_result("c", None, state="call"),)),),
        [{"role": "assistant", "content": "string content"}],
        [],
    ],
)
def test_outputs_without_tool_results(output: Any) -> None:
    assert tool_result_context(output) is None


def test_js_json_prints_as_json_stringify() -> None:
    class Doc(BaseModel):
        page_number: int
        text: str

    assert js_json({"a": [1.0, 1.5, "x"], "b": None, "c": True}) == '{"a":[1,1.5,"x"],"b":null,"c":true}'
    assert js_json("text") == '"text"'
    assert js_json("naïve ✓") == '"naïve ✓"'
    assert js_json(Doc(page_number=2, text="t")) == '{"page_number":2,"text":"t"}'


# -- a prompt step that has nothing to judge -------------------------------------------------------


async def test_a_prompt_factory_may_say_not_scorable_and_no_judge_is_called(
    judge_server: JudgeServer, make_judge_model
) -> None:
    class Out(BaseModel):
        ok: bool

    def prompt(ctx: StepContext) -> str | NotScorable:
        found = find_context(ctx.run)
        return not_scorable(NO_CONTEXT_REASON) if found is None else "judge: " + " ".join(found.pieces)

    scorer = (
        create_scorer(id="rag", judge=make_judge_model())
        .preprocess(description="p", create_prompt=prompt, output_schema=Out)
        .generate_score(lambda ctx: float(ctx.results.preprocess_step_result.ok))
    )
    result = await scorer.run(input="q", output=(AgentMessage(id="a", role="assistant"),))
    assert result.not_scorable is not None
    assert (result.not_scorable.step, result.not_scorable.reason) == ("preprocess", NO_CONTEXT_REASON)
    assert result.score is None and result.judge is None and result.preprocess_prompt is None
    assert judge_server.requests == []
    # With context, the same step calls its judge as any prompt step does.
    judge_server.script(Reply.json({"ok": True}))
    scored = await scorer.run(input="q", output="a", request_context={"context": ["doc one", "doc two"]})
    assert scored.score == 1.0 and scored.not_scorable is None
    assert judge_server.requests[0].user_prompt == "judge: doc one doc two"
