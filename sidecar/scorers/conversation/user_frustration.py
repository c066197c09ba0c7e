"""``kind: user-frustration``: did the user become frustrated during the conversation, and was it resolved?

preprocess (the conversation, numbered turns) → analyze (prompt: per turn, whether the user's message shows
frustration, with the words that show it; whether the user ends satisfied) → generate_score (function: the
score and its label) → generate_reason (function: the frustrated turns and the ending). One judge call per
run; scope session only. **Lower is better**: the score measures frustration, as toxicity measures toxicity.

Score, with MLflow's three outcomes as the label: ``none`` (no message shows frustration) 0; ``resolved`` (the
user was frustrated, but their last message is not and they end satisfied) 0.5; ``unresolved`` (frustrated in
the last turn, or never said to be satisfied after) 1; × scale.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import StrictBool, StrictInt

from sidecar.scorers.conversation.conversation_common import (
    CONVERSATION_SCOPES,
    ConversationOptions,
    analysis_in,
    conversation_judge,
    verdicts_per_turn,
)
from sidecar.scorers.conversation.transcript import turn_list
from sidecar.scorers.conversation.user_frustration_prompts import INSTRUCTIONS, create_analyze_prompt
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.tools_common import apply_scale, options_version
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, LabelledScore, Scorer, StepContext

__all__ = [
    "FRUSTRATION_SCORES",
    "FrustrationAnalysis",
    "FrustrationOutcome",
    "UserFrustrationOptions",
    "UserTurnMood",
    "create_user_frustration_scorer",
    "frustration_outcome",
    "frustration_reason",
    "frustration_score",
]

FrustrationOutcome = Literal["none", "resolved", "unresolved"]
FRUSTRATION_SCORES: Final[dict[FrustrationOutcome, float]] = {"none": 0.0, "resolved": 0.5, "unresolved": 1.0}


class UserFrustrationOptions(ConversationOptions):
    pass


class UserTurnMood(JudgeOutput):
    turn: StrictInt
    frustrated: StrictBool
    evidence: str = ""


class FrustrationAnalysis(JudgeOutput):
    turns: tuple[UserTurnMood, ...]
    ended_satisfied: StrictBool


# One verdict per turn, each turn once.
analysis_schema = verdicts_per_turn(FrustrationAnalysis)


def frustration_outcome(analysis: FrustrationAnalysis) -> FrustrationOutcome:
    frustrated = {t.turn for t in analysis.turns if t.frustrated}
    if not frustrated:
        return "none"
    last = max((t.turn for t in analysis.turns), default=0)
    return "resolved" if analysis.ended_satisfied and last not in frustrated else "unresolved"


def frustration_score(analysis: FrustrationAnalysis, *, scale: float = 1) -> LabelledScore:
    outcome = frustration_outcome(analysis)
    return LabelledScore(apply_scale(FRUSTRATION_SCORES[outcome], scale), outcome)


def frustration_reason(analysis: FrustrationAnalysis) -> str:
    outcome = frustration_outcome(analysis)
    count = len(analysis.turns)
    if outcome == "none":
        return f"The user showed no frustration in any of the {count} turn{'s' if count != 1 else ''}: none."
    moods = sorted((t for t in analysis.turns if t.frustrated), key=lambda t: t.turn)
    first = moods[0]
    shown = f' ("{first.evidence}")' if first.evidence else ""
    head = f"The user became frustrated in {turn_list([t.turn for t in moods])}{shown}"
    last = max(t.turn for t in analysis.turns)
    if outcome == "resolved":
        return f"{head} and ended the conversation satisfied (turn {last}): resolved."
    if moods[-1].turn == last:
        return f"{head} and was still frustrated at the end (turn {last}): unresolved."
    return f"{head} and did not say they were satisfied by the end (turn {last}): unresolved."


def create_user_frustration_scorer(
    *, model: str | JudgeModel, options: UserFrustrationOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options_as(UserFrustrationOptions, options)
    scale = opts.scale or 1.0

    def generate_score(ctx: StepContext) -> LabelledScore:
        return frustration_score(analysis_in(ctx, FrustrationAnalysis), scale=scale)

    def generate_reason(ctx: StepContext) -> str:
        return frustration_reason(analysis_in(ctx, FrustrationAnalysis))

    return conversation_judge(
        id="user-frustration-scorer",
        name="User frustration (LLM)",
        description="Whether the user became frustrated during the conversation, and whether it was resolved",
        judge=Judge.of(model, INSTRUCTIONS),
        analyze="Judge the user's frustration in each turn and whether they end satisfied",
        prompt=create_analyze_prompt,
        schema=analysis_schema,
        score=generate_score,
        reason=generate_reason,
        version=options_version(opts),
    )


@scorer_kind(
    "user-frustration",
    options=UserFrustrationOptions,
    needs_judge=True,
    description="whether the user became frustrated and it stayed unresolved: 0 none, 0.5 resolved, "
    "1 unresolved (the label says which)",
    judge_calls_per_run=1,
    needs=("input", "output"),
    direction="lower",
    scopes=CONVERSATION_SCOPES,
)
def _user_frustration_kind(judge: JudgeModel | None, options: UserFrustrationOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_user_frustration_scorer(model=judge, options=options)
