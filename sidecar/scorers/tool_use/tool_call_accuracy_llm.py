"""Mastra's LLM tool-call-accuracy scorer (``createToolCallAccuracyScorerLLM``), ported.

preprocess (the tool calls of the turn) → analyze (prompt step: is each call appropriate, which tools are
missing) → generate_score (appropriate calls / calls; no calls: 0 when tools are missing, else 1) →
generate_reason (prompt step). Two judge calls per run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_assistant_message_from_run_output, get_user_message_from_run_input
from sidecar.scorers.tool_use.tool_call_accuracy import require_agent_messages
from sidecar.scorers.tool_use.tool_call_accuracy_llm_prompts import (
    INSTRUCTIONS,
    create_analyze_prompt,
    create_reason_prompt,
)
from sidecar.scorers.tools import extract_tool_calls
from sidecar.scorers.tools_common import apply_scale, options_version, scale_of
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "AvailableTool",
    "ToolCallAccuracyLLMOptions",
    "ToolCallAccuracyLLMPreprocess",
    "ToolEvaluation",
    "ToolSelectionAnalysis",
    "create_tool_call_accuracy_scorer_llm",
    "tool_selection_score",
]

_MODEL = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class AvailableTool(BaseModel):
    """A tool the agent could call, as the judge's tool reference lists it (``id: description``)."""

    model_config = _MODEL

    id: str
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        # A bare name is a tool without description; Mastra's first versions named tools by `name`.
        if isinstance(value, str):
            return {"id": value}
        if isinstance(value, dict) and "name" in value and "id" not in value:
            return {("id" if k == "name" else k): v for k, v in value.items()}
        return value


class ToolCallAccuracyLLMOptions(BaseModel):
    model_config = _MODEL

    # None: the judge sees only the names of the tools called (Mastra requires the list, empty allowed).
    available_tools: tuple[AvailableTool, ...] | None = None
    # Not in Mastra: score × scale, for every kind alike. Falsy → 1.
    scale: float | None = None


class ToolEvaluation(JudgeOutput):
    tool_called: str
    was_appropriate: bool
    reasoning: str


class ToolSelectionAnalysis(JudgeOutput):
    evaluations: tuple[ToolEvaluation, ...]
    missing_tools: tuple[str, ...] | None = None


class ToolCallAccuracyLLMPreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    actual_tools: tuple[str, ...]
    has_tool_calls: bool
    tool_call_infos: tuple[dict[str, Any], ...]


def tool_selection_score(analysis: ToolSelectionAnalysis) -> float:
    """Mastra's formula: no evaluations → 0 if tools were missing else 1; else round2(appropriate / all)."""
    if not analysis.evaluations:
        return 0.0 if analysis.missing_tools else 1.0
    appropriate = sum(1 for e in analysis.evaluations if e.was_appropriate)
    return round_to_two_decimals(appropriate / len(analysis.evaluations))


def create_tool_call_accuracy_scorer_llm(
    *, model: str | JudgeModel, options: ToolCallAccuracyLLMOptions | dict[str, Any] | None = None, **kwargs: Any
) -> Scorer:
    """``available_tools`` (``availableTools``: ids, or ``{id|name, description}``) and ``scale``."""
    opts = (
        options
        if isinstance(options, ToolCallAccuracyLLMOptions)
        else ToolCallAccuracyLLMOptions.model_validate({**(options or {}), **kwargs})
    )
    scale = scale_of(opts.scale)
    tool_reference = "\n".join(f"{t.id}: {t.description}" for t in opts.available_tools or ())

    def preprocess(ctx: StepContext) -> ToolCallAccuracyLLMPreprocess:
        require_agent_messages(ctx.run.input, ctx.run.output)
        calls = extract_tool_calls(ctx.run.input, ctx.run.output)
        return ToolCallAccuracyLLMPreprocess(
            actual_tools=tuple(calls.tools), has_tool_calls=bool(calls.calls), tool_call_infos=tuple(calls.infos())
        )

    def analyze_prompt(ctx: StepContext) -> str:
        pre: ToolCallAccuracyLLMPreprocess = ctx.results.preprocess_step_result
        return create_analyze_prompt(
            user_input=get_user_message_from_run_input(ctx.run.input) or "",
            agent_response=get_assistant_message_from_run_output(ctx.run.output) or "",
            tools_called=pre.actual_tools,
            available_tools=tool_reference,
        )

    def generate_score(ctx: StepContext) -> float:
        analysis: ToolSelectionAnalysis = ctx.results.analyze_step_result
        return apply_scale(tool_selection_score(analysis), scale)

    def reason_prompt(ctx: StepContext) -> str:
        analysis: ToolSelectionAnalysis = ctx.results.analyze_step_result
        return create_reason_prompt(
            user_input=get_user_message_from_run_input(ctx.run.input) or "",
            score=ctx.score if ctx.score is not None else 0.0,
            scale=scale,
            evaluations=[e.model_dump(by_alias=True) for e in analysis.evaluations],
            missing_tools=analysis.missing_tools or (),
        )

    return (
        create_scorer(
            id="llm-tool-call-accuracy-scorer",
            name="Tool Call Accuracy (LLM)",
            description="Evaluates whether an agent selected appropriate tools for the given task using LLM analysis",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(preprocess)
        .analyze(
            description="Analyze the appropriateness of tool selections",
            create_prompt=analyze_prompt,
            output_schema=ToolSelectionAnalysis,
        )
        .generate_score(generate_score)
        .generate_reason(
            description="Generate human-readable explanation of tool selection evaluation", create_prompt=reason_prompt
        )
        .with_version(options_version(opts))
    )


@scorer_kind(
    "tool-call-accuracy-llm",
    options=ToolCallAccuracyLLMOptions,
    needs_judge=True,
    description="share of the agent's tool calls a judge finds appropriate for the user's request",
    judge_calls_per_run=2,
    needs=("input", "output", "tool_calls"),
)
def _tool_call_accuracy_llm_kind(judge: JudgeModel | None, options: ToolCallAccuracyLLMOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_tool_call_accuracy_scorer_llm(model=judge, options=options)
