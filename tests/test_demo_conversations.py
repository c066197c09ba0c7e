"""The demo's multi-turn conversations: each turn a trace carrying its conversation id as its convention puts it
(``gen_ai.conversation.id`` on a GenAI agent span, ``session.id`` on every span of an OpenInference trace),
turns in order and interleaved across open conversations; and the stand-in judge, through the real judge client,
scoring the frustrated conversations worse than the calm ones."""

from __future__ import annotations

import itertools
from collections import defaultdict
from statistics import mean
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from sidecar.embedded.conversations import MOODS, SCRIPTS, ConversationTraffic
from sidecar.embedded.heuristic_judge import STAND_IN_MODEL, heuristic_reply
from sidecar.embedded.traffic import AGENTS
from sidecar.ingest import decode_traces
from sidecar.scorers import (
    create_conversation_completeness_scorer,
    create_knowledge_retention_scorer,
    create_user_frustration_scorer,
)
from sidecar.scoring import JudgeModel
from sidecar.settings import load_settings
from sidecar.testing.judge_server import JudgeServer
from tests.support.session_runs import session_of_turns, turn_run


def attributes(span: Any) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in span.attributes}


def test_each_turn_is_a_trace_that_carries_its_conversation_id_as_its_convention_puts_it() -> None:
    conventions = {agent.name: agent.convention for agent in AGENTS}
    seen: set[str] = set()
    for conversation in ConversationTraffic(seed=3).conversations(12):
        ids = {turn.conversation_id for turn in conversation}
        assert len(ids) == 1 and None not in ids
        assert [turn.turn for turn in conversation] == list(range(1, len(conversation) + 1))
        assert len({turn.trace_id for turn in conversation}) == len(conversation)  # one trace per turn
        for turn in conversation:
            spans = [s for r in decode_traces(turn.request.SerializeToString()).resource_spans
                     for ss in r.scope_spans for s in ss.spans]  # fmt: skip
            agent = next(s for s in spans if s.span_id.hex() == turn.agent_span_id)
            if conventions[turn.agent] == "genai":
                seen.add("genai")
                assert attributes(agent)["gen_ai.conversation.id"] == turn.conversation_id
                assert all("session.id" not in attributes(s) for s in spans)
            else:
                seen.add("openinference")
                assert {attributes(s).get("session.id") for s in spans} == {turn.conversation_id}
    assert seen == {"genai", "openinference"}


def test_open_conversations_interleave_their_turns_and_each_runs_to_its_end() -> None:
    traffic = ConversationTraffic(seed=5, open_conversations=3)
    turns = [traffic.turn() for _ in range(60)]
    by_conversation: dict[str, list[int]] = defaultdict(list)
    for turn in turns:
        assert turn.conversation_id is not None
        by_conversation[turn.conversation_id].append(turn.turn)
    assert all(numbers == list(range(1, len(numbers) + 1)) for numbers in by_conversation.values())
    switches = sum(1 for a, b in itertools.pairwise(turns) if a.conversation_id != b.conversation_id)
    assert switches > len(turns) / 3  # interleaved, as concurrent users send them
    lengths = {(s.agent, s.mood): len(s.turns) for s in SCRIPTS}
    last_turns = [t for t in turns if t.turn == lengths[t.agent, t.mood or ""]]
    assert len(last_turns) >= 10  # conversations run to their end, and new ones start
    assert {t.mood for t in turns} == set(MOODS)


@pytest.fixture
async def stand_in() -> Any:
    server = await JudgeServer(heuristic_reply, record=False).start()
    yield server
    await server.stop()


async def test_the_stand_in_judge_scores_frustrated_conversations_worse(stand_in: JudgeServer) -> None:
    model = JudgeModel(model=STAND_IN_MODEL, api_base=stand_in.url, api_key=SecretStr("stand-in"), transport="http")
    frustration = create_user_frustration_scorer(model=model)
    completeness = create_conversation_completeness_scorer(model=model)
    retention = create_knowledge_retention_scorer(model=model)
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for conversation in ConversationTraffic(seed=11).conversations(30):
        session = session_of_turns(
            [turn_run(turn.request.SerializeToString()) for turn in conversation], conversation[0].conversation_id or ""
        )
        mood = conversation[0].mood or ""
        for name, scorer in (("frustration", frustration), ("completeness", completeness), ("retention", retention)):
            result = await scorer.run(input=session.input, output=session.output)
            assert result.score is not None, (name, result)
            scores[name][mood].append(result.score)
    assert set(scores["frustration"]) == set(MOODS)
    # Lower is better for frustration: calm none (0), recovered resolved (0.5), frustrated unresolved (1).
    assert mean(scores["frustration"]["calm"]) < mean(scores["frustration"]["recovered"])
    assert mean(scores["frustration"]["recovered"]) < mean(scores["frustration"]["frustrated"])
    assert set(scores["frustration"]["frustrated"]) == {1.0} and set(scores["frustration"]["calm"]) == {0.0}
    assert mean(scores["completeness"]["calm"]) > mean(scores["completeness"]["frustrated"])
    assert mean(scores["retention"]["calm"]) >= mean(scores["retention"]["recovered"])


def test_the_demos_conversation_judges_validate_at_scope_session() -> None:
    from sidecar.demo.config import conversation_scorers, demo_config

    config = demo_config(bootstrap="127.0.0.1:9092", judge={"model": STAND_IN_MODEL}, metrics_host="127.0.0.1",
                         metrics_port=0)  # fmt: skip
    assert all(scorer in config["scorers"] for scorer in conversation_scorers())  # the demo runs them
    settings = load_settings(yaml.safe_dump(config), environ={})
    session = [s for s in settings.scorers if s.targets.scope == "session"]
    assert {s.kind for s in session} == {
        "conversation-completeness", "user-frustration", "knowledge-retention", "role-adherence"
    }  # fmt: skip
