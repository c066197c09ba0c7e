"""Mastra's code tool-call-accuracy scorer: its test cases (code/tool-call-accuracy/index.test.ts), in
Mastra's message shape and in the service's typed one, plus options, scale and the registry."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.scorers import create_tool_call_accuracy_scorer_code
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.tool_use.tool_call_accuracy import ToolCallAccuracyPreprocess, check_tool_order
from sidecar.scoring import ScorerRunError
from sidecar.settings import SettingsError, load_settings
from tests.support.tool_runs import Shape, agent_run, invocation, live_config, message, run_with_tools

WEATHER = invocation("weather-tool", "call-123", {"location": "New York"}, {"temperature": "20°C"})
SEARCH = invocation("search-tool", "call-1", {"query": "weather"}, {"results": ["weather info"]})
CALENDAR = invocation("calendar-tool", "call-3", {"action": "check"}, {"events": []})
CALCULATOR = invocation("calculator-tool", "call-123", {"expression": "2+2"}, {"result": 4})


async def score(
    options: dict[str, Any], calls: list[dict[str, Any]], shape: Shape
) -> tuple[float | None, ToolCallAccuracyPreprocess]:
    scorer = create_tool_call_accuracy_scorer_code(options)
    result = await scorer.run(**run_with_tools("What is the weather?", "Let me help you.", calls, shape=shape))
    pre = result.preprocess_step_result
    assert isinstance(pre, ToolCallAccuracyPreprocess)
    return result.score, pre


@pytest.fixture(params=["mastra", "typed"])
def shape(request: pytest.FixtureRequest) -> Shape:
    return request.param  # type: ignore[no-any-return]


# -- Mastra's cases ----------------------------------------------------------------------------------


async def test_expected_tool_called_scores_1(shape: Shape) -> None:
    got, pre = await score({"expectedTool": "weather-tool"}, [WEATHER], shape)
    assert got == 1
    assert pre.correct_tool_called is True and pre.actual_tools == ("weather-tool",)


async def test_wrong_tool_scores_0(shape: Shape) -> None:
    got, pre = await score({"expectedTool": "weather-tool"}, [CALCULATOR], shape)
    assert got == 0
    assert pre.correct_tool_called is False and pre.actual_tools == ("calculator-tool",)


async def test_no_tool_calls_score_0(shape: Shape) -> None:
    got, pre = await score({"expectedTool": "weather-tool"}, [], shape)
    assert got == 0
    assert pre.has_tool_calls is False and pre.actual_tools == ()


async def test_expected_among_several_non_strict_scores_1(shape: Shape) -> None:
    calls = [invocation("search-tool", "call-1"), {**WEATHER, "toolCallId": "call-2"}, CALENDAR]
    got, pre = await score({"expectedTool": "weather-tool", "strictMode": False}, calls, shape)
    assert got == 1
    assert pre.correct_tool_called is True
    assert pre.actual_tools == ("search-tool", "weather-tool", "calendar-tool")


async def test_expected_among_several_strict_scores_0(shape: Shape) -> None:
    calls = [invocation("search-tool", "call-1"), {**WEATHER, "toolCallId": "call-2"}, CALENDAR]
    got, pre = await score({"expectedTool": "weather-tool", "strictMode": True}, calls, shape)
    assert got == 0
    assert pre.correct_tool_called is False  # the newest version judges it in strict mode too


async def test_only_the_expected_tool_strict_scores_1(shape: Shape) -> None:
    got, pre = await score({"expected_tool": "weather-tool", "strict_mode": True}, [WEATHER], shape)
    assert got == 1 and pre.correct_tool_called is True


async def test_a_call_without_result_counts(shape: Shape) -> None:
    got, pre = await score({"expectedTool": "weather-tool"}, [{**WEATHER, "state": "call"}], shape)
    assert got == 1 and pre.actual_tools == ("weather-tool",)


@pytest.mark.parametrize(
    ("run", "what"),
    [
        (agent_run([], [message("test", "assistant", "output-1")]), "no input messages"),
        (agent_run([message("What is the weather?", "user", "input-1")], []), "no output messages"),
    ],
)
async def test_empty_input_or_output_is_an_error(run: dict[str, Any], what: str) -> None:
    scorer = create_tool_call_accuracy_scorer_code(expected_tool="weather-tool")
    with pytest.raises(ScorerRunError, match="Input and output messages cannot be null or empty") as caught:
        await scorer.run(**run)
    assert caught.value.failed_step == "preprocess", what


ORDER = ["search-tool", "weather-tool"]


@pytest.mark.parametrize(
    ("strict", "called", "expected_order", "score_", "correct"),
    [
        (True, ["search-tool", "weather-tool"], ORDER, 1, True),
        (True, ["weather-tool", "search-tool"], ORDER, 0, False),
        (False, ["search-tool", "calendar-tool", "weather-tool"], ORDER, 1, True),
        (False, ["weather-tool", "calendar-tool", "search-tool"], ORDER, 0, False),
        (False, ["search-tool", "weather-tool"], [*ORDER, "calendar-tool"], 0, False),
        (True, ["search-tool", "log-tool", "weather-tool"], ORDER, 0, False),
    ],
)
async def test_expected_order(
    shape: Shape, strict: bool, called: list[str], expected_order: list[str], score_: float, correct: bool
) -> None:
    calls = [invocation(name, f"call-{i}") for i, name in enumerate(called, start=1)]
    # expectedTool is ignored when an order is given (Mastra's test passes both).
    options = {"expectedTool": "search-tool", "expectedToolOrder": expected_order, "strictMode": strict}
    got, pre = await score(options, calls, shape)
    assert got == score_
    assert pre.correct_order_called is correct
    assert list(pre.actual_tools) == called


async def test_without_an_order_correct_order_called_is_null(shape: Shape) -> None:
    scorer = create_tool_call_accuracy_scorer_code({"expectedTool": "weather-tool"})
    result = await scorer.run(**run_with_tools("weather?", "sunny", [WEATHER], shape=shape))
    assert result.score == 1
    assert isinstance(result.preprocess_step_result, ToolCallAccuracyPreprocess)
    assert result.preprocess_step_result.correct_order_called is None
    wire = result.model_dump(mode="json", by_alias=True)["preprocessStepResult"]
    assert "correctOrderCalled" not in wire  # records leave out nulls
    assert wire["correctToolCalled"] is True
    assert wire["toolCallInfos"][0]["toolName"] == "weather-tool"
    assert wire["toolCallInfos"][0]["toolCallId"] == "call-123"
    assert (wire["toolCallInfos"][0]["messageIndex"], wire["toolCallInfos"][0]["invocationIndex"]) == (0, 0)


# -- edges of Mastra's helpers -----------------------------------------------------------------------


def test_non_strict_order_uses_each_tools_first_call() -> None:
    # checkToolOrder looks up the first call of each expected tool: a repeated earlier tool breaks it.
    assert check_tool_order(["b", "a", "b"], ("a", "b")) is False
    assert check_tool_order(["a", "x", "b", "a"], ("a", "b")) is True
    assert check_tool_order(["a"], ("a", "a")) is False  # the same first call cannot come after itself


async def test_an_empty_order_list_passes_the_constructor_and_scores_by_the_tool() -> None:
    # JavaScript's [] is truthy (constructor passes), but `length > 0` skips the order check.
    scorer = create_tool_call_accuracy_scorer_code({"expectedToolOrder": []})
    result = await scorer.run(**run_with_tools("q", "a", [WEATHER]))
    assert result.score == 0  # no expectedTool either


def test_options_need_an_expected_tool_or_order() -> None:
    with pytest.raises(ValueError, match="Either expectedTool or expectedToolOrder must be provided"):
        create_tool_call_accuracy_scorer_code({})
    with pytest.raises(ValueError, match="Either expectedTool or expectedToolOrder"):
        create_tool_call_accuracy_scorer_code({"expectedTool": ""})


async def test_partial_calls_are_not_counted() -> None:
    calls = [{**WEATHER, "state": "partial-call"}, invocation("search-tool", "c2")]
    got, pre = await score({"expectedTool": "weather-tool"}, calls, "mastra")
    assert pre.actual_tools == ("search-tool",) and got == 0


async def test_scale_multiplies_the_score() -> None:
    scorer = create_tool_call_accuracy_scorer_code({"expectedTool": "weather-tool", "scale": 10})
    assert (await scorer.run(**run_with_tools("q", "a", [WEATHER]))).score == 10
    falsy = create_tool_call_accuracy_scorer_code({"expectedTool": "weather-tool", "scale": 0})
    assert (await falsy.run(**run_with_tools("q", "a", [WEATHER]))).score == 1  # falsy scale → 1


def test_options_change_the_score_ids() -> None:
    a = create_tool_call_accuracy_scorer_code(expected_tool="a")
    b = create_tool_call_accuracy_scorer_code(expected_tool="b")
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == create_tool_call_accuracy_scorer_code({"expectedTool": "a"}).fingerprint


# -- the registry ------------------------------------------------------------------------------------


def test_kind_is_registered_with_what_it_reads() -> None:
    kind = scorer_kinds()["tool-call-accuracy"]
    assert not kind.needs_judge and kind.judge_calls_per_run == 0
    assert kind.needs == frozenset({"input", "output", "tool_calls"})
    assert kind.direction == "higher" and kind.eval_only is None
    scorer = kind.build(None, {"expectedTool": "weather-tool", "strictMode": True})
    assert scorer.id == "code-tool-call-accuracy-scorer"


def test_an_option_typo_is_reported_with_did_you_mean() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(live_config("tool-call-accuracy", "{expectedTol: weather-tool}"))
    [problem] = caught.value.problems
    assert problem.path == "scorers[0].options.expectedTol"
    assert "did you mean 'expectedTool'?" in problem.message


def test_a_missing_expectation_is_a_configuration_error() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(live_config("tool-call-accuracy", "{strictMode: true}"))
    assert "Either expectedTool or expectedToolOrder must be provided" in caught.value.problems[0].message
