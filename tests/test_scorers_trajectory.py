"""Mastra's code trajectory-accuracy scorer and its comparison (code/trajectory/index.test.ts, utils.ts):
Mastra's cases on trajectories, the same on agent messages, expectations from options and from an eval
item's ground truth, and the kind."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.scorers import create_trajectory_accuracy_scorer_code
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.tool_use.trajectory import (
    ExpectedStep,
    Trajectory,
    expectation_from_ground_truth,
    extract_trajectory,
)
from sidecar.scorers.tool_use.trajectory_accuracy import NO_EXPECTED_TRAJECTORY, TrajectoryAccuracyPreprocess
from sidecar.scorers.tool_use.trajectory_checks import (
    analyze_tool_failures,
    check_trajectory_blacklist,
    check_trajectory_efficiency,
    compare_trajectories,
)
from sidecar.settings import SettingsError, load_settings
from tests.support.tool_runs import invocation, live_config, message, run_with_tools


def trajectory(*tools: str | dict[str, Any]) -> dict[str, Any]:
    """Mastra's test helper: tool_call steps (a name, or a step's fields)."""
    steps = [
        {"stepType": "tool_call", "name": t} if isinstance(t, str) else {"stepType": "tool_call", **t} for t in tools
    ]
    return {"steps": steps}


def user_input(text: str = "Do the task") -> dict[str, Any]:
    return {
        "inputMessages": [message(text, "user", "input-1")],
        "rememberedMessages": [],
        "systemMessages": [],
        "taggedSystemMessages": {},
    }


EXPECTED = {"steps": [{"stepType": "tool_call", "name": "search"}, {"stepType": "tool_call", "name": "summarize"}]}


async def run(options: dict[str, Any], output: Any, ground_truth: Any = None) -> tuple[float | None, Any]:
    scorer = create_trajectory_accuracy_scorer_code(options)
    result = await scorer.run(input=user_input(), output=output, ground_truth=ground_truth)
    assert isinstance(result.preprocess_step_result, TrajectoryAccuracyPreprocess)
    return result.score, result.preprocess_step_result


def test_scorer_id_and_name() -> None:
    scorer = create_trajectory_accuracy_scorer_code(expected_trajectory=EXPECTED)
    assert (scorer.id, scorer.name) == ("code-trajectory-accuracy-scorer", "Trajectory Accuracy Scorer")
    assert "[search → summarize] (relaxed ordering)" in scorer.description


# -- relaxed (the default) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "options", "score", "field", "value"),
    [
        (["search", "summarize"], {}, 1, "missing_steps", ()),
        (["search", "validate", "summarize"], {}, 1, "extra_steps", ("validate",)),
        (["search"], {}, 0.5, "missing_steps", ("summarize",)),
        (["translate", "format"], {}, 0, "missing_steps", ("search", "summarize")),
        (["summarize", "search"], {}, 0.5, "out_of_order_steps", ("summarize",)),
        (["search", "search", "summarize"], {}, 1, "repeated_steps", ("search",)),
        (["search", "search", "summarize"], {"allowRepeatedSteps": False}, 0.9, "repeated_steps", ("search",)),
        # strict ordering (Mastra's tests used strictOrder: true, now ordering: 'strict')
        (["search", "summarize"], {"ordering": "strict"}, 1, "matched_steps", 2),
        (["search", "summarize", "format"], {"ordering": "strict"}, 0.75, "extra_steps", ("format",)),
        (["summarize", "search"], {"ordering": "strict"}, 0, "out_of_order_steps", ("summarize", "search")),
        (["search"], {"ordering": "strict"}, 0.5, "missing_steps", ("summarize",)),
        # unordered
        (["summarize", "search"], {"ordering": "unordered"}, 1, "out_of_order_steps", ()),
        (["summarize"], {"ordering": "unordered"}, 0.5, "missing_steps", ("search",)),
        # empty actual trajectory
        ([], {}, 0, "missing_steps", ("search", "summarize")),
    ],
)
async def test_mastras_comparison_cases(
    steps: list[str], options: dict[str, Any], score: float, field: str, value: Any
) -> None:
    got, pre = await run({"expectedTrajectory": EXPECTED, "comparisonOptions": options}, trajectory(*steps))
    assert got == score
    assert getattr(pre.comparison, field) == value


@pytest.mark.parametrize(
    ("expected", "actual", "score"),
    [
        # Pinned fields of a typed expected step are compared (newest Mastra: always, no compareStepData).
        (
            [{"stepType": "tool_call", "name": "search", "toolArgs": {"query": "test"}},
             {"stepType": "tool_call", "name": "summarize", "toolArgs": {"maxLength": 100}}],
            trajectory({"name": "search", "toolArgs": {"query": "test"}},
                       {"name": "summarize", "toolArgs": {"maxLength": 100}}),
            1,
        ),
        (
            [{"stepType": "tool_call", "name": "search", "toolArgs": {"query": "test"}}],
            trajectory({"name": "search", "toolArgs": {"query": "different"}}),
            0,
        ),
        (
            [{"stepType": "tool_call", "name": "search", "toolResult": {"count": 5}}],
            trajectory({"name": "search", "toolResult": {"count": 5}}),
            1,
        ),
        ([{"stepType": "model_generation", "name": "gpt4"}], trajectory("gpt4"), 0),
        # Without a step type only the name counts.
        ([{"name": "search", "toolArgs": {"query": "test"}}], trajectory({"name": "search"}), 1),
        # JSON equality as JavaScript sees numbers: 100 and 100.0 are the same value.
        (
            [{"stepType": "tool_call", "name": "s", "toolArgs": {"n": 100}}],
            trajectory({"name": "s", "toolArgs": {"n": 100.0}}),
            1,
        ),
        (
            [{"stepType": "model_generation", "name": "plan"}, {"stepType": "tool_call", "name": "search"},
             {"stepType": "model_generation", "name": "synthesize"}],
            {"steps": [{"stepType": "model_generation", "name": "plan"}, {"stepType": "tool_call", "name": "search"},
                       {"stepType": "model_generation", "name": "synthesize"}]},
            1,
        ),
    ],
)  # fmt: skip
async def test_step_data_and_types(expected: list[dict[str, Any]], actual: dict[str, Any], score: float) -> None:
    got, _ = await run({"expectedTrajectory": expected}, actual)
    assert got == score


async def test_preprocess_result_structure() -> None:
    scorer = create_trajectory_accuracy_scorer_code(expected_trajectory=EXPECTED)
    result = await scorer.run(input=user_input(), output=trajectory("search", "summarize"))
    wire = result.model_dump(mode="json", by_alias=True)["preprocessStepResult"]
    assert len(wire["actualTrajectory"]["steps"]) == 2
    assert wire["expectedTrajectory"] == {
        "steps": [{"name": "search", "stepType": "tool_call"}, {"name": "summarize", "stepType": "tool_call"}]
    }
    assert wire["actualStepNames"] == ["search", "summarize"] == wire["expectedStepNames"]
    assert {"score", "matchedSteps", "missingSteps", "extraSteps"} <= set(wire["comparison"])


# -- agent messages, expectations, no expectation ---------------------------------------------------


@pytest.mark.parametrize("shape", ["mastra", "typed"])
async def test_the_trajectory_of_an_agent_run_is_its_tool_calls(shape: str) -> None:
    calls = [invocation("search", "c1", {"q": "x"}, {"n": 1}), invocation("summarize", "c2", state="call")]
    built = run_with_tools("Do the task", "done", calls, shape=shape)  # type: ignore[arg-type]
    scorer = create_trajectory_accuracy_scorer_code(
        expected_trajectory=[{"name": "search", "stepType": "tool_call", "toolArgs": {"q": "x"}}, "summarize"],
        comparison_options={"ordering": "strict"},
    )
    result = await scorer.run(**built)
    assert result.score == 1
    pre = result.preprocess_step_result
    assert isinstance(pre, TrajectoryAccuracyPreprocess)
    steps = pre.actual_trajectory.steps
    assert [(s.step_type, s.name, s.success) for s in steps] == [
        ("tool_call", "search", True),
        ("tool_call", "summarize", False),
    ]


def test_extract_trajectory_keeps_failures_and_skips_partial_calls() -> None:
    msg = {
        "id": "m",
        "role": "assistant",
        "createdAt": "",
        "content": {
            "format": 2,
            "parts": [
                {"type": "tool-invocation", "toolInvocation": invocation("a", "1")},
                {"type": "tool-invocation", "toolInvocation": {**invocation("b", "2"), "isError": True}},
                {"type": "tool-invocation", "toolInvocation": invocation("c", "3", state="partial-call")},
                {
                    "type": "tool-invocation",
                    "toolInvocation": {"toolCallId": "4", "toolName": "d", "state": "output-error"},
                },
            ],
        },
    }
    steps = extract_trajectory(None, [msg]).steps
    assert [(s.name, s.success) for s in steps] == [("a", True), ("b", False), ("d", False)]


@pytest.mark.parametrize(
    "ground_truth",
    [
        {"expectedTrajectory": {"steps": [{"name": "fetch"}, {"name": "format"}]}},
        {"steps": [{"name": "fetch"}, {"name": "format"}]},
        ["fetch", "format"],
    ],
)
async def test_an_eval_items_expected_trajectory(ground_truth: Any) -> None:
    got, pre = await run({}, trajectory("fetch", "format"), ground_truth=ground_truth)
    assert got == 1 and pre.expected_step_names == ("fetch", "format")


async def test_options_win_over_the_item_but_the_items_ordering_applies() -> None:
    truth = {"expectedTrajectory": {"steps": [{"name": "other"}], "ordering": "strict"}}
    got, pre = await run({"expectedTrajectory": EXPECTED}, trajectory("search", "summarize", "format"), truth)
    assert pre.expected_step_names == ("search", "summarize")
    assert got == 0.75  # strict, from the item: the extra step costs half its share


async def test_no_expected_trajectory_scores_0_as_mastra_does() -> None:
    got, pre = await run({}, trajectory("search"))
    assert got == 0
    assert pre.error == NO_EXPECTED_TRAJECTORY and pre.comparison is None


async def test_scale() -> None:
    got, _ = await run({"expectedTrajectory": EXPECTED, "scale": 10}, trajectory("search"))
    assert got == 5


def test_expected_steps_from_a_trajectory_drop_run_only_fields() -> None:
    from sidecar.scorers.tool_use.trajectory_accuracy import TrajectoryAccuracyOptions

    opts = TrajectoryAccuracyOptions.model_validate(
        {"expectedTrajectory": {"steps": [{"stepType": "tool_call", "name": "a", "durationMs": 5,
                                           "children": [{"stepType": "tool_call", "name": "b"}]}]}}
    )  # fmt: skip
    assert opts.expected_trajectory is not None
    step = opts.expected_trajectory[0]
    assert step.field("durationMs") is None and step.children is not None
    assert [s.name for s in step.children.steps or ()] == ["b"]
    assert TrajectoryAccuracyOptions.model_validate({"expectedTrajectory": []}).expected_trajectory is None
    with pytest.raises(ValueError):
        TrajectoryAccuracyOptions.model_validate({"expectedTrajectory": "search"})


@pytest.mark.parametrize(
    "written",
    [
        ["search", "format"],
        ("search", "format"),
        [{"name": "search"}, {"name": "format"}],
        {"steps": [{"stepType": "tool_call", "name": "search"}, {"stepType": "tool_call", "name": "format"}]},
    ],
)
def test_the_code_and_llm_kinds_read_an_expected_trajectory_alike(written: Any) -> None:
    from sidecar.scorers.tool_use.trajectory_accuracy import TrajectoryAccuracyOptions
    from sidecar.scorers.tool_use.trajectory_llm import TrajectoryLLMOptions

    code = TrajectoryAccuracyOptions.model_validate({"expectedTrajectory": written}).expected_trajectory
    llm = TrajectoryLLMOptions.model_validate({"expectedTrajectory": written}).expected_trajectory
    assert code == llm and code is not None and [step.name for step in code] == ["search", "format"]
    for options in (TrajectoryAccuracyOptions, TrajectoryLLMOptions):
        assert options.model_validate({"expectedTrajectory": None}).expected_trajectory is None
        for refused in ("search", {"name": "search"}, 3):
            with pytest.raises(ValueError, match="expected a list of steps, or a trajectory"):
                options.model_validate({"expectedTrajectory": refused})


# -- the other comparisons of Mastra's utils ---------------------------------------------------------


def test_compare_with_no_expected_steps() -> None:
    assert compare_trajectories(Trajectory(), []).score == 1
    assert compare_trajectories(Trajectory.model_validate(trajectory("a")), []).extra_steps == ("a",)


def test_efficiency_blacklist_and_failures() -> None:
    steps = Trajectory.model_validate(
        trajectory({"name": "search", "toolArgs": {"q": 1}}, {"name": "search", "toolArgs": {"q": 1.0}}, "b", "c")
    )
    efficiency = check_trajectory_efficiency(steps, max_steps=2)
    assert [c.index for c in efficiency.redundant_calls] == [1]
    assert efficiency.over_step_budget and efficiency.score == 0.4  # mean(1 - 2/2 → 0, 1 - 0.2)
    blacklist = check_trajectory_blacklist(steps, blacklisted_tools=["c", "z"], blacklisted_sequences=[["b", "c"]])
    assert blacklist.score == 0 and blacklist.violated_tools == ("c",) and blacklist.violated_sequences == (("b", "c"),)
    failing = Trajectory.model_validate(
        trajectory({"name": "s", "success": False}, {"name": "s", "success": False}, {"name": "s", "success": False},
                   {"name": "s", "success": False}, {"name": "t", "success": True})
    )  # fmt: skip
    analysis = analyze_tool_failures(failing, max_retries_per_tool=1)
    assert analysis.total_retries == 3 and analysis.excessive_retry_tools == ("s",)
    assert analysis.patterns[0].fell_back_to_alternative and analysis.patterns[0].alternative_tool == "t"
    assert analysis.score == 0.6  # two retries over the limit


def test_expectation_from_ground_truth_ignores_other_truths() -> None:
    assert expectation_from_ground_truth("Paris") is None
    assert expectation_from_ground_truth({"answer": "x"}) is None  # not an expectation: no steps from it
    assert expectation_from_ground_truth({"ordering": "strict"}).steps is None  # type: ignore[union-attr]
    assert ExpectedStep.model_validate("a").name == "a"


# -- the kind ----------------------------------------------------------------------------------------


def test_kind_is_registered_with_what_it_reads() -> None:
    kind = scorer_kinds()["trajectory"]
    assert not kind.needs_judge and kind.needs == frozenset({"tool_calls"}) and kind.eval_only is None


def test_options_typo() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(live_config("trajectory", "{expectedTrajectry: [search]}"))
    assert "did you mean 'expectedTrajectory'?" in caught.value.problems[0].message
    with pytest.raises(SettingsError) as caught:
        load_settings(live_config("trajectory", "{expectedTrajectory: [a], comparisonOptions: {ordering: loose}}"))
    assert caught.value.problems[0].path == "scorers[0].options.comparisonOptions.ordering"
    ok = live_config("trajectory", "{expected_trajectory: [search, summarize], comparison_options: {ordering: strict}}")
    assert load_settings(ok).scorers[0].kind == "trajectory"


# -- properties of the comparison --------------------------------------------------------------------

names = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=6)


@given(names, names, st.sampled_from(["strict", "relaxed", "unordered"]), st.booleans())
def test_comparison_scores_stay_in_range_and_an_exact_path_scores_1(
    actual: list[str], expected: list[str], ordering: Any, allow_repeated: bool
) -> None:
    path = Trajectory.model_validate(trajectory(*actual))
    wanted = [ExpectedStep(name=n) for n in expected]
    result = compare_trajectories(path, wanted, ordering=ordering, allow_repeated_steps=allow_repeated)
    assert 0 <= result.score <= 1
    assert result.matched_steps + len(result.missing_steps) == len(expected)
    exact = compare_trajectories(
        Trajectory.model_validate(trajectory(*expected)), wanted, ordering=ordering, allow_repeated_steps=True
    )
    assert exact.score == 1


def test_a_zero_budget_is_infinitely_over_as_in_javascript() -> None:
    assert (
        check_trajectory_efficiency(
            Trajectory.model_validate(trajectory("a")), max_steps=0, no_redundant_calls=False
        ).score
        == 0
    )
    assert check_trajectory_efficiency(Trajectory(), max_steps=0).score == 1
