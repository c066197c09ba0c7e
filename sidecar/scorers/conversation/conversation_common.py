"""What the conversation judges share (docs/scorers-conversation.md): their options' base, the conversation
read once per run (their preprocess step), the check that the judge gave one verdict per turn it was asked
about, each turn once, and the pipeline every judge of one call runs (:func:`conversation_judge`).

Every conversation judge asks its judge for a verdict per turn, in one call, and computes its score from those
verdicts in code: the score is a formula over turns the reason can name, never a number the judge made up.
A judge that skips a turn, repeats one or names a turn the conversation does not have gives a format error,
so it gets its one fallback attempt instead of a score computed over the wrong turns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field, create_model, model_validator

from sidecar.core.runs import Scope
from sidecar.scorers.conversation.transcript import Conversation, conversation_of
from sidecar.scorers.quality_common import ScorerOptions
from sidecar.scoring import Judge, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.steps import StepFunction

__all__ = [
    "CONVERSATION_SCOPES",
    "ConversationOptions",
    "analysis_in",
    "check_turn_numbers",
    "conversation_in",
    "conversation_judge",
    "read_conversation",
    "verdicts_per_turn",
]

AnalysisT = TypeVar("AnalysisT", bound=BaseModel)


class _Turned(Protocol):
    turn: int


class _PerTurn(Protocol):
    turns: Sequence[_Turned]


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


def verdicts_per_turn(analysis: type[AnalysisT], *, first_turn: int = 1) -> Callable[[int], type[AnalysisT]]:
    """The schema of ``analysis`` (whose ``turns`` hold one verdict each, with its ``turn``) for a conversation
    of a given number of turns: one verdict for each turn from ``first_turn`` to the last, each turn once (a
    format error otherwise: the judge gets its one fallback attempt). Named ``<analysis>OfTurns``; one class
    per number of turns, kept for the next run."""

    def one_per_turn(turns: int) -> Callable[[Any], Any]:
        def check(self: _PerTurn) -> _PerTurn:
            check_turn_numbers((t.turn for t in self.turns), range(first_turn, turns + 1), "verdict")
            return self

        return check

    @functools.lru_cache(maxsize=64)
    def schema(turns: int) -> type[AnalysisT]:
        validators: dict[str, Any] = {"_one_per_turn": model_validator(mode="after")(one_per_turn(turns))}
        return create_model(
            f"{analysis.__name__}OfTurns", __base__=analysis, __module__=analysis.__module__, __validators__=validators
        )

    return schema


def analysis_in(ctx: StepContext, kind: type[AnalysisT]) -> AnalysisT:
    """The judge's analysis of the conversation (the analyze step's result: the steps after it run only once
    it succeeded)."""
    analysis = ctx.results.analyze_step_result
    assert isinstance(analysis, kind)
    return analysis


def conversation_judge(
    *,
    id: str,
    name: str,
    description: str,
    judge: Judge,
    analyze: str,
    prompt: Callable[[Conversation], str],
    schema: Callable[[int], type[BaseModel]],
    score: StepFunction,
    reason: StepFunction,
    version: str,
    preprocess: StepFunction = read_conversation,
) -> Scorer:
    """The pipeline of a conversation judge of one judge call: ``preprocess`` (the conversation, or not
    scorable) → analyze (the step ``analyze`` describes: ``prompt`` of the conversation, answered in ``schema``
    for its number of turns) → generate_score (``score``) → generate_reason (``reason``), functions of the
    analysis.

    ``preprocess``, ``score`` and ``reason`` stay the judge's own functions: a function step is named by its
    qualified name in the scorer's fingerprint, and so in its score ids."""

    def analyze_prompt(ctx: StepContext) -> str:
        return prompt(conversation_in(ctx))

    def output_schema(ctx: StepContext) -> type[BaseModel]:
        return schema(len(conversation_in(ctx).turns))

    return (
        create_scorer(id=id, name=name, description=description, judge=judge)
        .preprocess(preprocess)
        .analyze(description=analyze, create_prompt=analyze_prompt, output_schema=output_schema)
        .generate_score(score)
        .generate_reason(reason)
        .with_version(version)
    )
