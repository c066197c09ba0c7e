"""Context recall (eval only): Mastra's test cases through the real judge path, ground truth, options, edge cases.

Mastra's tests (packages/evals/src/scorers/llm/context-recall/index.test.ts) mock the whole run; here the
scripted judge returns the claims and verdicts each case describes and the scores must be Mastra's.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sidecar.scorers import create_context_recall_scorer
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.context import NO_CONTEXT_REASON
from sidecar.scorers.rag.context_recall import (
    NO_GROUND_TRUTH_REASON,
    ContextRecallVerdicts,
    context_recall_score,
    ground_truth_text,
)
from sidecar.scorers.rag.rag_common import ExtractedClaims
from sidecar.scoring import JudgeModel
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.prompting import js_number
from sidecar.settings import EvalSettings, Settings
from sidecar.testing.judge_server import JudgeServer, Reply


def agent_run(question: str, answer: str, ground_truth: Any = None) -> dict[str, Any]:
    return {
        "input": AgentRunInput(input_messages=(user_message(question, id="1"),)),
        "output": (assistant_message(answer, id="2"),),
        "ground_truth": ground_truth,
    }


def script(server: JudgeServer, claims: list[tuple[str, str]], expected: float) -> None:
    server.script(
        Reply.json({"claims": [c for c, _ in claims]}),
        Reply.json({"verdicts": [{"verdict": v, "reason": "per the context"} for _, v in claims]}),
        Reply(content=f"The score is {js_number(expected)} because."),
    )


BORN = "Albert Einstein was born on 14 March 1879 in Ulm, Germany."

# (name, context, answer, ground truth, claims with their verdicts, scale, Mastra's expected score)
CASES: list[tuple[str, list[str], str, str, list[tuple[str, str]], float, float]] = [
    ("perfect recall", [BORN, "Einstein developed the theory of relativity."],
     "Albert Einstein was born in 1879 in Ulm and developed the theory of relativity.",
     "Albert Einstein was born on 14 March 1879 in Ulm, Germany. He developed the theory of relativity.",
     [("Einstein was born on 14 March 1879", "yes"), ("Einstein was born in Ulm, Germany", "yes"),
      ("Einstein developed the theory of relativity", "yes")], 1, 1.0),
    ("partial recall", [BORN, "Einstein published his theory of special relativity in 1905."],
     "Einstein was born in 1879 and developed special relativity.",
     "Albert Einstein was born on 14 March 1879 in Ulm. He developed the theory of relativity. "
     "He won the Nobel Prize in 1921.",
     [("Einstein was born on 14 March 1879 in Ulm", "yes"), ("Einstein developed the theory of relativity", "yes"),
      ("Einstein won the Nobel Prize in 1921", "no")], 1, 0.67),
    ("no recall", ["The weather is sunny today.", "Cats are popular pets."],
     "I could not find relevant information about Einstein.",
     "Albert Einstein was born in 1879 and developed the theory of relativity.",
     [("Einstein was born in 1879", "no"), ("Einstein developed the theory of relativity", "no")], 1, 0.0),
    ("custom scale", ["Einstein was born in 1879.", "Einstein developed relativity."], "Einstein was born in 1879.",
     "Albert Einstein was born in 1879. He developed the theory of relativity.",
     [("Einstein was born in 1879", "yes"), ("Einstein developed the theory of relativity", "yes")], 10, 10.0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "context", "answer", "ground_truth", "claims", "scale", "expected"), CASES, ids=[c[0] for c in CASES]
)
async def test_mastra_cases(
    judge_server: JudgeServer,
    make_judge_model,
    name: str,
    context: list[str],
    answer: str,
    ground_truth: str,
    claims: list[tuple[str, str]],
    scale: float,
    expected: float,
) -> None:
    script(judge_server, claims, expected)
    scorer = create_context_recall_scorer(model=make_judge_model(), options={"context": context, "scale": scale})
    result = await scorer.run(**agent_run("Tell me about Einstein.", answer, ground_truth))
    assert result.score == expected
    extract, attribute, reason = judge_server.requests
    assert f"<untrusted_reference_answer>\n{ground_truth}\n</untrusted_reference_answer>" in extract.user_prompt
    assert f"Claims ({len(claims)})" in attribute.user_prompt and context[0] in attribute.user_prompt
    assert f"Score: {js_number(expected)}" in reason.user_prompt and ground_truth in reason.user_prompt


async def test_context_from_the_dataset_item(judge_server: JudgeServer, make_judge_model) -> None:
    script(judge_server, [("Einstein was born in 1879", "yes"), ("He won the Nobel Prize", "no")], 0.5)
    scorer = create_context_recall_scorer(model=make_judge_model())
    result = await scorer.run(
        **agent_run("Einstein?", "born 1879", {"born": 1879, "nobel": 1921.0}),
        request_context={"context": ["Einstein was born in 1879."]},
    )
    assert result.score == 0.5
    # A ground truth that is not a string is read as JSON.stringify writes it.
    assert '{"born":1879,"nobel":1921}' in judge_server.requests[0].user_prompt


@pytest.mark.parametrize("ground_truth", [None, "", 0, False])
async def test_no_ground_truth_is_not_scorable(judge_server: JudgeServer, make_judge_model, ground_truth: Any) -> None:
    """Mastra scores 0 without a ground truth (`if (!run.groundTruth) return 0`), after its judge calls."""
    scorer = create_context_recall_scorer(model=make_judge_model(), options={"context": ["Some context here."]})
    result = await scorer.run(**agent_run("Test query", "Test response", ground_truth))
    assert result.not_scorable is not None and result.not_scorable.reason == NO_GROUND_TRUTH_REASON
    assert judge_server.requests == []


async def test_no_context_is_not_scorable(judge_server: JudgeServer, make_judge_model) -> None:
    result = await create_context_recall_scorer(model=make_judge_model()).run(**agent_run("q", "a", "truth"))
    assert result.not_scorable is not None and result.not_scorable.reason == NO_CONTEXT_REASON
    assert judge_server.requests == []


async def test_no_claims_scores_zero(judge_server: JudgeServer, make_judge_model) -> None:
    """Mastra's "empty analyze results": no claims in the ground truth → 0."""
    script(judge_server, [], 0.0)
    scorer = create_context_recall_scorer(model=make_judge_model(), options={"context": ["Test context"]})
    assert (await scorer.run(**agent_run("Test query", "Test response", "Hello!"))).score == 0.0


def test_the_denominator_is_the_claims_not_the_verdicts() -> None:
    claims = ExtractedClaims(claims=("a", "b", "c", "d"))
    verdicts = ContextRecallVerdicts.model_validate({"verdicts": [{"verdict": "YES ", "reason": "r"}] * 2})
    assert context_recall_score(claims, verdicts) == 0.5
    assert context_recall_score(claims, verdicts, scale=10) == 5.0


def test_ground_truth_text() -> None:
    assert ground_truth_text("text") == "text"
    assert ground_truth_text(["a", 1.0]) == '["a",1]'
    assert ground_truth_text([]) == "[]"  # truthy in JavaScript
    assert ground_truth_text(None) is None and ground_truth_text("") is None


def test_eval_only_live_configuration_is_a_validation_error_that_says_why() -> None:
    kind = scorer_kinds()["context-recall"]
    assert kind.eval_only is not None and "ground truth" in kind.eval_only
    assert (kind.judge_calls_per_run, kind.needs) == (3, {"context", "ground_truth"})
    config = {
        "judges": {"j": {"model": "openai/gpt-4o-mini"}},
        "scorers": [{"id": "recall", "kind": "context-recall", "judge": "j"}],
    }
    EvalSettings.model_validate(config)  # fine for eval
    with pytest.raises(ValidationError, match="scores eval datasets only: needs a ground truth"):
        Settings.model_validate({**config, "kafka": {"bootstrap_servers": "x"}})
    judge = JudgeModel(model="openai/gpt-4o-mini")
    with pytest.raises(ValueError, match="context cannot be empty"):
        kind.build(judge, {"context": []})
    with pytest.raises(ValueError, match="contexts"):
        kind.build(judge, {"contexts": ["a"]})
