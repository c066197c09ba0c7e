"""Mastra's code trajectory-accuracy scorer (``createTrajectoryAccuracyScorerCode``), ported.

preprocess (the run's trajectory compared with the expected steps) → generate_score (the comparison's score).
The expected steps come from the options, else from an ``eval`` item's ground truth (Mastra's
``run.expectedTrajectory``); an item's ``ordering`` and ``allowRepeatedSteps`` override the options'.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.tool_use.trajectory import (
    ExpectedTrajectoryOption,
    Ordering,
    Trajectory,
    TrajectoryExpectation,
    expectation_from_ground_truth,
    extract_trajectory,
)
from sidecar.scorers.tool_use.trajectory_checks import TrajectoryComparison, compare_trajectories
from sidecar.scorers.tools_common import apply_scale, options_version, scale_of
from sidecar.scoring import JudgeModel, Scorer, StepContext, create_scorer

__all__ = [
    "NO_EXPECTED_TRAJECTORY",
    "TrajectoryAccuracyOptions",
    "TrajectoryAccuracyPreprocess",
    "TrajectoryComparisonOptions",
    "create_trajectory_accuracy_scorer_code",
]

NO_EXPECTED_TRAJECTORY = "No expected trajectory provided (pass via options or dataset item expectedTrajectory)"

_OPTIONS = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class TrajectoryComparisonOptions(BaseModel):
    model_config = _OPTIONS

    ordering: Ordering = "relaxed"
    allow_repeated_steps: bool = True


class TrajectoryAccuracyOptions(BaseModel):
    model_config = _OPTIONS

    expected_trajectory: ExpectedTrajectoryOption = None
    # None: Mastra's defaults (relaxed ordering, repeated steps allowed).
    comparison_options: TrajectoryComparisonOptions | None = None
    # Not in Mastra: score × scale, for every kind alike. Falsy → 1.
    scale: float | None = None


class TrajectoryAccuracyPreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    actual_trajectory: Trajectory
    expected_trajectory: TrajectoryExpectation | None
    comparison: TrajectoryComparison | None
    actual_step_names: tuple[str, ...]
    expected_step_names: tuple[str, ...]
    error: str | None = None


def create_trajectory_accuracy_scorer_code(
    options: TrajectoryAccuracyOptions | dict[str, Any] | None = None, **kwargs: Any
) -> Scorer:
    """``expected_trajectory`` (``expectedTrajectory``), ``comparison_options`` (``ordering``:
    strict | relaxed | unordered, ``allowRepeatedSteps``) and ``scale``."""
    opts = (
        options
        if isinstance(options, TrajectoryAccuracyOptions)
        else TrajectoryAccuracyOptions.model_validate({**(options or {}), **kwargs})
    )
    scale = scale_of(opts.scale)
    static = opts.expected_trajectory
    comparison = opts.comparison_options or TrajectoryComparisonOptions()

    def preprocess(ctx: StepContext) -> TrajectoryAccuracyPreprocess:
        actual = extract_trajectory(ctx.run.input, ctx.run.output)
        item = expectation_from_ground_truth(ctx.run.ground_truth)
        expected = static
        if not expected and item is not None and item.steps:
            expected = item.steps
        if not expected:
            return TrajectoryAccuracyPreprocess(
                actual_trajectory=actual,
                expected_trajectory=None,
                comparison=None,
                actual_step_names=tuple(actual.names),
                expected_step_names=(),
                error=NO_EXPECTED_TRAJECTORY,
            )
        ordering = item.ordering if item is not None and item.ordering is not None else comparison.ordering
        repeated = (
            item.allow_repeated_steps
            if item is not None and item.allow_repeated_steps is not None
            else comparison.allow_repeated_steps
        )
        return TrajectoryAccuracyPreprocess(
            actual_trajectory=actual,
            expected_trajectory=TrajectoryExpectation(steps=expected),
            comparison=compare_trajectories(actual, expected, ordering=ordering, allow_repeated_steps=repeated),
            actual_step_names=tuple(actual.names),
            expected_step_names=tuple(s.name for s in expected),
        )

    def generate_score(ctx: StepContext) -> float:
        result: TrajectoryAccuracyPreprocess = ctx.results.preprocess_step_result
        # No expectation anywhere: Mastra scores 0 (the preprocess result says why).
        return apply_scale(result.comparison.score if result.comparison is not None else 0.0, scale)

    if static:
        description = (
            f"Evaluates whether the trajectory matches the expected path: [{' → '.join(s.name for s in static)}] "
            f"({comparison.ordering} ordering)"
        )
    else:
        description = (
            f"Evaluates trajectory accuracy against expected trajectory from dataset items ({comparison.ordering} "
            "ordering)"
        )
    return (
        create_scorer(id="code-trajectory-accuracy-scorer", name="Trajectory Accuracy Scorer", description=description)
        .preprocess(preprocess)
        .generate_score(generate_score)
        .with_version(options_version(opts))
    )


@scorer_kind(
    "trajectory",
    options=TrajectoryAccuracyOptions,
    needs_judge=False,
    description="how closely the agent's tool calls follow the expected steps (strict, relaxed or unordered)",
    needs=("tool_calls",),
)
def _trajectory_kind(judge: JudgeModel | None, options: TrajectoryAccuracyOptions) -> Scorer:
    return create_trajectory_accuracy_scorer_code(options)
