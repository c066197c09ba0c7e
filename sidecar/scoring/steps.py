"""Step definitions: what a scorer step receives and how a prompt step is described."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator

from sidecar.scoring.judge.model import Judge

__all__ = [
    "FunctionStep",
    "GeneratedScore",
    "LabelledScore",
    "NotScorable",
    "PromptStep",
    "ScorerRun",
    "StepContext",
    "StepResults",
    "not_scorable",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScorerRun:
    """The run being scored, as passed to ``Scorer.run``."""

    input: Any
    output: Any
    run_id: str
    ground_truth: Any = None
    request_context: Mapping[str, Any] | None = None
    # Attributes of the scored span and of its resource that the run carries (only those a scorer asked
    # for: a judge written in YAML names them in its template), by key.
    span_attributes: Mapping[str, Any] | None = None
    resource_attributes: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StepResults:
    preprocess_step_result: Any = None
    analyze_step_result: Any = None


@dataclass(frozen=True, slots=True)
class StepContext:
    """One context object in: ``ctx.run``, ``ctx.results`` and, for generate_reason, ``ctx.score``."""

    run: ScorerRun
    results: StepResults = field(default_factory=StepResults)
    score: float | None = None


@dataclass(frozen=True, slots=True)
class NotScorable:
    """Returned by a step to skip the rest of the pipeline: no judge call, no score, counted apart."""

    reason: str


def not_scorable(reason: str) -> NotScorable:
    return NotScorable(reason)


@dataclass(frozen=True, slots=True)
class LabelledScore:
    """What a generate_score function may return instead of a bare number: the score and its label (a
    category the judge chose, "pass"/"fail"), which the result carries as ``label``."""

    score: float
    label: str


StepFunction = Callable[[StepContext], Any | Awaitable[Any]]
# A prompt factory may return ``not_scorable(reason)`` instead of a prompt: the step then calls no judge
# and the run ends not scorable (a RAG scorer finding no context before its first judge call).
PromptFactory = Callable[[StepContext], str | NotScorable | Awaitable[str | NotScorable]]


@dataclass(frozen=True, slots=True)
class FunctionStep:
    fn: StepFunction

    @property
    def description(self) -> str:
        return getattr(self.fn, "__qualname__", type(self.fn).__name__)


@dataclass(frozen=True, slots=True)
class PromptStep(Generic[T]):
    """A step judged by the LLM: the created prompt is the user message, instructions the system one."""

    description: str
    create_prompt: PromptFactory
    # A schema, or a function choosing one per run (when what the judge must report depends on the run).
    output_schema: type[BaseModel] | Callable[[StepContext], type[BaseModel]] | None = None
    judge: Judge | None = None

    def schema_for(self, ctx: StepContext) -> type[BaseModel] | None:
        schema = self.output_schema
        if schema is None or isinstance(schema, type):
            return schema
        return schema(ctx)


class GeneratedScore(BaseModel):
    """What a prompt-based generate_score step must return."""

    model_config = ConfigDict(frozen=True)

    score: float

    @field_validator("score")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("score must be a finite number")
        return value
