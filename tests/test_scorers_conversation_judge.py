"""The pipeline the conversation judges of one judge call share (conversation_common.conversation_judge,
analysis_in, verdicts_per_turn): a judge built on it through the real judge client against the scripted judge
server, the schema per number of turns, and the fingerprints of the judges built on it, pinned, since a
fingerprint names a scorer's score ids."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import StrictBool, StrictInt, ValidationError

from sidecar.scorers import (
    create_conversation_completeness_scorer,
    create_knowledge_retention_scorer,
    create_role_adherence_scorer,
    create_user_frustration_scorer,
)
from sidecar.scorers.conversation.conversation_common import (
    analysis_in,
    conversation_in,
    conversation_judge,
    verdicts_per_turn,
)
from sidecar.scorers.conversation.transcript import Conversation
from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring import Judge, JudgeModel, ScorerRunError, StepContext
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.session_runs import run_kwargs, session_run

TURNS = [("Where is my order?", "It ships today."), ("And the invoice?", "Sent to your email.")]


class Polite(JudgeOutput):
    turn: StrictInt
    polite: StrictBool


class Politeness(JudgeOutput):
    turns: tuple[Polite, ...]


politeness_of = verdicts_per_turn(Politeness)


def politeness_prompt(conversation: Conversation) -> str:
    return f"Judge each of the {len(conversation.turns)} replies: " + " | ".join(t.answer for t in conversation.turns)


def create_politeness_judge(model: JudgeModel) -> Any:
    def generate_score(ctx: StepContext) -> float:
        verdicts = analysis_in(ctx, Politeness).turns
        return sum(v.polite for v in verdicts) / len(verdicts)

    def generate_reason(ctx: StepContext) -> str:
        rude = [v.turn for v in analysis_in(ctx, Politeness).turns if not v.polite]
        return f"rude in {rude} of {len(conversation_in(ctx).turns)} turns"

    return conversation_judge(
        id="politeness",
        name="Politeness",
        description="Share of polite replies",
        judge=Judge.of(model, "You judge politeness."),
        analyze="Judge each reply's politeness",
        prompt=politeness_prompt,
        schema=politeness_of,
        score=generate_score,
        reason=generate_reason,
        version="1",
    )


async def test_a_judge_built_on_the_shared_pipeline_asks_once_and_scores_from_the_analysis(
    judge_server: JudgeServer, make_judge_model: Any
) -> None:
    judge_server.script(Reply.json({"turns": [{"turn": 1, "polite": True}, {"turn": 2, "polite": False}]}))
    scorer = create_politeness_judge(make_judge_model())
    result = await scorer.run(**run_kwargs(session_run(TURNS)))
    assert (result.score, result.reason) == (0.5, "rude in [2] of 2 turns")
    [call] = judge_server.requests
    assert call.user_prompt == "Judge each of the 2 replies: It ships today. | Sent to your email."
    assert call.system_prompt is not None and "You judge politeness." in call.system_prompt
    assert [name for name, _ in scorer.steps] == ["preprocess", "analyze", "generate_score", "generate_reason"]


async def test_the_schema_follows_the_conversation_so_a_skipped_turn_gets_the_fallback_attempt(
    judge_server: JudgeServer, make_judge_model: Any
) -> None:
    skipped = Reply.json({"turns": [{"turn": 1, "polite": True}]})
    judge_server.script(skipped, skipped)
    with pytest.raises(ScorerRunError) as failure:
        await create_politeness_judge(make_judge_model()).run(**run_kwargs(session_run(TURNS)))
    assert "no verdict for turn(s) 2" in str(failure.value.__cause__)
    assert len(judge_server.requests) == 2


async def test_a_run_without_turns_is_not_scorable_before_any_judge_call(
    judge_server: JudgeServer, make_judge_model: Any
) -> None:
    result = await create_politeness_judge(make_judge_model()).run(input=None, output=[])
    assert result.not_scorable is not None and judge_server.requests == []


def test_a_schema_per_number_of_turns_asks_one_verdict_for_each_turn_from_the_first_judged() -> None:
    later = verdicts_per_turn(Politeness, first_turn=2)
    schema = later(3)
    assert schema is later(3) and schema is not later(4)  # one class per number of turns, kept
    assert schema.__name__ == "PolitenessOfTurns" and issubclass(schema, Politeness)
    good = {"turns": [{"turn": 3, "polite": True}, {"turn": 2, "polite": False}]}
    assert [t.turn for t in schema.model_validate(good).turns] == [3, 2]  # in any order
    refused = {
        "no verdict for turn(s) 3": [{"turn": 2, "polite": True}],
        "turn(s) 1 are not among the turns asked about": [
            {"turn": 1, "polite": True},
            {"turn": 2, "polite": True},
            {"turn": 3, "polite": True},
        ],
        "turn(s) 2 judged more than once": [
            {"turn": 2, "polite": True},
            {"turn": 2, "polite": False},
            {"turn": 3, "polite": True},
        ],
    }
    for problem, turns in refused.items():
        with pytest.raises(ValidationError, match=re.escape(problem)):
            schema.model_validate({"turns": turns})
    with pytest.raises(ValidationError, match=re.escape("expected one verdict per turn (1 to 2)")):
        politeness_of(2).model_validate({"turns": [{"turn": 2, "polite": True}]})


def test_the_conversation_judges_keep_their_fingerprints_and_so_their_score_ids() -> None:
    model = JudgeModel(model="openai/gpt-4o-mini")
    fingerprints = {
        scorer.id: scorer.fingerprint
        for scorer in (
            create_conversation_completeness_scorer(model=model),
            create_knowledge_retention_scorer(model=model),
            create_user_frustration_scorer(model=model),
            create_role_adherence_scorer(model=model),
            create_knowledge_retention_scorer(model=model, options={"scale": 5}),
        )
    }
    assert fingerprints == {
        "conversation-completeness-scorer": "ee551369306061f7",
        "knowledge-retention-scorer": "682d6970c18281d6",  # scale 5 (the last one built)
        "user-frustration-scorer": "98076e778ab2f633",
        "role-adherence-scorer": "9dc98e0c6c2a6e6b",
    }
    assert create_knowledge_retention_scorer(model=model).fingerprint == "a7fb6e4af149f932"
