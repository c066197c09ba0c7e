"""Mastra's LLM trajectory scorer (``createTrajectoryAccuracyScorerLLM``), ported.

preprocess (the run's trajectory, and the expected steps when there are any, as text) → analyze (prompt
step: each step necessary? in order? which are missing or extra?) → generate_score (0.6 × necessary share
+ 0.3 × in-order share − 0.1 × missing share, clamped, rounded) → generate_reason (prompt step).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.tool_use.trajectory import (
    ExpectedStep,
    ExpectedTrajectoryOption,
    Trajectory,
    TrajectoryStep,
    expectation_from_ground_truth,
    extract_trajectory,
    js_json,
)
from sidecar.scorers.tool_use.trajectory_llm_prompts import INSTRUCTIONS, create_analyze_prompt, create_reason_prompt
from sidecar.scorers.tools_common import apply_scale, options_version, scale_of
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "StepEvaluation",
    "TrajectoryAnalysis",
    "TrajectoryLLMOptions",
    "TrajectoryLLMPreprocess",
    "create_trajectory_accuracy_scorer_llm",
    "format_expected_steps",
    "format_trajectory",
    "trajectory_quality_score",
]


class TrajectoryLLMOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    expected_trajectory: ExpectedTrajectoryOption = None
    # Not in Mastra: score × scale, for every kind alike. Falsy → 1.
    scale: float | None = None


class StepEvaluation(JudgeOutput):
    step_name: str
    was_necessary: bool
    was_in_order: bool
    reasoning: str


class TrajectoryAnalysis(JudgeOutput):
    step_evaluations: tuple[StepEvaluation, ...]
    missing_steps: tuple[str, ...] | None = None
    extra_steps: tuple[str, ...] | None = None
    overall_assessment: str


class TrajectoryLLMPreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    actual_trajectory: Trajectory
    actual_trajectory_formatted: str
    expected_trajectory_formatted: str | None = None
    has_steps: bool


def _step_details(step: TrajectoryStep) -> str:
    if step.step_type in ("tool_call", "mcp_tool_call"):
        parts = []
        if step.tool_args is not None:
            parts.append(f"args: {js_json(step.tool_args)}")
        if step.tool_result is not None:
            parts.append(f"result: {js_json(step.tool_result)}")
        return f" ({', '.join(parts)})" if parts else ""
    if step.step_type == "model_generation":
        model = step.field("modelId")
        return f" (model: {model})" if model else ""
    if step.step_type == "workflow_step":
        output = step.field("output")
        return f" (output: {js_json(output)})" if output is not None else ""
    return ""


def format_trajectory(steps: tuple[TrajectoryStep, ...], indent: int = 0) -> str:
    """One numbered line per step (``1. [tool_call] search (args: …, result: …)``), children indented."""
    lines = []
    for i, step in enumerate(steps, start=1):
        line = f"{'  ' * indent}{i}. [{step.step_type}] {step.name}{_step_details(step)}"
        if step.children:
            line += "\n" + format_trajectory(step.children, indent + 1)
        lines.append(line)
    return "\n".join(lines)


def format_expected_steps(steps: tuple[ExpectedStep, ...], indent: int = 0) -> str:
    lines = []
    for i, step in enumerate(steps, start=1):
        kind = f"[{step.step_type}] " if step.step_type else ""
        pinned = step.pinned_fields()
        data = f" ({js_json(pinned)})" if pinned else ""
        line = f"{'  ' * indent}{i}. {kind}{step.name}{data}"
        if step.children is not None and step.children.steps:
            line += "\n" + format_expected_steps(step.children.steps, indent + 1)
        lines.append(line)
    return "\n".join(lines)


def trajectory_quality_score(analysis: TrajectoryAnalysis) -> float:
    """Mastra's formula. No step judged: 0 with missing steps, 0.5 with only extra ones, else 1. Otherwise
    0.6 × necessary/judged + 0.3 × in order/judged − 0.1 × missing/(judged + missing), clamped to [0, 1]
    and rounded: the weights sum to 0.9, so a flawless path of judged steps scores 0.9, as in Mastra."""
    evaluations = analysis.step_evaluations
    missing = analysis.missing_steps or ()
    if not evaluations:
        if missing:
            return 0.0
        return 0.5 if analysis.extra_steps else 1.0
    total = len(evaluations)
    necessary = sum(1 for e in evaluations if e.was_necessary) / total
    in_order = sum(1 for e in evaluations if e.was_in_order) / total
    missing_share = len(missing) / (total + len(missing)) if missing else 0.0
    score = necessary * 0.6 + in_order * 0.3 - missing_share * 0.1
    return round_to_two_decimals(max(0.0, min(1.0, score)))


def create_trajectory_accuracy_scorer_llm(
    *, model: str | JudgeModel, options: TrajectoryLLMOptions | dict[str, Any] | None = None, **kwargs: Any
) -> Scorer:
    """``expected_trajectory`` (``expectedTrajectory``: steps, or a trajectory) and ``scale``."""
    opts = (
        options
        if isinstance(options, TrajectoryLLMOptions)
        else TrajectoryLLMOptions.model_validate({**(options or {}), **kwargs})
    )
    scale = scale_of(opts.scale)

    def preprocess(ctx: StepContext) -> TrajectoryLLMPreprocess:
        actual = extract_trajectory(ctx.run.input, ctx.run.output)
        expected = opts.expected_trajectory
        if expected is None:
            item = expectation_from_ground_truth(ctx.run.ground_truth)
            expected = item.steps if item is not None and item.steps else None
        return TrajectoryLLMPreprocess(
            actual_trajectory=actual,
            actual_trajectory_formatted=format_trajectory(actual.steps),
            expected_trajectory_formatted=format_expected_steps(expected) if expected else None,
            has_steps=bool(actual.steps),
        )

    def analyze_prompt(ctx: StepContext) -> str:
        pre: TrajectoryLLMPreprocess = ctx.results.preprocess_step_result
        return create_analyze_prompt(
            user_input=get_user_message_from_run_input(ctx.run.input) or "",
            agent_response=get_assistant_message_from_run_output(pre.actual_trajectory.raw_output) or "",
            actual_trajectory=pre.actual_trajectory_formatted,
            expected_trajectory=pre.expected_trajectory_formatted,
        )

    def generate_score(ctx: StepContext) -> float:
        analysis: TrajectoryAnalysis = ctx.results.analyze_step_result
        return apply_scale(trajectory_quality_score(analysis), scale)

    def reason_prompt(ctx: StepContext) -> str:
        analysis: TrajectoryAnalysis = ctx.results.analyze_step_result
        return create_reason_prompt(
            user_input=get_user_message_from_run_input(ctx.run.input) or "",
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            step_evaluations=[e.model_dump(by_alias=True) for e in analysis.step_evaluations],
            missing_steps=analysis.missing_steps or (),
            extra_steps=analysis.extra_steps or (),
        )

    description = (
        "Evaluates the trajectory against an expected trajectory using LLM analysis"
        if opts.expected_trajectory
        else "Evaluates the quality and appropriateness of the trajectory using LLM analysis"
    )
    return (
        create_scorer(
            id="llm-trajectory-accuracy-scorer",
            name="Trajectory Accuracy (LLM)",
            description=description,
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(preprocess)
        .analyze(
            description="Analyze the quality and appropriateness of the agent trajectory",
            create_prompt=analyze_prompt,
            output_schema=TrajectoryAnalysis,
        )
        .generate_score(generate_score)
        .generate_reason(
            description="Generate human-readable explanation of trajectory evaluation", create_prompt=reason_prompt
        )
        .with_version(options_version(opts))
    )


@scorer_kind(
    "trajectory-llm",
    options=TrajectoryLLMOptions,
    needs_judge=True,
    description="a judge's view of the agent's path: needed steps, in a sensible order, none missing",
    judge_calls_per_run=2,
    needs=("input", "output", "tool_calls"),
)
def _trajectory_llm_kind(judge: JudgeModel | None, options: TrajectoryLLMOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_trajectory_accuracy_scorer_llm(model=judge, options=options)
