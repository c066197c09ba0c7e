"""Context precision: Mastra's test cases through the real judge path, the MAP formula, options, edge cases.

Mastra's tests (packages/evals/src/scorers/llm/context-precision/index.test.ts) mock the analyze step's
verdicts; here the scripted judge returns those verdicts and the scores must be Mastra's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.scorers import create_context_precision_scorer
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.context import NO_CONTEXT_REASON
from sidecar.scorers.rag.context_precision import (
    EMPTY_CONTEXT_REASON,
    ContextPrecisionVerdicts,
    context_precision_score,
)
from sidecar.scoring import JudgeModel
from sidecar.scoring.agent import AgentRunInput, ToolInvocation, assistant_message, user_message
from sidecar.scoring.prompting import js_number
from sidecar.testing.judge_server import JudgeServer, Reply


def agent_run(question: str, answer: str) -> tuple[AgentRunInput, tuple[Any, ...]]:
    return (
        AgentRunInput(input_messages=(user_message(question, id="1"),)),
        (assistant_message(answer, id="2"),),
    )


def verdicts(*words: str, order: list[int] | None = None) -> dict[str, Any]:
    indices = order if order is not None else list(range(len(words)))
    return {"verdicts": [{"context_index": i, "verdict": words[i], "reason": f"piece {i}"} for i in indices]}


PHOTOSYNTHESIS = [
    "Photosynthesis is a biological process used by plants to create energy from sunlight.",
    "The process of photosynthesis produces oxygen as a byproduct.",
]
EXERCISE = [
    "Exercise strengthens the heart and improves blood circulation.",
    "A balanced diet is important for health.",
    "Regular physical activity reduces stress and anxiety.",
    "Exercise equipment can be expensive.",
]

# (name, context, question, answer, verdict words by context index, scale, Mastra's expected score)
CASES: list[tuple[str, list[str], str, str, tuple[str, ...], float, float]] = [
    ("perfect context precision", PHOTOSYNTHESIS, "What is photosynthesis?",
     "Photosynthesis is the process by which plants convert sunlight into energy.", ("yes", "yes"), 1, 1.0),
    # MAP: position 1 relevant (1/1), position 3 relevant (2/3): (1 + 0.667) / 2 = 0.833 → 0.83
    ("mixed context relevance", EXERCISE, "What are the benefits of exercise?",
     "Regular exercise improves cardiovascular health and mental wellbeing.", ("yes", "no", "yes", "no"), 1, 0.83),
    ("no relevant context", ["The weather is sunny today.", "Cats are popular pets.", "Coffee is a popular beverage."],
     "What are the benefits of exercise?", "Regular exercise improves cardiovascular health and mental wellbeing.",
     ("no", "no", "no"), 1, 0.0),
    ("custom scale", ["Photosynthesis converts sunlight to energy.", "Plants produce oxygen through photosynthesis."],
     "What is photosynthesis?", "Photosynthesis converts sunlight to energy.", ("yes", "yes"), 10, 10.0),
    ("scale 0 is kept", ["Photosynthesis converts sunlight to energy."], "What is photosynthesis?",
     "Photosynthesis converts sunlight to energy.", ("yes",), 0, 0.0),
    ("empty analyze results", ["Test context"], "Test query", "Test response", (), 1, 0.0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "context", "question", "answer", "words", "scale", "expected"), CASES, ids=[c[0] for c in CASES]
)
async def test_mastra_cases(
    judge_server: JudgeServer,
    make_judge_model,
    name: str,
    context: list[str],
    question: str,
    answer: str,
    words: tuple[str, ...],
    scale: float,
    expected: float,
) -> None:
    judge_server.script(
        Reply.json(verdicts(*words)), Reply(content=f"The score is {js_number(expected)} because of the ranking.")
    )
    scorer = create_context_precision_scorer(model=make_judge_model(), options={"context": context, "scale": scale})
    run_input, output = agent_run(question, answer)
    result = await scorer.run(input=run_input, output=output)
    assert result.score == expected
    assert result.reason is not None and result.reason.startswith(f"The score is {js_number(expected)}")
    analyze, reason = judge_server.requests
    assert f"Context pieces ({len(context)}, numbered from 0" in analyze.user_prompt
    assert f"[0] {context[0]}" in analyze.user_prompt and question in analyze.user_prompt
    assert f"from 0 to {js_number(scale)}" in reason.user_prompt
    wire = json.loads(result.to_json())
    assert [v["context_index"] for v in wire["analyzeStepResult"]["verdicts"]] == list(range(len(words)))


async def test_verdicts_are_ranked_by_context_index_not_reply_order(
    judge_server: JudgeServer, make_judge_model
) -> None:
    judge_server.script(
        Reply.json(verdicts("yes", "no", "yes", "no", order=[3, 2, 1, 0])), Reply(content="The score is 0.83.")
    )
    scorer = create_context_precision_scorer(model=make_judge_model(), options={"context": EXERCISE})
    result = await scorer.run(input="benefits of exercise?", output="heart and mood")
    assert result.score == 0.83


async def test_context_from_the_run_and_what_is_not_scorable(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = create_context_precision_scorer(model=make_judge_model())  # Mastra: context is required up front
    judge_server.script(Reply.json(verdicts("no", "yes")), Reply(content="The score is 0.5."))
    result = await scorer.run(input="q", output="a", request_context={"context": ["noise", "the answer"]})
    assert result.score == 0.5  # 1/2 at position 2
    assert "[1] the answer" in judge_server.requests[0].user_prompt

    judge_server.reset()
    tools = (
        assistant_message(
            "a", tool_invocations=(ToolInvocation(state="result", tool_call_id="c", tool_name="s", result="doc"),)
        ),
    )
    judge_server.script(Reply.json(verdicts("yes")), Reply(content="The score is 1."))
    assert (await scorer.run(input="q", output=tools)).score == 1.0
    assert '[0] "doc"' in judge_server.requests[0].user_prompt

    judge_server.reset()
    missing = await scorer.run(input="q", output="a")
    empty = await scorer.run(input="q", output="a", request_context={"context": []})
    assert missing.not_scorable is not None and missing.not_scorable.reason == NO_CONTEXT_REASON
    assert empty.not_scorable is not None and empty.not_scorable.reason == EMPTY_CONTEXT_REASON
    assert missing.not_scorable.step == "analyze" and judge_server.requests == []


def test_options_through_the_registry() -> None:
    kind = scorer_kinds()["context-precision"]
    assert (kind.judge_calls_per_run, kind.direction, kind.eval_only) == (2, "higher", None)
    assert kind.needs == {"input", "output", "context"}
    judge = JudgeModel(model="openai/gpt-4o-mini")
    with pytest.raises(ValueError, match="context cannot be empty if provided"):
        kind.build(judge, {"context": []})  # Mastra: "Context array cannot be empty if provided"
    with pytest.raises(ValueError, match="scael"):
        kind.build(judge, {"scael": 2})
    kind.build(judge, {"context": ["doc"], "scale": 5})


@given(st.lists(st.booleans(), max_size=10), st.sampled_from([1, 5, 10]))
def test_map_formula(relevant: list[bool], scale: int) -> None:
    parsed = ContextPrecisionVerdicts.model_validate(
        verdicts(*("yes" if r else "no" for r in relevant))  # in index order
    )
    hits, precisions = 0, []
    for k, r in enumerate(relevant, start=1):
        if r:
            hits += 1
            precisions.append(hits / k)
    score = context_precision_score(parsed, scale=scale)
    if not precisions:
        assert score == 0.0
    else:
        assert abs(score - sum(precisions) / len(precisions) * scale) <= 0.005 * scale + 1e-9
        assert 0 < score <= scale
    # Relevant pieces first is never worse than the same verdicts in another order.
    best = ContextPrecisionVerdicts.model_validate(
        verdicts(*sorted(("yes" if r else "no" for r in relevant), key=lambda w: w != "yes"))
    )
    assert context_precision_score(best, scale=scale) >= score
