"""``kind: llm-judge``: your own criterion as a judge written in YAML, without Python.

.. code-block:: yaml

    - id: refund-policy
      kind: llm-judge
      judge: default
      options:
        instructions: You check support answers against the refund policy.
        prompt: |
          The customer asked: {{ input }}
          The agent answered: {{ output }}
          Does the answer promise a refund the policy does not allow?
        output: {type: categories, labels: {compliant: 1, borderline: 0.5, violation: 0}}
        better: higher
        examples_file: refund-policy.corrections.jsonl   # optional: corrected verdicts as few-shot examples

analyze (prompt: the template rendered over the run; the answer through a JSON schema built from the output
type) → generate_score (function: the answer's score, and its label) → generate_reason (function: the judge's
reason). One judge call per run. The judge's system message is the instructions, the answer format and the
notice that quoted content is data. Variables, the template engine and the output types: ``llm_judge_variables``,
``llm_judge_template``, ``llm_judge_output``; corrections as few-shot examples before the prompt:
``llm_judge_examples``; the guide is docs/custom-judges.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sidecar.core.config import config_problem
from sidecar.core.runs import SCOPES, Scope
from sidecar.scorers.custom.llm_judge_examples import (
    ExamplesProblem,
    JudgeExample,
    check_examples,
    examples_section,
    read_examples_file,
    with_examples,
)
from sidecar.scorers.custom.llm_judge_output import (
    CategoriesOutput,
    JudgeVerdict,
    OutputType,
    answer_format,
    canonical,
    verdict_schema,
    verdict_score,
)
from sidecar.scorers.custom.llm_judge_template import (
    JudgeTemplate,
    TemplateProblems,
    TemplateTimeout,
    compile_template,
)
from sidecar.scorers.custom.llm_judge_variables import ATTRIBUTES_UNFILLED_AT, VARIABLES, needs_of, run_text
from sidecar.scorers.quality_common import ScorerOptions
from sidecar.scorers.registry import Direction, LiveProblem, ScorerFacts, scorer_kind
from sidecar.scoring import Judge, JudgeModel, LabelledScore, Scorer, StepContext, create_scorer
from sidecar.scoring.judge.structured import native_response_format
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE

__all__ = ["LlmJudgeOptions", "create_llm_judge_scorer", "judge_instructions"]

_VARIABLE_IN_INSTRUCTIONS = re.compile(r"\{\{-?\s*(?:" + "|".join(VARIABLES) + r"|span|resource)\b")
# Characters per token in the cost estimate's count of a judge's own prompt text (English prose).
_CHARS_PER_TOKEN = 4
# How long a render may hold the event loop before it is done again in a thread (the runtime's pacing slice).
_LOOP_SLICE_S = 0.005


class LlmJudgeOptions(ScorerOptions):
    # The judge's system message: the criterion, how to decide. Sent as written (no variables).
    instructions: str = Field(min_length=1)
    # The user message: a template over the run (docs/custom-judges.md lists the variables).
    prompt: str = Field(min_length=1)
    output: OutputType
    # Which way is good, for the dashboards and alerts (a judge that finds violations: lower).
    better: Direction = "higher"
    # Number and boolean outputs: the score's maximum (None → 1). Categories score as their labels say.
    scale: float | None = Field(default=None, gt=0)
    # Corrected verdicts as few-shot examples before the prompt (docs/feedback.md): inline, or a JSONL file of
    # {input, output, expected, reason} (``scoring-sidecar corrections`` writes one); read when the file is loaded.
    examples: tuple[JudgeExample, ...] = ()
    examples_file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_examples_file(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        path = data.get("examples_file", data.get("examplesFile"))
        if path in (None, ""):
            return data
        if data.get("examples"):
            raise PydanticCustomError("settings", "{detail}", {"detail": "give examples or examples_file, not both"})
        try:
            examples = read_examples_file(Path(path))
        except ExamplesProblem as exc:
            raise PydanticCustomError("settings", "{detail}", {"detail": f"examples_file: {exc}"}) from None
        return {**data, "examples": examples}

    @field_validator("instructions")
    @classmethod
    def _plain_instructions(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("settings", "{detail}", {"detail": "must not be blank"})
        if _VARIABLE_IN_INSTRUCTIONS.search(value):
            raise PydanticCustomError(
                "settings",
                "{detail}",
                {"detail": "instructions are sent as written, without variables: name the run's parts in prompt"},
            )
        return value

    @field_validator("prompt")
    @classmethod
    def _valid_template(cls, value: str) -> str:
        try:
            compile_template(value)
        except TemplateProblems as exc:
            raise PydanticCustomError("settings", "{detail}", {"detail": str(exc)}) from None
        return value

    @model_validator(mode="after")
    def _scale_fits_output(self) -> LlmJudgeOptions:
        if self.scale is not None and isinstance(self.output, CategoriesOutput):
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [config_problem(("scale",), "categories score as their labels say: write each label's score")],
            )
        try:
            check_examples(self.examples, self.output)
        except ExamplesProblem as exc:
            where = "examples_file" if self.examples_file is not None else "examples"
            raise ValidationError.from_exception_data(
                type(self).__name__, [config_problem((where,), str(exc))]
            ) from None
        return self

    @property
    def template(self) -> JudgeTemplate:
        return compile_template(self.prompt)


def judge_instructions(options: LlmJudgeOptions) -> str:
    """The judge's system message: the operator's instructions, the answer format, the untrusted-data notice."""
    answer = answer_format(options.output, options.better)
    return f"{options.instructions.strip()}\n\n{answer}\n\n{UNTRUSTED_CONTENT_NOTICE}"


def _version(options: LlmJudgeOptions) -> str:
    # What decides a score: another instruction, template, output type, scale or direction (the judge reads which
    # way is better, and the labels in that order) is another scorer, with other score ids; the same YAML gives
    # the same ids in every process.
    payload: dict[str, Any] = {
        "instructions": options.instructions,
        "prompt": options.prompt,
        "output": canonical(options.output),
        "scale": options.scale,
        "better": options.better,
    }
    if options.examples:  # only then: a judge without examples keeps its score ids
        payload["examples"] = [example.canonical() for example in options.examples]
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return f"llm-judge:1:{digest[:16]}"


def create_llm_judge_scorer(*, model: str | JudgeModel, options: LlmJudgeOptions | dict[str, Any]) -> Scorer:
    opts = options if isinstance(options, LlmJudgeOptions) else LlmJudgeOptions.model_validate(options)
    template = opts.template
    output = opts.output
    scale = 1.0 if opts.scale is None else opts.scale
    names = tuple(template.variables)

    judge_model = model if isinstance(model, JudgeModel) else JudgeModel(model=model)
    max_chars = judge_model.max_prompt_chars

    async def analyze_prompt(ctx: StepContext) -> str:
        run = ctx.run
        texts = {name: run_text(name, run) for name in names}
        try:  # on the event loop for a slice of it: the render of a usual template takes well under a millisecond
            return template.render(
                texts, run.span_attributes, run.resource_attributes, max_chars=max_chars, timeout_s=_LOOP_SLICE_S
            )
        except TemplateTimeout:
            # Longer: again off the loop, within the render's whole bound (llm_judge_sandbox), so the loop serves
            # every other run meanwhile, and a run cancelled at run_timeout_s leaves its render to end within it.
            return await asyncio.to_thread(
                template.render, texts, run.span_attributes, run.resource_attributes, max_chars=max_chars
            )

    def verdict_of(ctx: StepContext) -> JudgeVerdict:
        verdict = ctx.results.analyze_step_result
        assert isinstance(verdict, JudgeVerdict)  # the analyze step validated it against the schema
        return verdict

    def generate_score(ctx: StepContext) -> float | LabelledScore:
        return verdict_score(output, verdict_of(ctx), scale)

    def generate_reason(ctx: StepContext) -> str:
        return verdict_of(ctx).reason

    return (
        create_scorer(
            id="llm-judge",
            description="A criterion written in YAML, judged by an LLM",
            judge=Judge.of(model, judge_instructions(opts)),
        )
        .analyze(
            description="Judge the run against the configured criterion",
            create_prompt=with_examples(analyze_prompt, examples_section(opts.examples, output)),
            output_schema=verdict_schema(output, opts.better),
        )
        .generate_score(generate_score)
        .generate_reason(generate_reason)
        .with_version(_version(opts))
    )


def _prompt_tokens(options: LlmJudgeOptions) -> int:
    """The judge's own prompt text, without the run: its system message, the template rendered with every
    variable empty, the answer's schema (providers count a native schema as input)."""
    template = options.template
    empty = {name: () if VARIABLES[name].item else "" for name in template.variables}
    schema = json.dumps(native_response_format(verdict_schema(options.output, options.better), "analyze"))
    chars = len(judge_instructions(options)) + len(template.render(empty)) + len(schema)
    chars += len(examples_section(options.examples, options.output))
    return math.ceil(chars / _CHARS_PER_TOKEN)


def _facts(options: LlmJudgeOptions, facts: ScorerFacts) -> ScorerFacts:
    template = options.template
    keys = template.attribute_keys
    return dataclasses.replace(
        facts,
        direction=options.better,
        judge_calls_per_run=1.0,
        needs=needs_of(template.variables),
        span_attributes=keys.get("span", frozenset()),
        resource_attributes=keys.get("resource", frozenset()),
        prompt_tokens=_prompt_tokens(options),
    )


def _live_problems(options: LlmJudgeOptions, scope: Scope) -> Iterator[LiveProblem]:
    template = options.template
    for name, line in template.variables.items():
        variable = VARIABLES[name]
        if scope in variable.live_scopes:
            continue
        because = variable.unfilled_at.get(scope)
        if because:
            yield ("prompt",), f"template line {line}: {name} is never filled at scope {scope}: {because}"
            continue
        where = f"at scope {scope}" if variable.live_scopes else "in live traffic"
        yield ("prompt",), f"template line {line}: {name} is never filled {where}: {variable.unfilled_because}"
    because = ATTRIBUTES_UNFILLED_AT.get(scope)
    if because:
        for namespace, keys in template.attributes.items():
            for key, line in keys.items():
                yield (
                    ("prompt",),
                    f"template line {line}: {namespace}.attributes['{key}'] is never filled at scope {scope}: "
                    f"{because}",
                )


@scorer_kind(
    "llm-judge",
    options=LlmJudgeOptions,
    needs_judge=True,
    description="your own criterion in YAML: instructions, a prompt template over the run, an output type "
    "(number, boolean or categories); docs/custom-judges.md",
    judge_calls_per_run=1,
    needs=(),
    scopes=SCOPES,
    facts_for=_facts,
    live_problems_for=_live_problems,
)
def _llm_judge_kind(judge: JudgeModel | None, options: LlmJudgeOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_llm_judge_scorer(model=judge, options=options)
