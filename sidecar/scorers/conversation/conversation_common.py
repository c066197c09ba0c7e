"""What the conversation judges share (docs/scorers-conversation.md): their options' base, the conversation
read once per run (their preprocess step), and the check that the judge gave one verdict per turn it was
asked about, each turn once.

Every conversation judge asks its judge for a verdict per turn, in one call, and computes its score from those
verdicts in code: the score is a formula over turns the reason can name, never a number the judge made up.
A judge that skips a turn, repeats one or names a turn the conversation does not have gives a format error,
so it gets its one fallback attempt instead of a score computed over the wrong turns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import Field

from sidecar.core.runs import Scope
from sidecar.scorers.conversation.transcript import Conversation, conversation_of
from sidecar.scorers.quality_common import ScorerOptions
from sidecar.scoring import NotScorable, StepContext, not_scorable

__all__ = [
    "CONVERSATION_SCOPES",
    "ConversationOptions",
    "check_turn_numbers",
    "conversation_in",
    "read_conversation",
]

# A conversation judge reads whole sessions: one turn's run has no conversation to judge.
CONVERSATION_SCOPES: tuple[Scope, ...] = ("session",)


class ConversationOptions(ScorerOptions):
    # The score's maximum (None → 1): score × scale, as for the other kinds.
    scale: float | None = Field(default=None, gt=0)


def read_conversation(ctx: StepContext) -> Conversation | NotScorable:
    """The preprocess step of every conversation judge: the run's conversation, or not scorable without turns."""
    conversation = conversation_of(ctx.run.input, ctx.run.output)
    if not conversation.turns:
        return not_scorable("the run holds no conversation turn (no user message and no answer)")
    return conversation


def conversation_in(ctx: StepContext) -> Conversation:
    """The conversation the preprocess step read (every later step runs only after it succeeded)."""
    value = ctx.results.preprocess_step_result
    assert isinstance(value, Conversation)
    return value


def check_turn_numbers(found: Iterable[int], expected: Sequence[int], what: str) -> None:
    """Raise ``ValueError`` unless ``found`` holds each of ``expected`` exactly once (in any order)."""
    seen = list(found)
    missing = sorted(set(expected) - set(seen))
    unknown = sorted(set(seen) - set(expected))
    repeated = sorted({n for n in seen if seen.count(n) > 1})
    problems = []
    if missing:
        problems.append(f"no {what} for turn(s) {', '.join(map(str, missing))}")
    if unknown:
        problems.append(f"turn(s) {', '.join(map(str, unknown))} are not among the turns asked about")
    if repeated:
        problems.append(f"turn(s) {', '.join(map(str, repeated))} judged more than once")
    if problems:
        span = f"{expected[0]} to {expected[-1]}" if expected else "none"
        raise ValueError(f"expected one {what} per turn ({span}): " + "; ".join(problems))
