"""``kind: conversation-completeness``: were all the user's requests answered by the end of the conversation?

preprocess (the conversation, numbered turns) → analyze (prompt: every request the user made, the turn it was
made in, satisfied, unsatisfied or withdrawn by the end) → generate_score (function) → generate_reason
(function: the unmet requests by turn). One judge call per run; scope session only.

Score (DeepEval's conversation completeness): satisfied requests / requests that count (withdrawn ones do
not), rounded to two decimals, × scale. No request at all (small talk) is 1: nothing was left undone.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, StrictInt, model_validator

from sidecar.scorers.conversation.conversation_common import (
    CONVERSATION_SCOPES,
    ConversationOptions,
    analysis_in,
    conversation_in,
    conversation_judge,
)
from sidecar.scorers.conversation.conversation_completeness_prompts import INSTRUCTIONS, create_analyze_prompt
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.tools_common import apply_scale, options_version
from sidecar.scorers.verdicts import JudgeOutput, trimmed_lower
from sidecar.scoring import Judge, JudgeModel, Scorer, StepContext
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "CompletenessAnalysis",
    "ConversationCompletenessOptions",
    "UserRequest",
    "completeness_reason",
    "completeness_score",
    "create_conversation_completeness_scorer",
]


RequestStatus = Annotated[Literal["satisfied", "unsatisfied", "withdrawn"], BeforeValidator(trimmed_lower)]


class ConversationCompletenessOptions(ConversationOptions):
    pass


class UserRequest(JudgeOutput):
    request: str
    turn: StrictInt
    status: RequestStatus
    satisfied_in_turn: StrictInt | None = None
    reason: str = ""


class CompletenessAnalysis(JudgeOutput):
    requests: tuple[UserRequest, ...]


@functools.lru_cache(maxsize=64)
def analysis_schema(turns: int) -> type[CompletenessAnalysis]:
    """The analysis of a conversation of ``turns`` turns: every turn a request names is one of them."""

    class CompletenessAnalysisOfTurns(CompletenessAnalysis):
        @model_validator(mode="after")
        def _turns_exist(self) -> CompletenessAnalysisOfTurns:
            for request in self.requests:
                if not 1 <= request.turn <= turns:
                    raise ValueError(f"request {request.request!r}: turn {request.turn} is not a turn (1 to {turns})")
                done = request.satisfied_in_turn
                if done is not None and not request.turn <= done <= turns:
                    raise ValueError(
                        f"request {request.request!r}: satisfiedInTurn {done} is not a turn from {request.turn} "
                        f"to {turns}"
                    )
            return self

    return CompletenessAnalysisOfTurns


def completeness_score(requests: tuple[UserRequest, ...], *, scale: float = 1) -> float:
    counted = [r for r in requests if r.status != "withdrawn"]
    if not counted:
        return apply_scale(1.0, scale)
    satisfied = sum(1 for r in counted if r.status == "satisfied")
    return apply_scale(round_to_two_decimals(satisfied / len(counted)), scale)


def completeness_reason(requests: tuple[UserRequest, ...], turns: int) -> str:
    counted = [r for r in requests if r.status != "withdrawn"]
    withdrawn = [r for r in requests if r.status == "withdrawn"]
    if not counted:
        head = f"The user made no request the agent had to fulfil in {turns} turn{'s' if turns != 1 else ''}"
        return head + (f" (withdrawn: {_listed(withdrawn)})." if withdrawn else ".")
    unmet = [r for r in counted if r.status == "unsatisfied"]
    met = [r for r in counted if r.status == "satisfied"]
    lines = [f"{len(met)} of {len(counted)} requests were satisfied by the end of the conversation."]
    if unmet:
        lines.append(f"Unmet: {_listed(unmet, reasons=True)}.")
    if met:
        lines.append(f"Satisfied: {_listed(met)}.")
    if withdrawn:
        lines.append(f"Withdrawn by the user: {_listed(withdrawn)}.")
    return " ".join(lines)


def _listed(requests: list[UserRequest], *, reasons: bool = False) -> str:
    def one(r: UserRequest) -> str:
        where = f"turn {r.turn}"
        if r.satisfied_in_turn is not None and r.satisfied_in_turn != r.turn:
            where += f", satisfied in turn {r.satisfied_in_turn}"
        because = f": {r.reason}" if reasons and r.reason else ""
        return f"{r.request} ({where}{because})"

    return "; ".join(one(r) for r in requests)


def create_conversation_completeness_scorer(
    *, model: str | JudgeModel, options: ConversationCompletenessOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options_as(ConversationCompletenessOptions, options)
    scale = opts.scale or 1.0

    def generate_score(ctx: StepContext) -> float:
        return completeness_score(analysis_in(ctx, CompletenessAnalysis).requests, scale=scale)

    def generate_reason(ctx: StepContext) -> str:
        return completeness_reason(analysis_in(ctx, CompletenessAnalysis).requests, len(conversation_in(ctx).turns))

    return conversation_judge(
        id="conversation-completeness-scorer",
        name="Conversation completeness (LLM)",
        description="Share of the user's requests satisfied by the end of the conversation",
        judge=Judge.of(model, INSTRUCTIONS),
        analyze="List the user's requests and whether each was satisfied by the end",
        prompt=create_analyze_prompt,
        schema=analysis_schema,
        score=generate_score,
        reason=generate_reason,
        version=options_version(opts),
    )


@scorer_kind(
    "conversation-completeness",
    options=ConversationCompletenessOptions,
    needs_judge=True,
    description="share of the user's requests satisfied by the end of the conversation",
    judge_calls_per_run=1,
    needs=("input", "output"),
    scopes=CONVERSATION_SCOPES,
)
def _conversation_completeness_kind(judge: JudgeModel | None, options: ConversationCompletenessOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_conversation_completeness_scorer(model=judge, options=options)
