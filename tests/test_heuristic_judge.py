"""The stand-in judge (``sidecar.embedded.heuristic_judge``): its scores go the way each kind reads.

Every score here goes through the real path: the kind's scorer built from a configuration, its judge client
over HTTP to a ``JudgeServer`` answering with ``heuristic_reply``, the runs mapped from the demo's own traces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from statistics import mean
from typing import Any

import pytest
import yaml

from sidecar.app.scorer_factory import build_scorers
from sidecar.conventions import spans_to_runs
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.demo.config import demo_settings, stand_in_judge_config
from sidecar.embedded.conversations import SCRIPTS, ConversationTraffic
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import AGENTS, AgentProfile, Conversation, TrafficGenerator
from sidecar.runtime.attempt import attempt_scorer
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scoring.types import ScorerRunResult
from sidecar.settings import load_eval_settings
from sidecar.testing.judge_server import JudgeServer
from tests.support.agent_runs import agent_run
from tests.support.session_runs import session_of_turns, turn_run

QUALITIES = ("excellent", "partial", "poor")


def _demo_run(agent: AgentProfile, conversation: Conversation) -> bytes:
    """One trace of ``agent`` answering ``conversation``, as the demo's producer writes it."""
    only = AgentProfile(agent.name, agent.service, agent.system, agent.convention, (conversation,))
    return TrafficGenerator(agents=[only]).trace().request.SerializeToString()


async def _score(scorer: Any, request: ScorerRunRequest, **kwargs: Any) -> ScorerRunResult:
    attempt = await attempt_scorer(scorer, request, timeout_s=30, **kwargs)
    assert attempt.outcome == "scored", (scorer.id, attempt.error)
    assert attempt.result is not None and attempt.result.score is not None
    return attempt.result


async def test_the_stand_in_orders_the_demos_answers_good_partial_poor_for_every_kind_the_demo_runs(
    judge_server: JudgeServer,
) -> None:
    """The demo's summary must read right: for every scorer of the demo, its good answers score better on
    average than its partial ones, and those better than its poor ones (worse, for the kinds where lower is
    better: toxicity); and within each agent, its best answer beats its worst one."""
    from sidecar.ingest import decode_traces

    judge_server.reset(heuristic_reply)
    settings = demo_settings(
        bootstrap="127.0.0.1:9", judge=stand_in_judge_config(judge_server.url), metrics_host="127.0.0.1", metrics_port=0
    )
    scorers = build_scorers(settings)
    kinds = scorer_kinds()
    # The scorers of one agent run (the conversation judges are ordered by the conversations' test below).
    single_run = [s for s in settings.scorers if s.targets.scope != "session"]
    scores: dict[str, dict[tuple[str, str], float]] = {s.id: {} for s in single_run}
    for agent in AGENTS:
        for conversation in agent.conversations:
            traces = decode_traces(_demo_run(agent, conversation))
            for configured in single_run:
                runs = spans_to_runs(traces, configured.selection()).runs
                if runs:  # tool-call accuracy targets the agent that calls tools
                    result = await _score(scorers[configured.id], runs[0])
                    scores[configured.id][(agent.name, conversation.quality)] = float(result.score or 0.0)
    assert set(scores) == {"prompt-alignment", "answer-relevancy", "toxicity", "tool-call-accuracy", "completeness"}
    report = json.dumps({k: {f"{a}/{q}": s for (a, q), s in v.items()} for k, v in scores.items()}, indent=1)
    for configured in single_run:
        by_quality = scores[configured.id]
        sign = 1 if kinds[configured.kind].direction == "higher" else -1
        averages = [
            sign * mean(s for (_, q), s in by_quality.items() if q == quality)
            for quality in QUALITIES
            if any(q == quality for _, q in by_quality)
        ]
        assert len(averages) >= 2, configured.id
        assert averages == sorted(averages, reverse=True) and len(set(averages)) == len(averages), (
            f"{configured.id}: averages by quality {averages} (sign {sign}) not strictly ordered:\n{report}"
        )
        for agent in AGENTS:
            mine = [(QUALITIES.index(q), s) for (a, q), s in by_quality.items() if a == agent.name]
            if len(mine) >= 2:
                best, worst = min(mine)[1], max(mine)[1]
                assert sign * best > sign * worst, f"{configured.id} on {agent.name}:\n{report}"
    # A newcomer reads these numbers in the demo's table: relevancy of a good answer is not 0.
    assert scores["answer-relevancy"][("support-bot", "excellent")] >= 0.8, report


PASSWORD = "How do I reset my password on the account settings page"
GOOD = next(c.answer for a in AGENTS for c in a.conversations if c.user == PASSWORD)
PARTIAL = "To reset your password, open the account settings page."
POOR = "Please contact support for any billing questions, that is not my job."
CONTEXT = [
    "To reset a password, open the account settings page and choose 'Reset password'.",
    "We email a link to set a new password.",
    "Invoices are exported as PDF from the billing page.",
]
TRUTH = "Open the account settings page, choose 'Reset password' and follow the emailed link to set a new password."
SOURCE = (
    "To reset a password, open the account settings page and choose 'Reset password'. We email a link to set a "
    "new password. The link expires after 24 hours."
)


def _request(question: str, answer: str) -> ScorerRunRequest:
    run_input, output = agent_run(question, answer)
    return ScorerRunRequest(
        target=SpanTarget(trace_id="0" * 31 + "1", span_id="0" * 15 + "1"), input=run_input, output=output
    )


# kind → (options, [(label, question, answer, ground truth, context)] from best to worst)
Case = tuple[str, str, str, Any, list[str] | None]
CASES: dict[str, tuple[dict[str, Any], list[Case]]] = {
    "bias": (
        {},
        [
            ("good", PASSWORD, GOOD, None, None),
            ("poor", PASSWORD, "Boomers never manage settings pages on their own, ask someone younger.", None, None),
        ],
    ),
    "faithfulness": (
        {},
        [
            ("good", PASSWORD, GOOD, None, CONTEXT),
            ("poor", PASSWORD, "Passwords reset by themselves after 3 days.", None, CONTEXT),
        ],
    ),
    "hallucination": (
        {},
        [
            ("good", PASSWORD, GOOD, None, CONTEXT),
            ("poor", PASSWORD, "Passwords reset by themselves after 3 days.", None, CONTEXT),
        ],
    ),
    "context-precision": (
        {},
        [("good", PASSWORD, GOOD, None, CONTEXT), ("poor", PASSWORD, POOR, None, CONTEXT)],
    ),
    "context-relevance": (
        {},
        [("good", PASSWORD, GOOD, None, CONTEXT), ("poor", PASSWORD, GOOD, None, CONTEXT[2:])],
    ),
    "context-recall": (
        {},
        [("good", PASSWORD, GOOD, TRUTH, CONTEXT), ("poor", PASSWORD, GOOD, TRUTH, CONTEXT[2:])],
    ),
    "answer-similarity": (
        {},
        [
            ("good", PASSWORD, GOOD, TRUTH, None),
            ("partial", PASSWORD, PARTIAL, TRUTH, None),
            ("poor", PASSWORD, POOR, TRUTH, None),
        ],
    ),
    "summarization": (
        {},
        [
            (
                "good",
                SOURCE,
                "Open the account settings page, choose 'Reset password' and use the emailed link within 24 hours.",
                None,
                None,
            ),
            ("partial", SOURCE, "Open the account settings page and choose 'Reset password'.", None, None),
            ("poor", SOURCE, "Contact support about billing.", None, None),
        ],
    ),
    "noise-sensitivity": (
        {"baseline_response": GOOD, "noisy_query": PASSWORD + " (also, is it sunny in Rome today?)"},
        [("good", PASSWORD, GOOD, None, None), ("poor", PASSWORD, "It is sunny in Rome today.", None, None)],
    ),
    "rubric": (
        {
            "criteria": [
                {"description": "Gives numbered steps", "required": True},
                {"description": "Mentions the account settings page", "required": True},
                {"description": "Apologises for the trouble", "required": False},
            ]
        },
        [("good", PASSWORD, GOOD, None, None), ("poor", PASSWORD, POOR, None, None)],
    ),
}


def _eval_settings(judge_url: str, kind: str, options: Mapping[str, Any]) -> Any:
    config = {
        "judges": {"default": stand_in_judge_config(judge_url)},
        "scorers": [{"id": kind, "kind": kind, "judge": "default", "options": dict(options)}],
    }
    return load_eval_settings(yaml.safe_dump(config))


@pytest.mark.parametrize("kind", sorted(CASES))
async def test_the_stand_in_scores_each_judged_kind_the_way_it_reads(judge_server: JudgeServer, kind: str) -> None:
    """Beyond the demo's kinds: a better answer (or retrieval, or summary) scores better, in the kind's
    direction; a middling one lands between."""
    judge_server.reset(heuristic_reply)
    options, cases = CASES[kind]
    scorer = build_scorers(_eval_settings(judge_server.url, kind, options))[kind]
    sign = 1 if scorer_kinds()[kind].direction == "higher" else -1
    scores = []
    for label, question, answer, truth, context in cases:
        result = await _score(
            scorer,
            _request(question, answer),
            ground_truth=truth,
            request_context={"context": context} if context is not None else None,
        )
        scores.append((label, sign * float(result.score or 0.0)))
    values = [s for _, s in scores]
    assert values[0] > values[-1], scores
    assert values == sorted(values, reverse=True), scores


def test_every_judged_prebuilt_kind_is_covered_here() -> None:
    judged = {name for name, kind in scorer_kinds().items() if kind.prebuilt and kind.needs_judge}
    demo = {"prompt-alignment", "answer-relevancy", "toxicity"}
    tools = {"tool-call-accuracy-llm", "trajectory-llm"}  # scored on the demo's tool calls below
    conversations = set(CONVERSATION_ORDER)  # scored on the demo's conversations below
    custom = {"llm-judge"}  # its three output types, both directions, on the demo's traffic below
    assert judged == set(CASES) | demo | tools | conversations | custom


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("tool-call-accuracy-llm", {}),
        ("tool-call-accuracy-llm", {"available_tools": [{"id": "lookup_account", "description": "finds an account"}]}),
        ("trajectory-llm", {"expected_trajectory": ["lookup_account"]}),
        ("trajectory-llm", {}),
    ],
)
async def test_the_stand_in_judges_the_demos_tool_calls(
    judge_server: JudgeServer, kind: str, options: dict[str, Any]
) -> None:
    """The support agent looks the account up before answering how to reset a password (good), and sends an
    email when asked for invoices (poor)."""
    from sidecar.ingest import decode_traces

    judge_server.reset(heuristic_reply)
    scorer = build_scorers(_eval_settings(judge_server.url, kind, options))[kind]
    support = next(a for a in AGENTS if a.name == "support-bot")
    scores = {}
    for conversation in support.conversations:
        run = spans_to_runs(decode_traces(_demo_run(support, conversation))).runs[0]
        scores[conversation.quality] = float((await _score(scorer, run)).score or 0.0)
    assert scores["excellent"] > scores["poor"], scores


async def test_the_stand_in_grades_the_configured_rubric_as_configured(judge_server: JudgeServer) -> None:
    """The report lists the configured criteria, word for word, with their required flags, and grades them."""
    judge_server.reset(heuristic_reply)
    options, _ = CASES["rubric"]
    scorer = build_scorers(_eval_settings(judge_server.url, "rubric", options))["rubric"]
    good = await _score(scorer, _request(PASSWORD, GOOD))
    poor = await _score(scorer, _request(PASSWORD, POOR))
    assert (good.score, poor.score) == (1, 0)
    assert good.reason is not None and poor.reason is not None
    lines = good.reason.splitlines()
    assert any(line.startswith("[met] (required) Gives numbered steps: stand-in heuristic") for line in lines), lines
    assert any(line.startswith("[met] (required) Mentions the account settings page: ") for line in lines), lines
    assert any(line.startswith("[NOT met] (optional) Apologises for the trouble: ") for line in lines), lines
    assert "[NOT met] (required) Gives numbered steps" in poor.reason, poor.reason
    assert "[NOT met] (required) Mentions the account settings page" in poor.reason, poor.reason


async def test_the_stand_in_answers_a_users_own_schema_from_the_texts_it_quotes(judge_server: JudgeServer) -> None:
    """A ``python:`` scorer's step (the README's instruction-following example): a value of its schema, with
    its verdict and numbers taken from how much of the question the answer repeats."""
    from pydantic import BaseModel

    from sidecar.scoring import JudgeModel, create_scorer

    class Verdict(BaseModel):
        follows_instructions: bool
        confidence: float

    judge_server.reset(heuristic_reply)
    scorer = (
        create_scorer(
            id="instruction-following",
            judge={"model": JudgeModel(model="openai/stand-in", api_base=judge_server.url, api_key="k")},
        )
        .analyze(
            description="Does the answer follow the instructions?",
            create_prompt=lambda ctx: f"Question: {ctx.run.input}\nAnswer: {ctx.run.output}",
            output_schema=Verdict,
        )
        .generate_score(lambda ctx: ctx.results.analyze_step_result.confidence)
    )
    good = await scorer.run(
        input="Name three museums in Paris", output="Three museums in Paris: the Louvre, Orsay, Pompidou"
    )
    poor = await scorer.run(input="Name three museums in Paris", output="Have a nice trip!")
    assert good.score is not None and poor.score is not None and good.score > poor.score


# -- a judge written in YAML (llm-judge) ---------------------------------------------------------------------------
# (output type, better) → the judge's output and instructions. The categories are declared out of order: the
# judge is told them from best to worst by their scores and ``better``, which is what the stand-in reads.
LLM_JUDGES: dict[tuple[str, str], tuple[dict[str, Any], str]] = {
    ("number", "higher"): ({"type": "number", "min": 1, "max": 5}, "Rate how well the answer serves the request."),
    ("number", "lower"): (
        {"type": "number", "min": 0, "max": 10},
        "Rate how badly the answer fails the request: 0 not at all, 10 entirely.",
    ),
    ("boolean", "higher"): ({"type": "boolean"}, "Pass when the answer serves the request."),
    ("boolean", "lower"): ({"type": "boolean"}, "Answer true when the answer fails the request."),
    ("categories", "higher"): (
        {"type": "categories", "labels": {"borderline": 0.5, "violation": 0, "compliant": 1}},
        "Judge the answer against the support policy.",
    ),
    ("categories", "lower"): (
        {"type": "categories", "labels": {"minor": 0.5, "none": 0, "severe": 1}},
        "How severe is the answer's failure to serve the request?",
    ),
}


def _llm_judge_settings(judge_url: str, output: dict[str, Any], instructions: str, better: str, **extra: Any) -> Any:
    options = {
        "instructions": instructions,
        "prompt": "The user asked:\n{{ input }}\n\nThe agent answered:\n{{ output }}",
        "output": output,
        "better": better,
    }
    scorer = {"id": "custom", "kind": "llm-judge", "judge": "default", "options": options, **extra}
    config = {"judges": {"default": stand_in_judge_config(judge_url)}, "scorers": [scorer]}
    return load_eval_settings(yaml.safe_dump(config))


@pytest.mark.parametrize(("output_type", "better"), sorted(LLM_JUDGES))
async def test_the_stand_in_orders_the_demos_answers_for_a_judge_written_in_yaml(
    judge_server: JudgeServer, output_type: str, better: str
) -> None:
    """A custom judge of each output type, higher or lower better: on the demo's traffic, good answers score
    better on average than partial ones and those better than poor ones, in the judge's direction, and each
    agent's best answer beats its worst; the reason says it is the stand-in and which words decided."""
    from sidecar.ingest import decode_traces

    judge_server.reset(heuristic_reply)
    output, instructions = LLM_JUDGES[output_type, better]
    scorer = build_scorers(_llm_judge_settings(judge_server.url, output, instructions, better))["custom"]
    sign = 1 if better == "higher" else -1
    scores: dict[tuple[str, str], float] = {}
    labels: dict[tuple[str, str], str | None] = {}
    for agent in AGENTS:
        for conversation in agent.conversations:
            [run, *_] = spans_to_runs(decode_traces(_demo_run(agent, conversation))).runs
            result = await _score(scorer, run)
            assert result.reason is not None and result.reason.startswith(
                "stand-in heuristic (word rules, not a language model): the answer repeats"
            ), result.reason
            scores[agent.name, conversation.quality] = float(result.score or 0.0)
            labels[agent.name, conversation.quality] = result.label
    report = json.dumps({f"{a}/{q}": (s, labels[a, q]) for (a, q), s in scores.items()}, indent=1)
    averages = [sign * mean(s for (_, q), s in scores.items() if q == quality) for quality in QUALITIES]
    assert averages == sorted(averages, reverse=True) and len(set(averages)) == 3, f"{averages}:\n{report}"
    for agent in AGENTS:
        mine = sorted((QUALITIES.index(q), s) for (a, q), s in scores.items() if a == agent.name)
        assert sign * mine[0][1] > sign * mine[-1][1], f"{agent.name}:\n{report}"
    # The demo's excellent password-reset answer gets the judge's best verdict, its rude refusal the worst.
    best, worst = (1.0, 0.0) if better == "higher" else (0.0, 1.0)
    assert scores["support-bot", "excellent"] == best and scores["support-bot", "poor"] == worst, report
    if output_type == "categories":
        ranked = sorted(output["labels"], key=output["labels"].__getitem__, reverse=better == "higher")
        assert labels["support-bot", "excellent"] == ranked[0] and labels["support-bot", "poor"] == ranked[-1]


# -- the conversation judges ---------------------------------------------------------------------------------------
# kind → the moods of the demo's conversations (sidecar.embedded.conversations) from best to worst that its
# verdicts tell apart; no troubled conversation scores better than a calm one for any kind.
CONVERSATION_ORDER: dict[str, tuple[str, ...]] = {
    "user-frustration": ("calm", "recovered", "frustrated"),
    "conversation-completeness": ("calm", "recovered", "frustrated"),
    "knowledge-retention": ("calm", "recovered"),  # only the recovered agents ask again what the user wrote
    "role-adherence": ("calm", "frustrated"),  # only the frustrated agents turn rude
}


async def test_the_stand_in_orders_the_demos_conversations_for_every_conversation_judge(
    judge_server: JudgeServer,
) -> None:
    """The demo's conversation judges (its own configuration), and a judge written in YAML over
    ``{{ conversation }}``, on each of the demo's conversations: calm ones score best, frustrated ones worst, in
    each kind's direction."""
    from sidecar.demo.config import conversation_scorers

    judge_server.reset(heuristic_reply)
    custom = {
        "id": "llm-judge",
        "kind": "llm-judge",
        "judge": "default",
        "targets": {"scope": "session"},
        "options": {
            "instructions": "Rate how well the agent served the user over the conversation.",
            "prompt": "{{ conversation }}",
            "output": {"type": "number", "min": 1, "max": 5},
        },
    }
    config = {
        "judges": {"default": stand_in_judge_config(judge_server.url)},
        "scorers": [*conversation_scorers(), custom],
    }
    settings = load_eval_settings(yaml.safe_dump(config))
    scorers = build_scorers(settings)
    kinds = scorer_kinds()
    order = {**CONVERSATION_ORDER, "llm-judge": ("calm", "recovered", "frustrated")}
    scores: dict[str, dict[str, list[float]]] = {s.id: {} for s in settings.scorers}
    for script in SCRIPTS:
        [turns] = ConversationTraffic(scripts=[script]).conversations(1)
        session = session_of_turns(
            [turn_run(t.request.SerializeToString()) for t in turns], turns[0].conversation_id or ""
        )
        for configured in settings.scorers:
            result = await _score(scorers[configured.id], session)
            scores[configured.id].setdefault(script.mood, []).append(float(result.score or 0.0))
    report = json.dumps(scores, indent=1)
    assert set(scores) == set(order)
    for configured in settings.scorers:
        sign = 1 if kinds[configured.kind].direction == "higher" else -1
        by_mood = {mood: sign * mean(values) for mood, values in scores[configured.id].items()}
        ordered = [by_mood[mood] for mood in order[configured.id]]
        assert ordered == sorted(ordered, reverse=True) and len(set(ordered)) == len(ordered), (
            f"{configured.id}: {order[configured.id]} {ordered}\n{report}"
        )
        assert all(value <= by_mood["calm"] for value in by_mood.values()), f"{configured.id}:\n{report}"
