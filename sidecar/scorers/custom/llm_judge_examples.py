"""Corrections as few-shot examples of a judge written in YAML (``examples:`` inline, or ``examples_file:`` a JSONL
file, typically written by ``scoring-sidecar corrections`` and reviewed by a person; docs/feedback.md).

Each example is a run's ``input`` and ``output`` with the verdict a person says is right (``expected``: a number of
the output type's range, a boolean, or one of its labels) and why (``reason``). They go at the top of the judge's
prompt in a fixed section, every piece quoted as traced content is (``quote_untrusted``): an example's text came
from traffic, and may try to steer the judge as any traced text may. Their verdicts are shown in the very answer
format the judge is asked for. The examples are part of the scorer's version: other examples, other score ids (once,
when the file changes); the same file, the same ids in every process.

Bounds, checked when the configuration is read: at most :data:`MAX_EXAMPLES` examples, each text at most
:data:`MAX_TEXT_CHARS` characters, the file at most :data:`MAX_FILE_BYTES`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from sidecar.core.jsonl import JsonlProblem, read_jsonl
from sidecar.scorers.custom.llm_judge_output import BooleanOutput, CategoriesOutput, NumberOutput
from sidecar.scoring import StepContext
from sidecar.scoring.prompting import quote_untrusted

__all__ = [
    "MAX_EXAMPLES",
    "ExamplesProblem",
    "JudgeExample",
    "check_examples",
    "examples_section",
    "read_examples_file",
    "with_examples",
]

MAX_EXAMPLES = 50
MAX_TEXT_CHARS = 8000
MAX_FILE_BYTES = 2 * 1024 * 1024
_INTRO = (
    "Examples a person checked, with the verdict they say is right. Judge the run after them the same way, "
    "by the criterion above."
)


class ExamplesProblem(ValueError):
    """What is wrong with the examples, each problem with its place (``examples_file`` line, or example number)."""


class JudgeExample(BaseModel):
    """One corrected verdict. Other fields (where a correction came from: ``scoreId``, ``traceId``, ``author``...)
    are kept in the file for the reviewer and ignored here: they do not change the scorer's version."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    input: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    output: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    expected: StrictBool | float | str
    reason: str = Field(default="", max_length=MAX_TEXT_CHARS)

    def canonical(self) -> dict[str, Any]:
        return {"input": self.input, "output": self.output, "expected": self.expected, "reason": self.reason}


def read_examples_file(path: Path) -> list[JudgeExample]:
    """The examples of a JSONL file (one object per line, blank lines skipped); :class:`ExamplesProblem` lists every
    bad line."""
    try:
        return [example for _, example in read_jsonl(path, JudgeExample, max_bytes=MAX_FILE_BYTES)]
    except JsonlProblem as exc:
        raise ExamplesProblem(str(exc)) from None


def check_examples(examples: Sequence[JudgeExample], output: NumberOutput | BooleanOutput | CategoriesOutput) -> None:
    """Every expected verdict is one the judge may give (:class:`ExamplesProblem` otherwise), and there are not too
    many."""
    if len(examples) > MAX_EXAMPLES:
        raise ExamplesProblem(f"{len(examples)} examples: at most {MAX_EXAMPLES} (keep the corrections that matter)")
    problems = []
    for number, example in enumerate(examples, start=1):
        why = _unfit(example.expected, output)
        if why:
            problems.append(f"example {number}: expected {example.expected!r}: {why}")
    if problems:
        raise ExamplesProblem("; ".join(problems))


def _unfit(expected: bool | float | str, output: NumberOutput | BooleanOutput | CategoriesOutput) -> str | None:
    if isinstance(output, BooleanOutput):
        return None if isinstance(expected, bool) else "the output is a boolean: true or false"
    if isinstance(output, CategoriesOutput):
        if isinstance(expected, str) and expected in output.labels:
            return None
        return f"one of the labels {', '.join(output.labels)}"
    if isinstance(expected, float) and not isinstance(expected, bool) and output.min <= expected <= output.max:
        return None
    return f"a number from {output.min:g} to {output.max:g}"


def _verdict(example: JudgeExample, output: NumberOutput | BooleanOutput | CategoriesOutput) -> str:
    """The expected verdict in the answer format the judge is asked for (reason first)."""
    field = "score" if isinstance(output, NumberOutput) else "passed" if isinstance(output, BooleanOutput) else "label"
    return json.dumps({"reason": example.reason, field: example.expected}, ensure_ascii=False)


def examples_section(examples: Sequence[JudgeExample], output: NumberOutput | BooleanOutput | CategoriesOutput) -> str:
    """The fixed section put before the judge's prompt: each example's input, output and right verdict, quoted."""
    if not examples:
        return ""
    parts = [_INTRO]
    for number, example in enumerate(examples, start=1):
        parts.append(
            f"Example {number}:\n"
            f"{quote_untrusted('example_input', example.input)}\n"
            f"{quote_untrusted('example_output', example.output)}\n"
            f"{quote_untrusted('example_verdict', _verdict(example, output))}"
        )
    parts.append("The run to judge:\n\n")
    return "\n\n".join(parts)


PromptFn = Callable[[StepContext], "str | Awaitable[str]"]


def with_examples(create_prompt: PromptFn, section: str) -> PromptFn:
    """``create_prompt`` with ``section`` before what it writes (itself when there is no section)."""
    if not section:
        return create_prompt

    async def prompt(ctx: StepContext) -> str:
        text = create_prompt(ctx)
        if not isinstance(text, str):
            text = await text
        return section + text

    return prompt
