"""``kind: role-adherence``: does the agent keep the role its instructions give it, in every reply?

preprocess (the conversation, numbered turns, and the role: ``options.role``, else the run's system
instructions; neither is not scorable) → analyze (prompt: per turn, in role or not) → generate_score
(function) → generate_reason (function: the turns out of role). One judge call per run; scope session only.

Score (DeepEval's role adherence, one verdict per reply): replies in role / replies, rounded to two
decimals, × scale.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import Field, StrictBool, StrictInt

from sidecar.scorers.conversation.conversation_common import (
    CONVERSATION_SCOPES,
    ConversationOptions,
    analysis_in,
    read_conversation,
    verdicts_per_turn,
)
from sidecar.scorers.conversation.role_adherence_prompts import INSTRUCTIONS, create_analyze_prompt
from sidecar.scorers.conversation.transcript import Conversation
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import Need, scorer_kind
from sidecar.scorers.tools_common import apply_scale, options_version
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "RoleAdherenceOptions",
    "RoleAnalysis",
    "TurnRole",
    "create_role_adherence_scorer",
    "role_reason",
    "role_score",
]


class RoleAdherenceOptions(ConversationOptions):
    # The role the agent must keep ("a support agent of ACME's billing desk: never gives legal advice"). None:
    # the run's system instructions.
    role: str | None = Field(default=None, min_length=1)


class TurnRole(JudgeOutput):
    turn: StrictInt
    in_role: StrictBool
    reason: str = ""


class RoleAnalysis(JudgeOutput):
    turns: tuple[TurnRole, ...]


# One verdict per reply, each turn once.
analysis_schema = verdicts_per_turn(RoleAnalysis)


def role_score(verdicts: tuple[TurnRole, ...], *, scale: float = 1) -> float:
    if not verdicts:
        return apply_scale(1.0, scale)  # the schema asks for every turn: only a run without turns has none
    kept = sum(1 for v in verdicts if v.in_role)
    return apply_scale(round_to_two_decimals(kept / len(verdicts)), scale)


def role_reason(verdicts: tuple[TurnRole, ...]) -> str:
    ordered = sorted(verdicts, key=lambda v: v.turn)
    out = [v for v in ordered if not v.in_role]
    head = f"The agent kept its role in {len(ordered) - len(out)} of {len(ordered)} replies"
    if not out:
        return head + "."
    return f"{head}; out of role in " + "; ".join(f"turn {v.turn}: {v.reason or 'no reason given'}" for v in out) + "."


@dataclass(frozen=True, slots=True)
class _Prepared:
    conversation: Conversation
    role: str
    role_from_run: bool


def create_role_adherence_scorer(
    *, model: str | JudgeModel, options: RoleAdherenceOptions | dict[str, Any] | None = None
) -> Scorer:
    opts = options_as(RoleAdherenceOptions, options)
    scale = opts.scale or 1.0

    def preprocess(ctx: StepContext) -> _Prepared | NotScorable:
        conversation = read_conversation(ctx)
        if isinstance(conversation, NotScorable):
            return conversation
        if opts.role is not None:
            return _Prepared(conversation, opts.role, role_from_run=False)
        if not conversation.system.strip():
            return not_scorable("no role to keep: the run has no system instructions and options.role is not set")
        return _Prepared(conversation, conversation.system, role_from_run=True)

    def prepared(ctx: StepContext) -> _Prepared:
        value = ctx.results.preprocess_step_result
        assert isinstance(value, _Prepared)
        return value

    def analyze_prompt(ctx: StepContext) -> str:
        p = prepared(ctx)
        return create_analyze_prompt(p.conversation, role=p.role, role_from_run=p.role_from_run)

    def schema(ctx: StepContext) -> type[RoleAnalysis]:
        return analysis_schema(len(prepared(ctx).conversation.turns))

    def verdicts_of(ctx: StepContext) -> tuple[TurnRole, ...]:
        return analysis_in(ctx, RoleAnalysis).turns

    def generate_score(ctx: StepContext) -> float:
        return role_score(verdicts_of(ctx), scale=scale)

    def generate_reason(ctx: StepContext) -> str:
        return role_reason(verdicts_of(ctx))

    return (
        create_scorer(
            id="role-adherence-scorer",
            name="Role adherence (LLM)",
            description="Share of the agent's replies that keep the role its instructions give it",
            judge=Judge.of(model, INSTRUCTIONS),
        )
        .preprocess(preprocess)
        .analyze(
            description="Judge whether each reply keeps the agent's role",
            create_prompt=analyze_prompt,
            output_schema=schema,
        )
        .generate_score(generate_score)
        .generate_reason(generate_reason)
        .with_version(options_version(opts))
    )


def _needs(options: RoleAdherenceOptions) -> Iterable[Need]:
    # A role written in the options needs no system instructions from the run.
    return ("input", "output") if options.role is not None else ("input", "output", "system")


@scorer_kind(
    "role-adherence",
    options=RoleAdherenceOptions,
    needs_judge=True,
    description="share of the agent's replies that keep its role (options.role, else its system instructions)",
    judge_calls_per_run=1,
    needs=("input", "output", "system"),
    needs_for=_needs,
    scopes=CONVERSATION_SCOPES,
)
def _role_adherence_kind(judge: JudgeModel | None, options: RoleAdherenceOptions) -> Scorer:
    assert judge is not None  # the registry checks needs_judge
    return create_role_adherence_scorer(model=judge, options=options)
