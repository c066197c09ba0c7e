"""Trajectories: the steps a run took and the steps it was expected to take, as Mastra's trajectory scorers
read them (their comparisons: ``sidecar.scorers.tool_use.trajectory_checks``).

A run's trajectory is its tool calls in order (Mastra's ``extractTrajectory`` for agent runs: one
``tool_call`` step per call, ``success`` when it was answered and not flagged as an error), or, when the
run's output already is a trajectory (``{"steps": [...]}``, as Mastra's ``runEvals`` hands it to trajectory
scorers), that trajectory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sidecar.scorers.tools import tool_invocations
from sidecar.scoring.types import to_json_value

__all__ = [
    "ExpectedStep",
    "ExpectedTrajectoryOption",
    "Ordering",
    "Trajectory",
    "TrajectoryExpectation",
    "TrajectoryStep",
    "expectation_from_ground_truth",
    "expected_steps_from",
    "expected_trajectory_option",
    "extract_trajectory",
    "js_json",
]

Ordering = Literal["strict", "relaxed", "unordered"]

_CAMEL = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


def js_json(value: Any) -> str:
    """``JSON.stringify`` of a value: compact, keys in their order, integral floats written as integers."""

    def normalise(v: Any) -> Any:
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            return int(v)
        if isinstance(v, float):
            return v if math.isfinite(v) else None  # JSON.stringify(NaN) is null
        if isinstance(v, Mapping):
            return {str(k): normalise(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [normalise(x) for x in v]
        return v

    return json.dumps(normalise(to_json_value(value)), ensure_ascii=False, separators=(",", ":"))


# -- steps -------------------------------------------------------------------------------------------


class TrajectoryStep(BaseModel):
    """One step the run took. Variant fields beyond these (``modelId``, ``agentId``, …) are kept as given."""

    model_config = ConfigDict(**_CAMEL, extra="allow")

    step_type: str
    name: str
    tool_args: Any = None
    tool_result: Any = None
    success: bool | None = None
    duration_ms: float | None = None
    children: tuple[TrajectoryStep, ...] | None = None

    def field(self, camel_name: str) -> Any:
        """A comparable field by Mastra's (camelCase) name; None when absent."""
        return self.model_dump(by_alias=True, exclude_none=True).get(camel_name)


class Trajectory(BaseModel):
    model_config = ConfigDict(**_CAMEL, extra="ignore")

    steps: tuple[TrajectoryStep, ...] = ()
    total_duration_ms: float | None = None
    # The agent's output the trajectory was extracted from (the LLM judge reads its answer there).
    raw_output: Any = Field(default=None, exclude=True)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]


class ExpectedStep(BaseModel):
    """A step the run should take: a name, optionally a step type and the variant fields to match."""

    model_config = ConfigDict(**_CAMEL, extra="allow")

    name: str
    step_type: str | None = None
    children: TrajectoryExpectation | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    def field(self, camel_name: str) -> Any:
        return self.model_dump(by_alias=True, exclude_none=True).get(camel_name)

    def pinned_fields(self) -> dict[str, Any]:
        """The fields beyond name, type and children (what the LLM judge is shown of an expected step)."""
        data = self.model_dump(by_alias=True, exclude_none=True)
        return {k: v for k, v in data.items() if k not in ("name", "stepType", "children")}


class TrajectoryExpectation(BaseModel):
    """Mastra's ``TrajectoryExpectation``: expected steps and the checks a trajectory must pass."""

    model_config = ConfigDict(**_CAMEL, extra="forbid")

    steps: tuple[ExpectedStep, ...] | None = None
    ordering: Ordering | None = None
    allow_repeated_steps: bool | None = None
    max_steps: int | None = None
    max_total_tokens: int | None = None
    max_total_duration_ms: float | None = None
    no_redundant_calls: bool | None = None
    blacklisted_tools: tuple[str, ...] | None = None
    blacklisted_sequences: tuple[tuple[str, ...], ...] | None = None
    max_retries_per_tool: int | None = None


ExpectedStep.model_rebuild()


# -- extraction --------------------------------------------------------------------------------------


def _is_trajectory(value: Any) -> bool:
    return isinstance(value, Trajectory) or (
        isinstance(value, Mapping) and isinstance(value.get("steps"), list | tuple) and "role" not in value
    )


def extract_trajectory(run_input: Any, run_output: Any) -> Trajectory:
    """The run's trajectory: its output when that already is one, else one ``tool_call`` step per call."""
    if isinstance(run_output, Trajectory):
        return run_output
    if _is_trajectory(run_output):
        trajectory = Trajectory.model_validate(to_json_value(run_output))
        raw = run_output.get("rawOutput") if isinstance(run_output, Mapping) else None
        return trajectory.model_copy(update={"raw_output": raw})
    steps = [
        TrajectoryStep(
            step_type="tool_call",
            name=call.name,
            tool_args=call.arguments,
            tool_result=call.result,
            success=call.succeeded,
        )
        for call in tool_invocations(run_input, run_output)
        if call.name and call.state != "partial-call"
    ]
    return Trajectory(steps=tuple(steps), raw_output=run_output)


def _expected_from_trajectory_step(step: Mapping[str, Any]) -> dict[str, Any]:
    # Mastra's trajectoryStepToExpectedStep: drop what only a run has (duration, metadata), keep the rest.
    data = {k: v for k, v in step.items() if k not in ("durationMs", "metadata", "children")}
    children = step.get("children")
    if isinstance(children, list) and children:
        data["children"] = {"steps": [_expected_from_trajectory_step(c) for c in children if isinstance(c, Mapping)]}
    return data


def expected_steps_from(value: Any) -> tuple[ExpectedStep, ...] | None:
    """Expected steps given as Mastra accepts them: a list of expected steps (or names), or a whole
    trajectory ``{"steps": [...]}`` whose steps become expectations. Empty → None."""
    value = to_json_value(value)
    if isinstance(value, list):
        if not value:
            return None
        if not (isinstance(value[0], Mapping) and "steps" in value[0]):
            return tuple(ExpectedStep.model_validate(v) for v in value)
        return None
    if isinstance(value, Mapping) and isinstance(value.get("steps"), list):
        steps = [_expected_from_trajectory_step(s) if isinstance(s, Mapping) else s for s in value["steps"]]
        return tuple(ExpectedStep.model_validate(s) for s in steps) or None
    return None


def expected_trajectory_option(value: Any) -> Any:
    """A scorer's ``expectedTrajectory`` option as Mastra takes it: a list of expected steps (or, here, names) or
    a whole trajectory ``{steps: [...]}``, whose steps become expectations; an empty list is no expectation.
    Anything else is refused."""
    if value is None:
        return None
    if not isinstance(value, list | tuple | dict) or (
        isinstance(value, dict) and not isinstance(value.get("steps"), list)
    ):
        raise ValueError("expected a list of steps, or a trajectory {steps: [...]}")
    return expected_steps_from(list(value) if isinstance(value, tuple) else value)


# The ``expectedTrajectory`` option of the trajectory kinds (code and LLM alike).
ExpectedTrajectoryOption = Annotated[tuple[ExpectedStep, ...] | None, BeforeValidator(expected_trajectory_option)]


def expectation_from_ground_truth(ground_truth: Any) -> TrajectoryExpectation | None:
    """A dataset item's expected trajectory (Mastra's ``run.expectedTrajectory``): the ground truth's
    ``expectedTrajectory``, or a ground truth that is an expectation itself, or a list of steps."""
    value = to_json_value(ground_truth)
    if isinstance(value, Mapping):
        inner = value.get("expectedTrajectory", value.get("expected_trajectory"))
        if inner is not None:
            value = inner
    if isinstance(value, list):
        value = {"steps": value}
    if not isinstance(value, Mapping):
        return None
    try:
        return TrajectoryExpectation.model_validate(value)
    except ValueError:
        return None
