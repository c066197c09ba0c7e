"""Mastra's prompt-alignment scorer (``createPromptAlignmentScorerLLM``), ported.

analyze (prompt step) → generate_score (function: the weighted formula) → generate_reason (prompt step).
Where Mastra's code reuses the user score for the system part of ``both`` mode (a known TODO), we do
what its documentation promises: the judge also assesses system compliance, and the final score is
0.7 × user + 0.3 × system.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sidecar.scorers.quality.prompt_alignment_prompts import (
    INSTRUCTIONS,
    EvaluationMode,
    create_analyze_prompt,
    create_reason_prompt,
    weights_text,
)
from sidecar.scorers.registry import Need, scorer_kind
from sidecar.scorers.text import (
    get_assistant_message_from_run_output,
    get_combined_system_prompt,
    get_text_content_from_message,
    get_user_message_from_run_input,
    is_agent_run_input,
)
from sidecar.scorers.verdicts import JudgeOutput, UnitScore
from sidecar.scoring import Judge, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.prompting import js_number, round_to_two_decimals
from sidecar.scoring.types import to_json_value

__all__ = [
    "SCORING_WEIGHTS",
    "AlignmentDimensions",
    "PromptAlignmentAnalysis",
    "PromptAlignmentAnalysisWithSystem",
    "PromptAlignmentOptions",
    "create_prompt_alignment_scorer_llm",
    "prompt_alignment_score",
]


class IntentAlignment(JudgeOutput):
    score: UnitScore
    primary_intent: str
    is_addressed: bool
    reasoning: str


class Requirement(JudgeOutput):
    requirement: str
    is_fulfilled: bool
    reasoning: str


class RequirementsFulfillment(JudgeOutput):
    requirements: tuple[Requirement, ...]
    overall_score: UnitScore


class Completeness(JudgeOutput):
    score: UnitScore
    missing_elements: tuple[str, ...]
    reasoning: str


class ResponseAppropriateness(JudgeOutput):
    score: UnitScore
    format_alignment: bool
    tone_alignment: bool
    reasoning: str


class AlignmentDimensions(JudgeOutput):
    intent_alignment: IntentAlignment
    requirements_fulfillment: RequirementsFulfillment
    completeness: Completeness
    response_appropriateness: ResponseAppropriateness


class PromptAlignmentAnalysis(AlignmentDimensions):
    overall_assessment: str


class PromptAlignmentAnalysisWithSystem(PromptAlignmentAnalysis):
    """``both`` mode with a system prompt: the same four dimensions judged against the system prompt."""

    system_compliance: AlignmentDimensions


class PromptAlignmentOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None
    evaluation_mode: EvaluationMode = "both"
    context_mode: Literal["current", "conversation"] = "current"
    max_remembered_messages: int = Field(default=10)


SCORING_WEIGHTS: dict[str, tuple[float, float, float, float]] = {
    # intent, requirements, completeness, appropriateness
    "user": (0.4, 0.3, 0.2, 0.1),
    "system": (0.35, 0.35, 0.15, 0.15),
}
BOTH_USER_WEIGHT = 0.7
BOTH_SYSTEM_WEIGHT = 0.3


def _weighted(dimensions: AlignmentDimensions, weights: tuple[float, float, float, float]) -> float:
    intent, requirements, completeness, appropriateness = weights
    return (
        dimensions.intent_alignment.score * intent
        + dimensions.requirements_fulfillment.overall_score * requirements
        + dimensions.completeness.score * completeness
        + dimensions.response_appropriateness.score * appropriateness
    )


def prompt_alignment_score(analysis: PromptAlignmentAnalysis, *, mode: EvaluationMode, scale: float = 1) -> float:
    """The documented formula, then ``round2`` with JavaScript rounding."""
    if mode == "user":
        weighted = _weighted(analysis, SCORING_WEIGHTS["user"])
    elif mode == "system":
        weighted = _weighted(analysis, SCORING_WEIGHTS["system"])
    elif isinstance(analysis, PromptAlignmentAnalysisWithSystem):
        user_score = _weighted(analysis, SCORING_WEIGHTS["user"])
        system_score = _weighted(analysis.system_compliance, SCORING_WEIGHTS["system"])
        weighted = user_score * BOTH_USER_WEIGHT + system_score * BOTH_SYSTEM_WEIGHT
    else:
        # both mode without a system prompt: the user part alone.
        weighted = _weighted(analysis, SCORING_WEIGHTS["user"])
    return round_to_two_decimals(weighted * scale)


def _format_dimensions(dimensions: AlignmentDimensions, weights: tuple[str, str, str, str]) -> str:
    intent, requirements = dimensions.intent_alignment, dimensions.requirements_fulfillment
    fulfilled = sum(1 for r in requirements.requirements if r.is_fulfilled)
    checklist = "\n  ".join(f"• {r.requirement}: {'✓' if r.is_fulfilled else '✗'}" for r in requirements.requirements)
    completeness, appropriateness = dimensions.completeness, dimensions.response_appropriateness
    missing = (
        f"Missing elements: {', '.join(completeness.missing_elements)}"
        if completeness.missing_elements
        else "Response is complete"
    )
    return (
        f"- Intent Alignment ({weights[0]} weight): {js_number(intent.score)}\n"
        f'  Primary Intent: "{intent.primary_intent}"\n'
        f"  Addressed: {'Yes' if intent.is_addressed else 'No'}\n"
        f"  {intent.reasoning}\n\n"
        f"- Requirements Fulfillment ({weights[1]} weight): {js_number(requirements.overall_score)}\n"
        f"  {fulfilled} out of {len(requirements.requirements)} requirements met\n"
        f"  {checklist}\n\n"
        f"- Completeness ({weights[2]} weight): {js_number(completeness.score)}\n"
        f"  {missing}\n"
        f"  {completeness.reasoning}\n\n"
        f"- Response Appropriateness ({weights[3]} weight): {js_number(appropriateness.score)}\n"
        f"  Format: {'Aligned' if appropriateness.format_alignment else 'Misaligned'}\n"
        f"  Tone: {'Aligned' if appropriateness.tone_alignment else 'Misaligned'}\n"
        f"  {appropriateness.reasoning}"
    )


def _conversation_context(run_input: Any, limit: int) -> str | None:
    if not is_agent_run_input(run_input):
        return None
    remembered = to_json_value(run_input)["rememberedMessages"][-max(1, limit) :]
    lines = []
    for message in remembered:
        text = get_text_content_from_message(message).strip()
        if text:
            lines.append(f"{message.get('role')}: {text}")
    return "\n".join(lines) or None


def create_prompt_alignment_scorer_llm(
    *, model: str | JudgeModel, options: PromptAlignmentOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options if isinstance(options, PromptAlignmentOptions) else PromptAlignmentOptions(**(options or {}))
    scale = opts.scale or 1  # falsy → 1, as in Mastra
    mode = opts.evaluation_mode

    def texts(ctx: StepContext) -> tuple[str, str, str]:
        user = get_user_message_from_run_input(ctx.run.input) or ""
        system = get_combined_system_prompt(ctx.run.input) or ""
        response = get_assistant_message_from_run_output(ctx.run.output) or ""
        return user, system, response

    def effective_mode(user: str, system: str) -> EvaluationMode:
        # both mode scores what it has: the user part alone without a system prompt, and vice versa.
        if mode == "both" and not system:
            return "user"
        if mode == "both" and not user:
            return "system"
        return mode

    def analyze_prompt(ctx: StepContext) -> str:
        user, system, response = texts(ctx)
        if mode == "user" and not user:
            raise ValueError("User prompt is required for user prompt alignment scoring")
        if mode == "system" and not system:
            raise ValueError("System prompt is required for system prompt alignment scoring")
        if mode == "both" and not user and not system:
            raise ValueError("A user or system prompt is required for combined alignment scoring")
        if not response.strip():
            raise ValueError("Agent response is required for prompt alignment scoring")
        context = (
            _conversation_context(ctx.run.input, opts.max_remembered_messages)
            if opts.context_mode == "conversation"
            else None
        )
        actual = effective_mode(user, system)
        return create_analyze_prompt(
            user_prompt=user,
            system_prompt=system,
            agent_response=response,
            mode=actual,
            with_system_compliance=mode == "both" and actual == "both",
            conversation_context=context,
        )

    def generate_score(ctx: StepContext) -> float:
        analysis = ctx.results.analyze_step_result
        if not isinstance(analysis, PromptAlignmentAnalysis):
            return 0.0
        user, system, _ = texts(ctx)
        return prompt_alignment_score(analysis, mode=effective_mode(user, system), scale=scale)

    def reason_prompt(ctx: StepContext) -> str:
        user, system, _ = texts(ctx)
        analysis = ctx.results.analyze_step_result
        score = ctx.score if ctx.score is not None else 0.0
        if not isinstance(analysis, PromptAlignmentAnalysis):
            return f"Unable to analyze prompt alignment. Score: {js_number(score)}"
        actual = effective_mode(user, system)
        if actual == "both" and isinstance(analysis, PromptAlignmentAnalysisWithSystem):
            breakdown = (
                "User alignment (70% of the score):\n"
                + _format_dimensions(analysis, weights_text("user"))
                + "\n\nSystem compliance (30% of the score):\n"
                + _format_dimensions(analysis.system_compliance, weights_text("system"))
            )
        else:
            breakdown = _format_dimensions(analysis, weights_text("system" if actual == "system" else "user"))
        breakdown += f"\n\nOverall Assessment: {analysis.overall_assessment}"
        return create_reason_prompt(
            user_prompt=user, system_prompt=system, score=score, scale=scale, analysis_text=breakdown, mode=actual
        )

    scorer = create_scorer(
        id="prompt-alignment-scorer",
        name="Prompt Alignment (LLM)",
        description="Evaluates how well the agent response aligns with the intent and requirements of the user prompt",
        judge=Judge.of(model, INSTRUCTIONS),
    )

    def analysis_schema(ctx: StepContext) -> type[PromptAlignmentAnalysis]:
        # systemCompliance is required exactly when both parts are judged.
        user, system, _ = texts(ctx)
        both = mode == "both" and effective_mode(user, system) == "both"
        return PromptAlignmentAnalysisWithSystem if both else PromptAlignmentAnalysis

    return (
        scorer.analyze(
            description="Analyze prompt-response alignment across multiple dimensions",
            create_prompt=analyze_prompt,
            output_schema=analysis_schema,
        )
        .generate_score(generate_score)
        .generate_reason(
            description="Generate human-readable explanation of prompt alignment evaluation",
            create_prompt=reason_prompt,
        )
        .with_version(f"1:{mode}:{js_number(scale)}:{opts.context_mode}")
    )


_MODE_NEEDS: dict[EvaluationMode, tuple[Need, ...]] = {
    "user": ("input", "output"),
    "system": ("output", "system"),
    "both": ("input", "output", "system"),
}


@scorer_kind(
    "prompt-alignment",
    options=PromptAlignmentOptions,
    needs_judge=True,
    description="how well the response follows the user's request and the system instructions",
    judge_calls_per_run=2,
    needs=("input", "output", "system"),
    needs_for=lambda options: _MODE_NEEDS[options.evaluation_mode],
)
def _prompt_alignment_kind(judge: JudgeModel | None, options: PromptAlignmentOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_prompt_alignment_scorer_llm(model=judge, options=options)
