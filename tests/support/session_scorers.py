"""Conversation scorers for the engine's tests, written as a user would (``python: tests.support.session_scorers:...``):
code scorers over a session run, so the tests of the engine need no judge kind."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sidecar.scorers.registry import scorer_kind
from sidecar.scoring import JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.agent import AgentMessage, AgentRunInput


class TurnCountOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_turn: float = 0.1  # the score of each turn (capped at 1)


def _turns(ctx: StepContext) -> tuple[tuple[AgentMessage, ...], tuple[AgentMessage, ...]]:
    run_input = ctx.run.input
    assert isinstance(run_input, AgentRunInput)
    return run_input.input_messages, tuple(ctx.run.output)


@scorer_kind(
    "test-turn-count",
    options=TurnCountOptions,
    needs_judge=False,
    description="how many turns a conversation had (tests)",
    scopes=("session",),
)
def create_turn_count_scorer(judge: JudgeModel | None, options: TurnCountOptions) -> Scorer:
    """Scores ``per_turn`` per turn; its reason lists each turn's request and answer, so a test sees which turns,
    in which order, the run held."""

    def score(ctx: StepContext) -> float:
        requests, answers = _turns(ctx)
        assert len(requests) == len(answers)  # the contract: turn i is input message i and output message i
        return min(1.0, options.per_turn * len(requests))

    def reason(ctx: StepContext) -> str:
        requests, answers = _turns(ctx)
        pairs = enumerate(zip(requests, answers, strict=True))
        return " | ".join(f"turn {i + 1}: {q.text} -> {a.text}" for i, (q, a) in pairs)

    return create_scorer(id="turn-count").generate_score(score).generate_reason(reason)


def create_last_answer_length(*, judge: JudgeModel | None, options: dict[str, object]) -> Scorer:
    """A plain ``python:`` factory (no declared kind): any scope, a session's included."""

    def score(ctx: StepContext) -> float:
        _, answers = _turns(ctx)
        return min(1.0, len(answers[-1].text) / 100) if answers else 0.0

    return create_scorer(id="last-answer-length").generate_score(score)
