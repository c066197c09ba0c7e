"""``kind: knowledge-retention``: does the agent use what the user said earlier, instead of asking again or
contradicting it?

preprocess (the conversation, numbered turns; one turn is not scorable: nothing was said before it) →
analyze (prompt: for each reply from turn 2 on, retained, forgot or contradicted, and what the user had said)
→ generate_score (function) → generate_reason (function: the turns that lost something). One judge call per
run; scope session only.

Score (DeepEval's knowledge retention, one verdict per reply): replies that retained what the user said /
replies judged (turns 2 to n), rounded to two decimals, × scale.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, StrictInt

from sidecar.scorers.conversation.conversation_common import (
    CONVERSATION_SCOPES,
    ConversationOptions,
    analysis_in,
    conversation_judge,
    read_conversation,
    verdicts_per_turn,
)
from sidecar.scorers.conversation.knowledge_retention_prompts import INSTRUCTIONS, create_analyze_prompt
from sidecar.scorers.conversation.transcript import Conversation
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.tools_common import apply_scale, options_version
from sidecar.scorers.verdicts import JudgeOutput, trimmed_lower
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "KnowledgeRetentionOptions",
    "RetentionAnalysis",
    "TurnRetention",
    "create_knowledge_retention_scorer",
    "retention_reason",
    "retention_score",
]


RetentionVerdict = Annotated[Literal["retained", "forgot", "contradicted"], BeforeValidator(trimmed_lower)]


class KnowledgeRetentionOptions(ConversationOptions):
    pass


class TurnRetention(JudgeOutput):
    turn: StrictInt
    verdict: RetentionVerdict
    earlier: str = ""
    reason: str = ""


class RetentionAnalysis(JudgeOutput):
    turns: tuple[TurnRetention, ...]


# One verdict per reply from turn 2 on (nothing was said before the first), each once.
analysis_schema = verdicts_per_turn(RetentionAnalysis, first_turn=2)


def retention_score(verdicts: tuple[TurnRetention, ...], *, scale: float = 1) -> float:
    if not verdicts:
        return apply_scale(1.0, scale)  # the schema asks for turns 2..n: only a one-turn run has none
    kept = sum(1 for v in verdicts if v.verdict == "retained")
    return apply_scale(round_to_two_decimals(kept / len(verdicts)), scale)


def retention_reason(verdicts: tuple[TurnRetention, ...]) -> str:
    ordered = sorted(verdicts, key=lambda v: v.turn)
    lost = [v for v in ordered if v.verdict != "retained"]
    head = (
        f"The agent kept what the user had said in {len(ordered) - len(lost)} of its {len(ordered)} replies after "
        "the first turn"
    )
    if not lost:
        return head + "."
    details = []
    for v in lost:
        what = "asked again for or ignored" if v.verdict == "forgot" else "contradicted"
        earlier = v.earlier or "what the user said earlier"
        because = f" ({v.reason})" if v.reason else ""
        details.append(f"in turn {v.turn} it {what} {earlier}{because}")
    return f"{head}; " + "; ".join(details) + "."


def _at_least_two_turns(ctx: StepContext) -> Conversation | NotScorable:
    conversation = read_conversation(ctx)
    if isinstance(conversation, Conversation) and len(conversation.turns) < 2:
        return not_scorable("a one-turn conversation: nothing was said before the agent's only reply")
    return conversation


def create_knowledge_retention_scorer(
    *, model: str | JudgeModel, options: KnowledgeRetentionOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options_as(KnowledgeRetentionOptions, options)
    scale = opts.scale or 1.0

    def generate_score(ctx: StepContext) -> float:
        return retention_score(analysis_in(ctx, RetentionAnalysis).turns, scale=scale)

    def generate_reason(ctx: StepContext) -> str:
        return retention_reason(analysis_in(ctx, RetentionAnalysis).turns)

    return conversation_judge(
        id="knowledge-retention-scorer",
        name="Knowledge retention (LLM)",
        description="Share of the agent's replies that keep what the user said earlier in the conversation",
        judge=Judge.of(model, INSTRUCTIONS),
        preprocess=_at_least_two_turns,
        analyze="Judge whether each reply after the first keeps what the user said earlier",
        prompt=create_analyze_prompt,
        schema=analysis_schema,
        score=generate_score,
        reason=generate_reason,
        version=options_version(opts),
    )


@scorer_kind(
    "knowledge-retention",
    options=KnowledgeRetentionOptions,
    needs_judge=True,
    description="share of the agent's replies after the first that keep what the user said earlier (not "
    "asked again, not contradicted)",
    judge_calls_per_run=1,
    needs=("input", "output"),
    scopes=CONVERSATION_SCOPES,
)
def _knowledge_retention_kind(judge: JudgeModel | None, options: KnowledgeRetentionOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_knowledge_retention_scorer(model=judge, options=options)
