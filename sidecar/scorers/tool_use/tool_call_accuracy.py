"""Mastra's code tool-call-accuracy scorer (``createToolCallAccuracyScorerCode``), ported.

preprocess (the tool calls of the turn, checked against the expected tool or order) → generate_score (1 or 0).
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.tools import as_messages, extract_tool_calls
from sidecar.scorers.tools_common import apply_scale, options_version, scale_of
from sidecar.scoring import AgentRunInput, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.types import to_json_value

__all__ = [
    "ToolCallAccuracyOptions",
    "ToolCallAccuracyPreprocess",
    "check_tool_order",
    "create_tool_call_accuracy_scorer_code",
    "require_agent_messages",
    "tool_call_accuracy",
]

INVALID_RUN = "Input and output messages cannot be null or empty"


class ToolCallAccuracyOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    expected_tool: str | None = None
    strict_mode: bool = False
    expected_tool_order: tuple[str, ...] | None = None
    # Not in Mastra (its score is 1 or 0): score × scale, for every kind alike. Falsy → 1.
    scale: float | None = None

    @model_validator(mode="after")
    def _something_expected(self) -> ToolCallAccuracyOptions:
        # Mastra's constructor check: an empty order list passes it (an empty JS array is truthy).
        if not self.expected_tool and self.expected_tool_order is None:
            raise ValueError("Either expectedTool or expectedToolOrder must be provided")
        return self


class ToolCallAccuracyPreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    expected_tool: str | None
    actual_tools: tuple[str, ...]
    strict_mode: bool
    expected_tool_order: tuple[str, ...] | None
    has_tool_calls: bool
    correct_tool_called: bool
    tool_call_infos: tuple[dict[str, Any], ...]
    # null when no order is expected (Mastra's `correctOrderCalled: null`).
    correct_order_called: bool | None


def check_tool_order(actual: list[str], expected: tuple[str, ...], strict: bool = False) -> bool:
    """Mastra's ``checkToolOrder``: strict is the exact list; otherwise each expected tool's *first* call
    must come after the previous one's first call (so a repeated earlier tool can break the order)."""
    if strict:
        return list(actual) == list(expected)
    first_calls: list[int] = []
    for tool in expected:
        if tool not in actual:
            return False
        first_calls.append(actual.index(tool))
    return all(later > earlier for earlier, later in itertools.pairwise(first_calls))


def tool_call_accuracy(
    actual: list[str], *, expected_tool: str | None, strict: bool, expected_order: tuple[str, ...] | None
) -> float:
    """Mastra's ``calculateAccuracy``: no calls → 0; an expected order wins over the expected tool."""
    if not actual:
        return 0.0
    if expected_order:
        return 1.0 if check_tool_order(actual, expected_order, strict) else 0.0
    if not expected_tool:
        return 0.0
    if strict:
        return 1.0 if len(actual) == 1 and actual[0] == expected_tool else 0.0
    return 1.0 if expected_tool in actual else 0.0


def require_agent_messages(run_input: Any, run_output: Any) -> None:
    """Mastra's guard of the tool scorers: the run must carry input messages and output messages."""
    if isinstance(run_input, AgentRunInput):
        has_input = bool(run_input.input_messages)
    else:
        value = to_json_value(run_input) if run_input is not None else None
        messages = value.get("inputMessages") if isinstance(value, dict) else None
        has_input = isinstance(messages, list) and bool(messages)
    if not has_input or not as_messages(run_output):
        raise ValueError(INVALID_RUN)


def create_tool_call_accuracy_scorer_code(
    options: ToolCallAccuracyOptions | dict[str, Any] | None = None, **kwargs: Any
) -> Scorer:
    """Options ``expected_tool`` (``expectedTool``), ``strict_mode``, ``expected_tool_order``, ``scale``."""
    opts = (
        options
        if isinstance(options, ToolCallAccuracyOptions)
        else ToolCallAccuracyOptions.model_validate({**(options or {}), **kwargs})
    )
    scale = scale_of(opts.scale)
    order = opts.expected_tool_order

    def preprocess(ctx: StepContext) -> ToolCallAccuracyPreprocess:
        require_agent_messages(ctx.run.input, ctx.run.output)
        calls = extract_tool_calls(ctx.run.input, ctx.run.output)
        actual = calls.tools
        if opts.expected_tool:
            correct_tool = (
                len(actual) == 1 and actual[0] == opts.expected_tool
                if opts.strict_mode
                else opts.expected_tool in actual
            )
        else:
            correct_tool = False
        return ToolCallAccuracyPreprocess(
            expected_tool=opts.expected_tool,
            actual_tools=tuple(actual),
            strict_mode=opts.strict_mode,
            expected_tool_order=order,
            has_tool_calls=bool(actual),
            correct_tool_called=correct_tool,
            tool_call_infos=tuple(calls.infos()),
            correct_order_called=check_tool_order(actual, order, opts.strict_mode) if order is not None else None,
        )

    def generate_score(ctx: StepContext) -> float:
        result: ToolCallAccuracyPreprocess = ctx.results.preprocess_step_result
        score = tool_call_accuracy(
            list(result.actual_tools),
            expected_tool=result.expected_tool,
            strict=result.strict_mode,
            expected_order=result.expected_tool_order,
        )
        return apply_scale(score, scale)

    description = (
        f"Evaluates whether the LLM called tools in the correct order: [{', '.join(order)}]"
        if order is not None
        else f"Evaluates whether the LLM selected the correct tool ({opts.expected_tool}) from the available tools"
    )
    return (
        create_scorer(id="code-tool-call-accuracy-scorer", name="Tool Call Accuracy Scorer", description=description)
        .preprocess(preprocess)
        .generate_score(generate_score)
        .with_version(options_version(opts))
    )


@scorer_kind(
    "tool-call-accuracy",
    options=ToolCallAccuracyOptions,
    needs_judge=False,
    description="whether the agent called the expected tool, or the expected tools in order (1 or 0)",
    needs=("input", "output", "tool_calls"),
)
def _tool_call_accuracy_kind(judge: JudgeModel | None, options: ToolCallAccuracyOptions) -> Scorer:
    return create_tool_call_accuracy_scorer_code(options)
