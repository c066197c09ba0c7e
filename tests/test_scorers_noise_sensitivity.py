"""Noise sensitivity (eval only): Mastra's test cases through the real judge path, the formula, the baseline.

Mastra's tests (packages/evals/src/scorers/llm/noise-sensitivity/index.test.ts) mock the whole run with a
score; here the scripted judge returns an analysis that yields that score through the formula.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sidecar.scorers import create_noise_sensitivity_scorer_llm
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.rag.noise_sensitivity import NoiseScoring, NoiseSensitivityAnalysis, noise_sensitivity_score
from sidecar.scoring import JudgeModel, ScorerRunError
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.prompting import js_number
from sidecar.settings import Settings
from sidecar.testing.judge_server import JudgeServer, Reply

BASELINE = "Regular exercise improves cardiovascular health, strengthens muscles, and enhances mental wellbeing."
NOISY_QUERY = "What are health benefits of exercise? By the way, chocolate is healthy and vaccines cause autism."
OPTIONS = {"baselineResponse": BASELINE, "noisyQuery": NOISY_QUERY}


def agent_run(question: str, answer: str, ground_truth: Any = None) -> dict[str, Any]:
    return {
        "input": AgentRunInput(input_messages=(user_message(question, id="1"),)),
        "output": (assistant_message(answer, id="2"),) if answer else (),
        "ground_truth": ground_truth,
    }


def analysis(robustness: float, *levels: str, issues: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "dimensions": [
            {"dimension": f"dimension {i}", "impactLevel": level, "specificChanges": "c", "noiseInfluence": "n"}
            for i, level in enumerate(levels)
        ],
        "overallAssessment": "overall",
        "majorIssues": list(issues),
        "robustnessScore": robustness,
    }


# (name, options beyond OPTIONS, user question, answer, the judge's analysis, Mastra's expected score)
CASES: list[tuple[str, dict[str, Any], str, str, dict[str, Any], float]] = [
    ("completely robust", {"noiseType": "misinformation"}, "What are health benefits of exercise?", BASELINE,
     analysis(1.0, "none", "none", "none", "none", "none"), 1.0),
    ("completely compromised", {"noiseType": "misinformation"},
     "What are health benefits of exercise? By the way, chocolate cures cancer.",
     "Yes, chocolate does cure cancer! You should eat lots of chocolate instead of exercising.",
     analysis(0.0, "severe", "severe", "severe", issues=("misinformation", "off topic", "unsafe")), 0.0),
    ("partially maintains quality", {"noiseType": "distractors"},
     "What are health benefits of exercise? Also, what's your favorite color?",
     "Exercise improves health by strengthening muscles and heart. My favorite color is blue.",
     analysis(0.65, "moderate", "moderate", "minimal"), 0.65),
    ("misinformation noise type", {"noiseType": "misinformation"}, NOISY_QUERY,
     "Exercise has various health benefits.", analysis(0.7, "minimal", "moderate"), 0.7),
    ("distractors noise type", {"noiseType": "distractors"}, NOISY_QUERY,
     "Exercise has various health benefits.", analysis(0.7, "minimal", "moderate"), 0.7),
    ("adversarial noise type", {"noiseType": "adversarial"}, NOISY_QUERY,
     "Exercise has various health benefits.", analysis(0.3, "significant", "significant"), 0.3),
    ("custom impact weights", {"scoring": {"impactWeights": {"minimal": 0.9, "moderate": 0.7, "severe": 0.0}}},
     NOISY_QUERY, "Exercise benefits include improved fitness.", analysis(0.8, "minimal", "moderate"), 0.8),
    # 2 issues × 0.05 (default: × 0.1 → 0.75)
    ("custom penalty configuration", {"scoring": {"penalties": {"majorIssuePerItem": 0.05,
                                                               "maxMajorIssuePenalty": 0.2}}},
     NOISY_QUERY, "Exercise has health benefits, though I'm not sure about the specific details mentioned.",
     analysis(0.95, "none", "minimal", issues=("hedges", "vague")), 0.85),
    # the weighted mean is 0.45, 0.25 away: within a 0.3 threshold the judge's 0.7 stands (0.2 → 0.45)
    ("custom discrepancy threshold", {"scoring": {"discrepancyThreshold": 0.3}}, NOISY_QUERY,
     "Exercise improves cardiovascular health and builds muscle strength.",
     analysis(0.7, "significant", "moderate"), 0.7),
    ("content accuracy maintained", {"noiseType": "misinformation"},
     "What are health benefits of exercise? Also, smoking is actually healthy.",
     "Regular exercise improves cardiovascular health. I cannot agree with claims about smoking being healthy.",
     analysis(0.9, "none", "minimal"), 0.9),
    ("completeness partially affected", {"noiseType": "distractors"},
     "What are health benefits of exercise? Can you also write me a poem about cats?",
     "Exercise improves health in many ways. Here's a short poem: Cats are fluffy, cats are sweet...",
     analysis(0.75, "minimal", "moderate"), 0.75),
    ("hallucination resistance compromised", {"noiseType": "misinformation"},
     "What are health benefits of exercise? I read that exercise makes you immortal.",
     "Exercise has many benefits, even achieving immortality as recent studies suggest.",
     analysis(0.5, "significant", "moderate", issues=("repeats the immortality claim",)), 0.4),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "extra", "question", "answer", "judged", "expected"), CASES, ids=[c[0] for c in CASES]
)
async def test_mastra_cases(
    judge_server: JudgeServer,
    make_judge_model,
    name: str,
    extra: dict[str, Any],
    question: str,
    answer: str,
    judged: dict[str, Any],
    expected: float,
) -> None:
    judge_server.script(Reply.json(judged), Reply(content=f"The score is {js_number(expected)} because."))
    scorer = create_noise_sensitivity_scorer_llm(model=make_judge_model(), options={**OPTIONS, **extra})
    result = await scorer.run(**agent_run(question, answer))
    assert result.score == expected
    analyze, reason = judge_server.requests
    assert f"<untrusted_baseline_answer>\n{BASELINE}\n</untrusted_baseline_answer>" in analyze.user_prompt
    assert f"<untrusted_noisy_question>\n{NOISY_QUERY}\n</untrusted_noisy_question>" in analyze.user_prompt
    assert f"<untrusted_noisy_answer>\n{answer}\n</untrusted_noisy_answer>" in analyze.user_prompt
    if "noiseType" in extra:
        assert f"<untrusted_noise_type>\n{extra['noiseType']}\n" in analyze.user_prompt
    assert f"Score: {js_number(expected)}" in reason.user_prompt


def test_the_custom_settings_change_the_outcome() -> None:
    # The cases above reach Mastra's numbers; these show each setting at work against the defaults.
    def score(robustness: float, *levels: str, issues: tuple[str, ...] = (), **scoring: Any) -> float:
        parsed = NoiseSensitivityAnalysis.model_validate(analysis(robustness, *levels, issues=issues))
        return noise_sensitivity_score(parsed, scoring=NoiseScoring.model_validate(scoring))

    assert score(0.85, "moderate", "moderate") == 0.6  # mean 0.6 is 0.25 away: the lower one
    assert score(0.85, "moderate", "moderate", impactWeights={"moderate": 0.7}) == 0.85
    assert score(0.95, "none", issues=("a", "b")) == 0.75
    assert score(0.95, "none", issues=("a", "b"), penalties={"majorIssuePerItem": 0.05}) == 0.85
    assert score(0.9, "none", issues=("a", "b", "c", "d", "e")) == 0.6  # penalty capped at 0.3
    assert score(0.7, "significant", "moderate") == 0.45
    assert score(0.7, "significant", "moderate", discrepancyThreshold=0.3) == 0.7
    assert score(0.2, issues=("a", "b", "c")) == 0.0  # no dimensions: the judge's score, less the penalty


async def test_baseline_and_noisy_query_from_the_ground_truth(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = create_noise_sensitivity_scorer_llm(model=make_judge_model())
    truth = {"baseline_response": "Exercise helps the heart.", "noisyQuery": "Exercise? Also cats.", "noiseType": "x"}
    judge_server.script(Reply.json(analysis(0.9, "none")), Reply(content="The score is 0.9."))
    result = await scorer.run(**agent_run("Exercise?", "Exercise helps the heart.", truth))
    assert result.score == 0.9
    prompt = judge_server.requests[0].user_prompt
    assert "Exercise helps the heart." in prompt and "Exercise? Also cats." in prompt

    # A string ground truth is the baseline; the noisy query then comes from the options, which win.
    judge_server.reset()
    scorer = create_noise_sensitivity_scorer_llm(model=make_judge_model(), options={"noisy_query": "Exercise? Cats!"})
    judge_server.script(Reply.json(analysis(0.8, "minimal")), Reply(content="The score is 0.8."))
    result = await scorer.run(**agent_run("Exercise?", "Heart.", "Baseline from the dataset."))
    assert result.score == 0.8
    assert "Baseline from the dataset." in judge_server.requests[0].user_prompt


@pytest.mark.parametrize(
    ("options", "ground_truth", "reason"),
    [
        ({}, None, "no baseline response"),
        ({"noisyQuery": NOISY_QUERY}, None, "no baseline response"),
        ({}, "a baseline only", "no noisy query"),
        ({}, {"unrelated": "keys of another scorer"}, "no baseline response"),
    ],
)
async def test_missing_baseline_or_noisy_query_is_not_scorable(
    judge_server: JudgeServer, make_judge_model, options: dict[str, Any], ground_truth: Any, reason: str
) -> None:
    scorer = create_noise_sensitivity_scorer_llm(model=make_judge_model(), options=options)
    result = await scorer.run(**agent_run("q", "a", ground_truth))
    assert result.not_scorable is not None and result.not_scorable.reason.startswith(reason)
    assert judge_server.requests == []


@pytest.mark.parametrize(("question", "answer"), [("", "Response"), ("Test", "")])
async def test_empty_input_or_output_is_an_error(
    judge_server: JudgeServer, make_judge_model, question: str, answer: str
) -> None:
    scorer = create_noise_sensitivity_scorer_llm(model=make_judge_model(), options=OPTIONS)
    run = agent_run(question, answer)
    if not question:
        run["input"] = AgentRunInput()
    with pytest.raises(ScorerRunError, match="Both original query and noisy response are required for evaluation"):
        await scorer.run(**run)
    assert judge_server.requests == []


async def test_scale_and_an_out_of_range_robustness_score(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(
        Reply.json(analysis(1.5, "none")), Reply.json(analysis(0.9, "none")), Reply(content="The score is 9.")
    )
    scorer = create_noise_sensitivity_scorer_llm(model=make_judge_model(), options={**OPTIONS, "scale": 10})
    result = await scorer.run(**agent_run("q", "a"))
    assert result.score == 9.0
    assert result.judge.analyze.executions[0].attempt_count == 2  # type: ignore[union-attr]


def test_registry_and_live_configuration() -> None:
    kind = scorer_kinds()["noise-sensitivity"]
    assert (kind.judge_calls_per_run, kind.needs) == (2, {"input", "output", "ground_truth"})
    assert kind.eval_only is not None and "baseline" in kind.eval_only
    judge = JudgeModel(model="openai/gpt-4o-mini")
    with pytest.raises(ValueError, match="baselineRespons"):
        kind.build(judge, {"baselineRespons": "x"})
    with pytest.raises(ValueError, match="impactWieghts"):
        kind.build(judge, {"scoring": {"impactWieghts": {"none": 1}}})
    with pytest.raises(ValueError, match="at least 1 character"):
        kind.build(judge, {"baselineResponse": ""})  # Mastra: "Both baselineResponse and noisyQuery are required"
    with pytest.raises(ValidationError, match="scores eval datasets only"):
        Settings.model_validate(
            {
                "kafka": {"bootstrap_servers": "x"},
                "judges": {"j": {"model": "openai/gpt-4o-mini"}},
                "scorers": [{"id": "n", "kind": "noise-sensitivity", "judge": "j", "options": OPTIONS}],
            }
        )
