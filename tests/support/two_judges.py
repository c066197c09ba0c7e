"""A user's ``python:`` scorer whose two prompt steps call two judges (tests/test_redaction_settings.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sidecar.scoring import JudgeModel, Scorer, StepContext, create_scorer


class Verdict(BaseModel):
    verdict: str


def create_two_judge_scorer(*, judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    """analyze with the scorer's own judge, generate_score with the judge whose model ``options['second']`` names."""
    assert judge is not None
    second = JudgeModel(model=options["second"])  # as declared: a model and no other key

    def prompt(ctx: StepContext) -> str:
        return f"Judge this answer: {ctx.run.output}"

    return (
        create_scorer(id="two-judges", judge={"model": judge, "instructions": "Judge."})
        .analyze(description="first judge", create_prompt=prompt, output_schema=Verdict)
        .generate_score(description="second judge", create_prompt=prompt, judge={"model": second})
    )
