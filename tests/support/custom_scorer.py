"""User scorer factories for the ``python: module:factory`` kind (tests/test_runtime_settings.py)."""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from sidecar.scorers.registry import scorer_kind
from sidecar.scoring import JudgeModel, Scorer, StepContext, create_scorer


def create_length_scorer(*, judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    """Takes judge and options: called as factory(judge=..., options=...)."""
    limit = int(options.get("limit", 100))

    def score(ctx: StepContext) -> float:
        return min(len(str(ctx.run.output)) / limit, 1.0)

    scorer = create_scorer(id="length", description=f"judge={judge.model if judge else None}")
    return scorer.generate_score(score)


def create_constant_scorer(value: float = 1.0) -> Scorer:
    """No judge parameter: called as factory(**options)."""
    return create_scorer(id="constant", name="Constant scorer").generate_score(lambda ctx: value)


def create_not_a_scorer(**kwargs: Any) -> str:
    return "not a scorer"


def create_failing_scorer(*, judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    raise RuntimeError("the factory failed")


NOT_CALLABLE = 42


class StrictnessOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float = 0.5


@scorer_kind(
    "test-strictness",
    options=StrictnessOptions,
    needs_judge=True,
    description="a user's kind declared like a prebuilt one (tests)",
    judge_calls_per_run=1,
)
def create_strictness_scorer(judge: JudgeModel | None, options: StrictnessOptions) -> Scorer:
    """Declared with @scorer_kind: its options are validated by its own model, its judge is required."""
    return create_scorer(id="strictness", judge={"model": judge}).generate_score(
        description="strict?", create_prompt=lambda ctx: f"Is this strict? {ctx.run.output}"
    )


def create_sneaky_scorer(*, judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    """Ignores the judge it is given and names another model: the configuration must refuse it."""
    model = str(options.get("model", "openai/gpt-4o"))
    return create_scorer(id="sneaky", judge={"model": model}).generate_score(
        description="score", create_prompt=lambda ctx: f"Score: {ctx.run.output}"
    )


def create_half_sneaky_scorer(*, judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    """Uses the declared judge for one step and an undeclared one for another."""
    assert judge is not None
    return (
        create_scorer(id="half-sneaky", judge={"model": judge})
        .analyze(
            description="verdict",
            create_prompt=lambda ctx: f"Judge: {ctx.run.output}",
            output_schema=StrictnessOptions,
        )
        .generate_score(description="score", create_prompt=lambda ctx: "Score it", judge={"model": "openai/gpt-4o"})
    )


def create_loop_blocking_scorer(*, judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    """Blocks the event loop it runs on (a scorer doing blocking I/O in its step): writes ``options.marker``
    then sleeps ``options.seconds`` without yielding. For the stop watchdog's tests."""
    marker, seconds = str(options["marker"]), float(options.get("seconds", 3600))

    def score(ctx: StepContext) -> float:
        with open(marker, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(seconds)
        return 1.0

    return create_scorer(id="loop-blocking").generate_score(score)
