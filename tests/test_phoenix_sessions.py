"""Session scores as Phoenix session annotations, against a real Phoenix (tests/support/phoenix.py): the demo's
conversations reach Phoenix over OTLP with their conversation ids (``session.id`` on OpenInference spans,
``gen_ai.conversation.id`` on GenAI agent spans, which Phoenix files as the session id too), the runs of their
windows are scored, and the Phoenix exporter writes each score to ``/v1/session_annotations`` (a span run in the
same batch still to ``/v1/span_annotations``); everything is read back through Phoenix's REST API."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from exporters.phoenix import PhoenixAnnotationSink, session_annotation
from sidecar.core import ScoredRun
from sidecar.core.runs import ScorerRunRequest
from sidecar.embedded.conversations import ConversationTraffic
from sidecar.embedded.traffic import GeneratedTrace
from sidecar.scoring import LabelledScore, Scorer, create_scorer
from tests.support.phoenix import PhoenixServer, with_project
from tests.support.runs import scored_run_of
from tests.support.session_runs import session_of_turns, turn_run

SinkFactory = Callable[..., PhoenixAnnotationSink]


def frustration_like(score: float = 1.0, label: str = "unresolved") -> Scorer:
    """A code scorer standing for a session judge: what it scores does not matter to the exporter."""
    return (
        create_scorer(id="user-frustration", name="User frustration")
        .generate_score(lambda ctx: LabelledScore(score, label))
        .generate_reason(lambda ctx: "The user became frustrated in turn 2 and was still frustrated at the end.")
    )


def span_scorer() -> Scorer:
    return create_scorer(id="length", name="Length").generate_score(lambda ctx: 0.5)


@pytest.fixture
async def make_sink(phoenix: PhoenixServer) -> AsyncIterator[SinkFactory]:
    sinks: list[PhoenixAnnotationSink] = []

    def make(**kwargs: Any) -> PhoenixAnnotationSink:
        options: dict[str, Any] = {"timeout_s": 5, "backoff_base_s": 0.05, "backoff_max_s": 0.5}
        options.update(kwargs)
        sink = PhoenixAnnotationSink(phoenix.url, **options)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        await sink.close()


def conversations(seed: int, count: int) -> list[list[GeneratedTrace]]:
    return list(ConversationTraffic(seed=seed, noise_spans=0).conversations(count))


async def send(phoenix: PhoenixServer, project: str, turns: list[GeneratedTrace]) -> None:
    for turn in turns:
        await phoenix.send_traces(with_project(turn.request, project))


def session_run_of(turns: list[GeneratedTrace]) -> ScorerRunRequest:
    return session_of_turns([turn_run(t.request.SerializeToString()) for t in turns], turns[0].conversation_id or "")


async def wait_for_sessions(phoenix: PhoenixServer, project: str, expected: int, timeout_s: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if len(await phoenix.sessions(project)) >= expected:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"fewer than {expected} sessions in Phoenix project {project!r}")


async def test_session_scores_land_as_session_annotations_of_the_conversation_id(
    phoenix: PhoenixServer, make_sink: SinkFactory
) -> None:
    project = f"sessions-{uuid.uuid4().hex[:8]}"
    chats = conversations(seed=21, count=6)
    conventions = {turn.agent for chat in chats for turn in chat}
    assert {"support-bot", "travel-agent"} <= conventions  # GenAI and OpenInference conversations both
    for chat in chats:
        await send(phoenix, project, chat)
    await wait_for_sessions(phoenix, project, len(chats))
    filed = {row["session_id"] for row in await phoenix.sessions(project)}
    assert filed == {chat[0].conversation_id for chat in chats}  # Phoenix files each turn under its conversation

    sessions = [session_run_of(chat) for chat in chats]
    runs = [await scored_run_of(frustration_like(), request, agent_label=chats[0][0].agent) for request in sessions]
    # A span run in the same batch goes to the span annotations, the session runs to the session annotations.
    last_turn = chats[0][-1]
    span_request = turn_run(last_turn.request.SerializeToString())
    span_run = await scored_run_of(span_scorer(), span_request, agent_label=last_turn.agent)
    sink = make_sink(annotator_kinds={"user-frustration": "LLM", "length": "CODE"}, batch_size=16)
    await sink.start()
    for run in [*runs, span_run]:
        await sink.submit(run)
    assert await sink.flush(30) is True
    assert sink.stored == len(runs) + 1

    rows = await phoenix.session_annotations(project, [chat[0].conversation_id or "" for chat in chats])
    by_session = {row["session_id"]: row for row in rows}
    assert len(rows) == len(chats) == len(by_session)
    for chat, run in zip(chats, runs, strict=True):
        row = by_session[chat[0].conversation_id]
        assert (row["name"], row["annotator_kind"], row["identifier"]) == ("user-frustration", "LLM", run.score_id)
        assert row["result"] == {
            "label": "unresolved",
            "score": 1.0,
            "explanation": "The user became frustrated in turn 2 and was still frustrated at the end.",
        }
        metadata = row["metadata"]
        assert metadata["score_id"] == run.score_id and metadata["conversation_id"] == chat[0].conversation_id
        assert metadata["turns"] == len(chat) and metadata["turn_trace_ids"] == [t.trace_id for t in chat]
        assert metadata["last_turn_span_id"] == chat[-1].agent_span_id and metadata["close_reason"] == "idle"
    [span_row] = await phoenix.span_annotations(project, [last_turn.agent_span_id])
    assert (span_row["name"], span_row["identifier"]) == ("length", span_run.score_id)

    # Redelivered (the same score ids, a window rebuilt after a restart): updated in place, never a second one.
    again = [await scored_run_of(frustration_like(0.5, "resolved"), r, agent_label="x") for r in sessions]
    assert [r.score_id for r in again] == [r.score_id for r in runs]
    for run in again:
        await sink.submit(run)
    assert await sink.flush(30) is True
    rows = await phoenix.session_annotations(project, [chat[0].conversation_id or "" for chat in chats])
    assert len(rows) == len(chats) and {row["result"]["label"] for row in rows} == {"resolved"}


async def test_a_session_annotation_waits_for_its_conversation_to_reach_phoenix(
    phoenix: PhoenixServer, make_sink: SinkFactory
) -> None:
    project = f"late-{uuid.uuid4().hex[:8]}"
    [chat] = conversations(seed=22, count=1)
    run: ScoredRun = await scored_run_of(frustration_like(), session_run_of(chat), agent_label=chat[0].agent)
    sink = make_sink(span_wait_s=60)
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(1.5) is False  # Phoenix has no such session yet: the annotation waits, unconfirmed
    assert sink.waiting_for_spans == 1 and sink.dropped["span_not_found"] == 0
    await send(phoenix, project, chat)
    await wait_for_sessions(phoenix, project, 1)
    assert await sink.flush(30) is True
    [row] = await phoenix.session_annotations(project, [chat[0].conversation_id or ""])
    assert row["identifier"] == run.score_id


async def test_a_run_that_is_not_a_sessions_has_no_session_annotation() -> None:
    [chat] = conversations(seed=23, count=1)
    span_run = await scored_run_of(span_scorer(), turn_run(chat[0].request.SerializeToString()), agent_label="x")
    assert session_annotation(span_run) is None
