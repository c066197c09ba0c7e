"""User scorer factories for the ``python: module:factory`` kind (tests/test_runtime_settings.py)."""

from __future__ import annotations

from typing import Any

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
