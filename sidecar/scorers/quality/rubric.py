"""Mastra's rubric scorer (``createRubricScorer``), ported.

analyze (prompt: a satisfied/unsatisfied verdict per rubric criterion) → generate_score (function) →
generate_reason (function: the per-criterion report, no judge call). One judge call per run.

The score is binary: 1 × scale when every required criterion is satisfied (every criterion, when the
judge marks none required), else 0. The rubric comes from ``options.criteria`` (a list of criteria, or a
newline-separated checklist whose list markers are dropped); without one, from the run: a ``rubric`` value
in the request context (an ``eval`` dataset's ``request_context``), else in the input. With no rubric at
all the scorer passes (1 × scale), as Mastra's does: it is a no-op, not a failure.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BeforeValidator, StrictBool, ValidationError, model_validator

from sidecar.scorers.options import options_as
from sidecar.scorers.quality.rubric_prompts import (
    INSTRUCTIONS,
    NO_RUBRIC_PROMPT,
    CriterionToGrade,
    create_analyze_prompt,
)
from sidecar.scorers.quality_common import ScorerOptions, js_json
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.prompting import js_number
from sidecar.scoring.types import to_json_value

__all__ = [
    "RubricAnalysis",
    "RubricCriterion",
    "RubricCriterionVerdict",
    "RubricOptions",
    "create_rubric_scorer",
    "format_rubric_reason",
    "parse_rubric",
    "rubric_score",
]


class RubricCriterion(ScorerOptions):
    id: str | None = None
    # What the output must satisfy ("Includes a recommendations section").
    description: str
    # Optional criteria are graded and reported but do not decide the score.
    required: bool = True


_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")
_JS_SPACE = " \t\n\r\x0b\x0c\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"  # noqa: E501


def parse_rubric(rubric: str) -> tuple[RubricCriterion, ...]:
    """A checklist string: each non-empty line a required criterion, a leading list marker dropped."""
    lines = (_LIST_MARKER.sub("", line, count=1).strip(_JS_SPACE) for line in rubric.split("\n"))
    return tuple(RubricCriterion(description=line) for line in lines if line)


def _checklist(value: Any) -> Any:
    return parse_rubric(value) if isinstance(value, str) else value


class RubricOptions(ScorerOptions):
    # A list of criteria, or a checklist string (one criterion per line; "-", "*", "•", "1." or "1)" markers
    # dropped), kept as the list it reads as.
    criteria: Annotated[tuple[RubricCriterion, ...] | None, BeforeValidator(_checklist)] = None
    # None → 1. Mastra multiplies by ``options?.scale ?? 1``, so 0 stays 0.
    scale: float | None = None


class RubricCriterionVerdict(JudgeOutput):
    criterion: str
    satisfied: StrictBool
    required: StrictBool
    reasoning: str


class RubricAnalysis(JudgeOutput):
    criteria: tuple[RubricCriterionVerdict, ...]
    overall_assessment: str


@functools.lru_cache(maxsize=64)
def analysis_schema(count: int) -> type[RubricAnalysis]:
    """The analysis of a rubric of ``count`` criteria: one verdict per criterion.

    Stricter than Mastra's schema, which takes any number: a judge that drops a criterion would otherwise pass
    it silently (and an empty list passes everything). Checked here, not as JSON-schema bounds, which some
    providers reject."""

    class CountedRubricAnalysis(RubricAnalysis):
        @model_validator(mode="after")
        def _one_verdict_per_criterion(self) -> CountedRubricAnalysis:
            if len(self.criteria) != count:
                raise ValueError(
                    f"expected {count} criterion verdicts (one per rubric criterion), got {len(self.criteria)}"
                )
            return self

    return CountedRubricAnalysis


def _normalize(rubric: str | Sequence[Any] | None) -> tuple[RubricCriterion, ...]:
    if not rubric:
        return ()
    if isinstance(rubric, str):
        return parse_rubric(rubric)
    return tuple(c if isinstance(c, RubricCriterion) else RubricCriterion.model_validate(c) for c in rubric)


def _rubric_in(source: Any) -> str | list[Any] | None:
    """A ``rubric`` value (a checklist string or a list of criteria) carried by the run."""
    source = to_json_value(source)
    if not isinstance(source, Mapping):
        return None
    value = source.get("rubric")
    return value if isinstance(value, str | list) else None


def rubric_score(analysis: RubricAnalysis | None, *, scale: float = 1) -> float:
    if analysis is None or not analysis.criteria:
        return 1 * scale  # nothing to grade: a pass, so the scorer does not gate anything
    required = [c for c in analysis.criteria if c.required]
    gating = required or analysis.criteria
    return (1 if all(c.satisfied for c in gating) else 0) * scale


def format_rubric_reason(analysis: RubricAnalysis | None) -> str:
    """The per-criterion report: a header, one line per criterion with the judge's reasoning, what is left."""
    if analysis is None or not analysis.criteria:
        return "There was no rubric to grade against, so the rubric check passed by default."
    required = [c for c in analysis.criteria if c.required]
    # With no criterion marked required, every criterion decides (as in the score).
    unmet = [c for c in (required or analysis.criteria) if not c.satisfied]
    kind = "required " if required else ""
    noun = "criterion" if len(unmet) == 1 else "criteria"
    header = (
        "Rubric satisfied: every required criterion is met."
        if not unmet
        else f"Rubric not yet satisfied: {len(unmet)} {kind}{noun} not met."
    )
    lines = [
        f"{'[met]' if c.satisfied else '[NOT met]'} ({'required' if c.required else 'optional'}) {c.criterion}: "
        f"{c.reasoning}"
        for c in analysis.criteria
    ]
    parts = [header, "\n".join(lines)]
    if analysis.overall_assessment:
        parts.append(analysis.overall_assessment)
    if unmet:
        parts.append(f"To complete the task, meet the {len(unmet)} unmet {kind}{noun} above.")
    return "\n\n".join(parts)


def create_rubric_scorer(*, model: str | JudgeModel, options: RubricOptions | dict[str, Any] | None = None) -> Scorer:
    opts = options_as(RubricOptions, options)
    scale = 1.0 if opts.scale is None else opts.scale
    configured = _normalize(opts.criteria)

    def resolve(ctx: StepContext) -> tuple[tuple[RubricCriterion, ...], bool]:
        """The rubric of this run, and whether it came from the run rather than the configuration."""
        if configured:
            return configured, False
        carried = _rubric_in(ctx.run.request_context)
        if carried is None:
            carried = _rubric_in(ctx.run.input)
        try:
            return _normalize(carried), True
        except ValidationError as exc:
            raise ValueError(f"the run's rubric is not a checklist string or a list of criteria: {exc}") from None

    def task_of(ctx: StepContext) -> str:
        run_input = to_json_value(ctx.run.input)
        if isinstance(run_input, Mapping) and isinstance(run_input.get("originalTask"), str):
            return str(run_input["originalTask"])
        return get_user_message_from_run_input(run_input) or ""

    def output_of(ctx: StepContext) -> str:
        text = get_assistant_message_from_run_output(ctx.run.output)
        if text:
            return text
        run_input = to_json_value(ctx.run.input)
        if isinstance(run_input, Mapping) and isinstance(run_input.get("currentText"), str):
            return str(run_input["currentText"])
        return ctx.run.output if isinstance(ctx.run.output, str) else ""

    def analyze_prompt(ctx: StepContext) -> str:
        rubric, from_run = resolve(ctx)
        if not rubric:
            return NO_RUBRIC_PROMPT
        return create_analyze_prompt(
            task=task_of(ctx),
            output=output_of(ctx),
            criteria=[CriterionToGrade(c.description, c.required) for c in rubric],
            criteria_from_run=from_run,
        )

    def schema(ctx: StepContext) -> type[RubricAnalysis]:
        return analysis_schema(len(resolve(ctx)[0]))

    def analysis_of(ctx: StepContext) -> RubricAnalysis | None:
        value = ctx.results.analyze_step_result
        return value if isinstance(value, RubricAnalysis) else None

    def generate_score(ctx: StepContext) -> float:
        return rubric_score(analysis_of(ctx), scale=scale)

    def generate_reason(ctx: StepContext) -> str:
        return format_rubric_reason(analysis_of(ctx))

    rubric_id = hashlib.sha256(js_json(configured).encode()).hexdigest()[:12] if configured else "-"
    return (
        create_scorer(
            id="rubric-scorer",
            name="Rubric (LLM)",
            description="Grades the output against a rubric: 1 only when every required criterion is satisfied",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .analyze(
            description="Judge the output against each rubric criterion",
            create_prompt=analyze_prompt,
            output_schema=schema,
        )
        .generate_score(generate_score)
        .generate_reason(generate_reason)
        .with_version(f"1:{js_number(scale)}:{rubric_id}")
    )


@scorer_kind(
    "rubric",
    options=RubricOptions,
    needs_judge=True,
    description="whether the output meets every required criterion of a rubric (1 or 0)",
    judge_calls_per_run=1,
    needs=("input", "output"),
    direction="higher",
)
def _rubric_kind(judge: JudgeModel | None, options: RubricOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_rubric_scorer(model=judge, options=options)
