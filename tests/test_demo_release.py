"""The demo's release (sidecar.embedded.traffic.DEMO_ROLLOUT): support-bot 3.2.0 beside 3.1.0, worse on tool-call
accuracy only as the stand-in judge scores it, and declared a regression within the first minutes of the demo's
traffic by the comparison the service keeps (docs/versions.md)."""

from __future__ import annotations

from typing import Any

from sidecar.app.scorer_factory import build_scorers
from sidecar.conventions import spans_to_runs
from sidecar.demo.config import demo_settings, stand_in_judge_config
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import AGENTS, DEMO_ROLLOUT, AgentProfile, TrafficGenerator
from sidecar.ingest import decode_traces
from sidecar.runtime.attempt import attempt_scorer
from sidecar.testing.judge_server import JudgeServer
from sidecar.versions.comparison import Observation, VersionComparisons

SCORERS = ("prompt-alignment", "answer-relevancy", "toxicity", "completeness", "tool-call-accuracy")
DEMO_RATE = 5.0  # traces per second, a third of them conversation turns (sidecar.demo)
LOWER_IS_BETTER = {"toxicity"}


async def scores_of_each_answer(judge_server: JudgeServer) -> dict[tuple[str, str], dict[str, float]]:
    """(version, quality) → scorer → score: each of support-bot's answers in each version, scored once by the demo's
    scorers through the stand-in judge (its answers are deterministic)."""
    judge_server.reset(heuristic_reply)
    settings = demo_settings(
        bootstrap="127.0.0.1:9", judge=stand_in_judge_config(judge_server.url), metrics_host="127.0.0.1", metrics_port=0
    )
    scorers = build_scorers(settings)
    bot = next(a for a in AGENTS if a.name == DEMO_ROLLOUT.agent)
    found: dict[tuple[str, str], dict[str, float]] = {}
    for profile in (bot, DEMO_ROLLOUT.profile_of(bot)):
        for conversation in profile.conversations:
            only = AgentProfile(
                profile.name, profile.service, profile.system, profile.convention, (conversation,), profile.version
            )
            record = TrafficGenerator(agents=[only]).trace().request.SerializeToString()
            (run,) = spans_to_runs(decode_traces(record, "otlp_proto")).runs
            assert run.target.version == profile.version
            row: dict[str, float] = {}
            for scorer in SCORERS:
                attempt = await attempt_scorer(scorers[scorer], run, timeout_s=30)
                assert attempt.result is not None and attempt.result.score is not None, (scorer, attempt.error)
                row[scorer] = attempt.result.score
            found[(str(profile.version), conversation.quality)] = row
    return found


async def test_the_release_is_worse_on_tool_call_accuracy_only(judge_server: JudgeServer) -> None:
    scores = await scores_of_each_answer(judge_server)
    first, release = next(a for a in AGENTS if a.name == DEMO_ROLLOUT.agent).version, DEMO_ROLLOUT.version
    for quality in ("excellent", "poor"):
        before, after = scores[(str(first), quality)], scores[(release, quality)]
        differs = {s for s in SCORERS if before[s] != after[s]}
        assert differs == ({"tool-call-accuracy"} if quality == "excellent" else set()), (quality, before, after)
    assert (
        scores[(release, "excellent")]["tool-call-accuracy"] < scores[(str(first), "excellent")]["tool-call-accuracy"]
    )


async def test_the_demo_traffic_declares_it_within_minutes(judge_server: JudgeServer) -> None:
    scores = await scores_of_each_answer(judge_server)
    comparisons = VersionComparisons()
    declared_at: dict[str, float] = {}
    seconds_per_trace = 1 / DEMO_RATE * 3 / 2  # two traces of three come from the generator
    for i, trace in enumerate(TrafficGenerator(seed=7, rollout=DEMO_ROLLOUT).traces(3000)):
        if trace.agent != DEMO_ROLLOUT.agent:
            continue
        at_s = i * seconds_per_trace
        for scorer in SCORERS:
            score = scores[(str(trace.version), trace.quality)][scorer]
            higher = scorer not in LOWER_IS_BETTER
            comparisons.observe(Observation(trace.agent, scorer, str(trace.version), score, int(at_s * 1000), higher))
        for view in comparisons.comparisons():
            if view.verdict == -1:
                declared_at.setdefault(view.scorer, at_s)
    verdicts: dict[str, Any] = {view.scorer: view.verdict for view in comparisons.comparisons()}
    assert verdicts == {**dict.fromkeys(SCORERS, 0), "tool-call-accuracy": -1}
    assert set(declared_at) == {"tool-call-accuracy"}
    print(f"the demo's release is declared worse on tool-call-accuracy after {declared_at['tool-call-accuracy']:.0f} s")
    assert declared_at["tool-call-accuracy"] < 5 * 60  # the first minutes of `scoring-sidecar demo`
