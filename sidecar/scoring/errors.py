"""Errors raised by the scorer core."""

from __future__ import annotations

import json
from typing import Any

from sidecar.scoring.types import ScorerRunResult, StepName

__all__ = ["ScorerDefinitionError", "ScorerInputError", "ScorerRunError", "step_json_name"]

_JSON_STEP_NAMES: dict[str, str] = {
    "preprocess": "preprocess",
    "analyze": "analyze",
    "generate_score": "generateScore",
    "generate_reason": "generateReason",
}


def step_json_name(step: StepName) -> str:
    return _JSON_STEP_NAMES[step]


class ScorerDefinitionError(ValueError):
    """A scorer was built wrongly (missing id, a prompt step without its schema, no generate_score)."""


class ScorerInputError(TypeError):
    """``Scorer.run`` was called with arguments it cannot use."""


class ScorerRunError(Exception):
    """A step failed. ``result`` is a snapshot of what completed, or ``None`` when nothing did.

    Its JSON form (``to_dict``/``to_json``) omits ``result`` on purpose: prompts and raw judge output
    must not leak through error logs. Read ``result`` explicitly when you need the artefacts.
    """

    def __init__(
        self,
        *,
        failed_step: StepName,
        completed_steps: tuple[StepName, ...],
        result: ScorerRunResult | None,
        cause: BaseException,
    ) -> None:
        super().__init__(f"Scorer Run Failed: {cause}")
        self.failed_step: StepName = failed_step
        self.completed_steps: tuple[StepName, ...] = completed_steps
        self.result: ScorerRunResult | None = result
        self.__cause__ = cause

    @property
    def cause_name(self) -> str:
        cause = self.__cause__
        return getattr(cause, "name", None) or type(cause).__name__

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": "ScorerRunError",
            "message": str(self),
            "failedStep": step_json_name(self.failed_step),
            "completedSteps": [step_json_name(s) for s in self.completed_steps],
            "cause": {"name": self.cause_name, "message": str(self.__cause__)},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())
