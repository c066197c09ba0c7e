"""Mastra's quick checks (code/checks: index.test.ts and index.scenario.test.ts) as the `checks` kind,
in Mastra's message shape and the service's typed one, plus how a list of checks scores and the options."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.scorers import create_checks_scorer
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.tool_use.checks import ChecksOptions, ChecksPreprocess, compile_js_regex
from sidecar.settings import SettingsError, load_settings
from tests.support.tool_runs import Shape, invocation, live_config, run_with_tools


@pytest.fixture(params=["mastra", "typed"])
def shape(request: pytest.FixtureRequest) -> Shape:
    return request.param  # type: ignore[no-any-return]


async def check(
    spec: dict[str, Any], answer: str, calls: list[dict[str, Any]] | None = None, *, shape: Shape = "mastra"
) -> float | None:
    scorer = create_checks_scorer(checks=[spec])
    result = await scorer.run(**run_with_tools("question", answer, calls, shape=shape))
    return result.score


def calls(*names: str, **fields: Any) -> list[dict[str, Any]]:
    return [{**invocation(n, f"c{i}"), **fields} for i, n in enumerate(names, start=1)]


# -- text checks (Mastra's unit tests) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "answer", "expected"),
    [
        ({"type": "includes", "expected": "sunny"}, "It is Sunny and warm today.", 1),
        ({"type": "includes", "expected": "rainy"}, "It is sunny and warm.", 0),
        ({"type": "includes", "expected": "Sunny", "ignoreCase": False}, "It is sunny and warm.", 0),
        ({"type": "excludes", "unwanted": "error"}, "Hi there! How can I help?", 1),
        ({"type": "excludes", "unwanted": "error"}, "An error occurred while processing.", 0),
        ({"type": "equals", "expected": "Hello, world!"}, "hello, world!", 1),
        ({"type": "equals", "expected": "Hello, world!"}, "Hello, world! How are you?", 0),
        ({"type": "equals", "expected": "Hello", "ignoreCase": False}, "hello", 0),
        ({"type": "matches", "pattern": r"\d+°[FC]"}, "The temperature is 72°F today.", 1),
        ({"type": "matches", "pattern": r"\d+°[FC]"}, "It is warm outside.", 0),
        ({"type": "matches", "pattern": "hello", "exact": True}, "say hello world", 0),
        ({"type": "matches", "pattern": "hello", "exact": True}, "hello", 1),
        ({"type": "similarity", "expected": "hello world"}, "hello world", 1),
    ],
)
async def test_text_checks(shape: Shape, spec: dict[str, Any], answer: str, expected: float) -> None:
    assert await check(spec, answer, shape=shape) == expected


async def test_similarity_is_the_similarity_itself_without_a_threshold() -> None:
    close = await check({"type": "similarity", "expected": "Sunny, 72°F"}, "Sunny, 73°F")
    assert close is not None and 0.5 < close <= 1
    assert close == 14 / 18  # Dice of the bigrams of "sunny,72°f" and "sunny,73°f": 2·7 / (9 + 9)
    far = await check({"type": "similarity", "expected": "abcdefgh"}, "xyz12345")
    assert far is not None and far < 0.3
    assert await check({"type": "similarity", "expected": "Sunny, 72°F", "threshold": 0.8}, "Sunny, 73°F") == 0
    assert await check({"type": "similarity", "expected": "Sunny, 72°F", "threshold": 0.7}, "Sunny, 73°F") == 1


# -- tool checks (Mastra's unit tests) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "called", "expected"),
    [
        ({"type": "calledTool", "toolName": "get_weather"}, ["get_weather"], 1),
        ({"type": "calledTool", "toolName": "get_weather"}, ["search"], 0),
        ({"type": "calledTool", "toolName": "search", "times": 2}, ["search", "search"], 1),
        ({"type": "calledTool", "toolName": "search", "times": 3}, ["search", "search"], 0),
        ({"type": "didNotCall", "toolName": "delete_user"}, [], 1),
        ({"type": "didNotCall", "toolName": "delete_user"}, ["delete_user"], 0),
        ({"type": "toolOrder", "expectedOrder": ["search", "summarize"]}, ["search", "summarize"], 1),
        ({"type": "toolOrder", "expectedOrder": ["search", "summarize"]}, ["search", "validate", "summarize"], 1),
        ({"type": "toolOrder", "expectedOrder": ["search", "summarize"]}, ["summarize", "search"], 0),
        ({"type": "toolOrder", "expectedOrder": ["search", "summarize"]}, ["search"], 0),
        ({"type": "maxToolCalls", "max": 3}, ["a", "b"], 1),
        ({"type": "maxToolCalls", "max": 1}, ["a", "b"], 0),
        ({"type": "usedNoTools"}, [], 1),
        ({"type": "usedNoTools"}, ["check"], 0),
        ({"type": "noToolErrors"}, ["search"], 1),
        ({"type": "noToolErrors"}, [], 1),
    ],
)
async def test_tool_checks(shape: Shape, spec: dict[str, Any], called: list[str], expected: float) -> None:
    assert await check(spec, "Working on it...", calls(*called), shape=shape) == expected


async def test_no_tool_errors_sees_every_failure_form() -> None:
    spec = {"type": "noToolErrors"}
    assert await check(spec, "x", calls("search", result={"error": "Network timeout"})) == 0
    assert await check(spec, "x", calls("search", state="call")) == 0  # a call that never got its result
    assert await check(spec, "x", calls("search", isError=True)) == 0
    assert await check(spec, "x", calls("search", state="output-error", errorText="boom")) == 0
    assert await check(spec, "x", calls("search", result={"data": "found"})) == 1


# -- Mastra's scenarios: several checks on one agent ------------------------------------------------


async def test_weather_agent_scenario(shape: Shape) -> None:
    checks = [
        {"type": "includes", "expected": "sunny"},
        {"type": "includes", "expected": "Brooklyn"},
        {"type": "excludes", "unwanted": "error"},
        {"type": "matches", "pattern": r"\d+°F"},
        {"type": "calledTool", "toolName": "get_weather"},
        {"type": "didNotCall", "toolName": "delete_user"},
        {"type": "noToolErrors"},
        {"type": "maxToolCalls", "max": 3},
        {"type": "similarity", "expected": "Sunny and 72°F in Brooklyn", "threshold": 0.5},
    ]
    weather = [invocation("get_weather", "call-w1", {"city": "Brooklyn"}, {"temperature": 72, "condition": "sunny"})]
    scorer = create_checks_scorer({"checks": checks})
    result = await scorer.run(
        **run_with_tools("Weather in Brooklyn?", "The weather in Brooklyn is sunny, 72°F.", weather, shape=shape)
    )
    assert result.score == 1
    pre = result.preprocess_step_result
    assert isinstance(pre, ChecksPreprocess)
    assert [r.id for r in pre.results][:3] == ["check-includes", "check-includes", "check-excludes"]
    assert all(r.passed for r in pre.results)


async def test_a_list_scores_the_share_of_checks_passed() -> None:
    scorer = create_checks_scorer(
        checks=[
            {"type": "includes", "expected": "42", "id": "has-answer"},
            {"type": "excludes", "unwanted": "answer"},
            {"type": "usedNoTools"},
        ],
        scale=10,
    )
    result = await scorer.run(**run_with_tools("What is the answer?", "The answer is 42."))
    assert result.score == 6.67  # 2 of 3, × 10, rounded
    pre = result.preprocess_step_result
    assert isinstance(pre, ChecksPreprocess)
    assert [(r.id, r.passed) for r in pre.results] == [
        ("has-answer", True),
        ("check-excludes", False),
        ("check-used-no-tools", True),
    ]
    assert pre.results[0].details == {"output": "the answer is 42.", "target": "42", "found": True}


async def test_text_checks_read_assistant_messages_joined_as_mastra_joins_them() -> None:
    output = [
        {"id": "1", "role": "assistant", "content": "Hello", "createdAt": ""},
        {"id": "2", "role": "tool", "content": "ignored", "createdAt": ""},
        {"id": "3", "role": "assistant", "content": "world", "createdAt": ""},
    ]
    includes = create_checks_scorer(checks=[{"type": "includes", "expected": "hello world"}])
    equals = create_checks_scorer(checks=[{"type": "equals", "expected": "helloworld"}])
    assert (await includes.run(input="q", output=output)).score == 1  # joined with a space
    assert (await equals.run(input="q", output=output)).score == 1  # joined with nothing


# -- options -----------------------------------------------------------------------------------------


def test_check_types_may_be_written_in_other_cases() -> None:
    opts = ChecksOptions.model_validate(
        {
            "checks": [
                {"type": "called_tool", "tool_name": "a"},
                {"type": "no-tool-errors"},
                {"type": "MaxToolCalls", "max": 2},
            ]
        }
    )
    assert [c.type for c in opts.checks] == ["calledTool", "noToolErrors", "maxToolCalls"]


def test_javascript_regular_expressions() -> None:
    assert compile_js_regex("HELLO", "i").search("say hello")
    assert not compile_js_regex(r"\d", "").search("٣")  # JavaScript's \d is ASCII only
    assert compile_js_regex("a$", "", exact=False).search("a\n")  # Python's own `$` in the source
    assert not compile_js_regex("a", "", exact=True).search("a\n")  # the anchor added is the very end
    assert compile_js_regex("b", "y").search("ab") is None  # sticky: at the start only
    with pytest.raises(ValueError, match="invalid regular expression flags"):
        compile_js_regex("a", "x")
    with pytest.raises(ValueError, match="invalid regular expression"):
        ChecksOptions.model_validate({"checks": [{"type": "matches", "pattern": "("}]})


def test_options_errors_are_configuration_errors() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(live_config("checks", "{checks: []}"))
    assert caught.value.problems[0].path == "scorers[0].options.checks"
    with pytest.raises(SettingsError) as caught:
        load_settings(live_config("checks", "{checkz: [{type: usedNoTools}]}"))
    assert any("did you mean 'checks'?" in p.message for p in caught.value.problems)
    with pytest.raises(SettingsError) as caught:
        load_settings(live_config("checks", "{checks: [{type: calledTool, tool: x}]}"))
    paths = [p.path for p in caught.value.problems]
    assert "scorers[0].options.checks[0].calledTool.tool" in paths
    ok = live_config("checks", "{checks: [{type: includes, expected: sunny}, {type: calledTool, toolName: w}]}")
    assert load_settings(ok).scorers[0].kind == "checks"


def test_kind_is_registered_with_what_it_reads() -> None:
    kind = scorer_kinds()["checks"]
    assert not kind.needs_judge and kind.needs == frozenset({"output", "tool_calls"})
    assert kind.direction == "higher" and kind.eval_only is None
