"""What a judge written in YAML answers, and the score its answer makes.

Three output types, as the field declares them (MLflow's value types, Opik's categorical scores):

- ``{type: number, min, max}``: a number in [min, max], normalised to 0–1, then multiplied by ``scale``;
- ``{type: boolean}``: pass or fail, 1 or 0 (times ``scale``), labelled ``pass`` / ``fail``;
- ``{type: categories, labels: {LABEL: SCORE, ...}}``: one of the labels, scored as declared and labelled.

The judge answers through a JSON schema built from the type, with its reason first (a judge that explains
before it decides decides better). What it is asked for also says which way is better (``better``): a
number's "(higher is better)", a boolean's "(true is better)", the labels listed from best to worst (by their
scores and ``better``, in the schema's enum too). That is the judge's whole view of the direction, and what
the stand-in judge (the demo, ``eval --stand-in-judge``) reads to answer in the right direction.

An answer outside the type (not JSON, a number out of range, a label not declared) fails the schema's
validation: the judge gets its one fallback attempt, then the run fails with ``invalid_output``, never a
silent 0.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, create_model, field_validator, model_validator

from sidecar.scorers.quality_common import ScorerOptions
from sidecar.scorers.registry import Direction
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import LabelledScore

__all__ = [
    "BooleanOutput",
    "CategoriesOutput",
    "JudgeVerdict",
    "NumberOutput",
    "OutputType",
    "answer_format",
    "canonical",
    "labels_best_first",
    "verdict_schema",
    "verdict_score",
]


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


class NumberOutput(ScorerOptions):
    type: Literal["number"]
    min: float = 0.0
    max: float = 1.0

    _finite_bounds = field_validator("min", "max")(_finite)

    @model_validator(mode="after")
    def _ordered(self) -> NumberOutput:
        if self.max <= self.min:
            raise ValueError("max must be greater than min")
        return self


class BooleanOutput(ScorerOptions):
    type: Literal["boolean"]


class CategoriesOutput(ScorerOptions):
    type: Literal["categories"]
    # Each label the judge may choose, with its score (as written: the scale does not apply).
    labels: dict[str, float] = Field(min_length=2)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, float]) -> dict[str, float]:
        for label, score in labels.items():
            if not label.strip() or label != label.strip():
                raise ValueError(f"label {label!r}: a label is a non-empty name without surrounding spaces")
            if not math.isfinite(score):
                raise ValueError(f"label {label!r}: its score must be a finite number")
        return labels


OutputType = Annotated[NumberOutput | BooleanOutput | CategoriesOutput, Field(discriminator="type")]


class JudgeVerdict(JudgeOutput):
    """Every answer: the judge's reason, then its verdict in the field the type names."""

    reason: str


class _NumberVerdict(JudgeVerdict):
    score: float


class _BooleanVerdict(JudgeVerdict):
    passed: StrictBool


class _CategoryVerdict(JudgeVerdict):
    label: str


@functools.lru_cache(maxsize=128)
def _number_schema(low: float, high: float) -> type[_NumberVerdict]:
    # The range is checked here, not as JSON-schema bounds, which some providers reject.
    class NumberVerdict(_NumberVerdict):
        @field_validator("score")
        @classmethod
        def _in_range(cls, value: float) -> float:
            if not math.isfinite(value) or not low <= value <= high:
                raise ValueError(f"must be a number from {low:g} to {high:g}")
            return value

    return NumberVerdict


@functools.lru_cache(maxsize=128)
def _category_schema(labels: tuple[str, ...]) -> type[_CategoryVerdict]:
    # An enum in the schema: providers with native structured output can only answer a declared label.
    choice: Any = Literal.__getitem__(labels)
    model: type[_CategoryVerdict] = create_model("CategoryVerdict", __base__=_CategoryVerdict, label=(choice, ...))
    return model


def labels_best_first(output: CategoriesOutput, better: Direction) -> tuple[str, ...]:
    """The labels from best to worst: by their scores in the direction ``better`` names (labels of the same
    score in their declared order)."""
    return tuple(sorted(output.labels, key=output.labels.__getitem__, reverse=better == "higher"))


def verdict_schema(output: NumberOutput | BooleanOutput | CategoriesOutput, better: Direction) -> type[JudgeVerdict]:
    if isinstance(output, NumberOutput):
        return _number_schema(output.min, output.max)
    if isinstance(output, BooleanOutput):
        return _BooleanVerdict
    return _category_schema(labels_best_first(output, better))


def verdict_score(
    output: NumberOutput | BooleanOutput | CategoriesOutput, verdict: JudgeVerdict, scale: float
) -> float | LabelledScore:
    """The score of a validated answer (and its label, when the type has one)."""
    if isinstance(output, NumberOutput):
        assert isinstance(verdict, _NumberVerdict)
        return (verdict.score - output.min) / (output.max - output.min) * scale
    if isinstance(output, BooleanOutput):
        assert isinstance(verdict, _BooleanVerdict)
        return LabelledScore(scale if verdict.passed else 0.0, "pass" if verdict.passed else "fail")
    assert isinstance(verdict, _CategoryVerdict)
    return LabelledScore(output.labels[verdict.label], verdict.label)


def answer_format(output: NumberOutput | BooleanOutput | CategoriesOutput, better: Direction) -> str:
    """The answer the judge is asked for, in words, with the way that is better (the schema goes along
    natively or in the fallback)."""
    if isinstance(output, NumberOutput):
        verdict = f'"score": a number from {output.min:g} to {output.max:g} ({better} is better)'
    elif isinstance(output, BooleanOutput):
        verdict = f'"passed": true or false ({"true" if better == "higher" else "false"} is better)'
    else:
        labels = ", ".join(_quoted(label) for label in labels_best_first(output, better))
        verdict = f'"label": exactly one of {labels} (from best to worst)'
    return f'Answer with a JSON object: "reason": your reasoning in one or two sentences, then {verdict}.'


def _quoted(label: str) -> str:
    return '"' + label.replace("\\", "\\\\").replace('"', '\\"') + '"'


def canonical(output: NumberOutput | BooleanOutput | CategoriesOutput) -> dict[str, Any]:
    """The type as plain data, for the scorer's version (labels in their declared order)."""
    data = output.model_dump(mode="json")
    if isinstance(output, CategoriesOutput):
        data["labels"] = [[label, score] for label, score in output.labels.items()]
    return data
