"""The Phoenix annotation sink against a real Phoenix server on loopback (tests/support/phoenix.py): scores
written as span annotations and read back through Phoenix's REST API; redelivery, late and missing spans,
faults in front of Phoenix (429, 503, 401), rejected annotations, a wrong URL, backpressure."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr

from exporters.phoenix import PhoenixAnnotationSink, span_annotation
from exporters.score_facts import judge_facts
from sidecar.core import ScoredRun, Sink
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.scoring import JudgeModel, Scorer, create_scorer
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY
from tests.support.phoenix import FaultyFront, PhoenixServer, with_project
from tests.support.runs import scored_run_of

REASON = "The score is 0.75 because the answer addresses the question."


def code_scorer(scorer_id: str = "length", score: float = 0.5) -> Scorer:
    return (
        create_scorer(id=scorer_id, name=scorer_id.title())
        .generate_score(lambda ctx: score)
        .generate_reason(lambda ctx: f"{scorer_id} is {ctx.score}")
    )


def judged_scorer(judge_server: JudgeServer) -> Scorer:
    model = JudgeModel(
        model="openai/gpt-4o-mini",
        api_base=judge_server.url,
        api_key=SecretStr(SECRET_KEY),
        transport="http",
        timeout_s=2.0,
        max_retries=0,
    )
    return (
        create_scorer(id="helpfulness", name="Helpfulness", judge={"model": model, "instructions": "Judge."})
        .generate_score(lambda ctx: 0.75)
        .generate_reason(description="explain", create_prompt=lambda ctx: f"Explain the score {ctx.score}.")
    )


def request_for(trace: GeneratedTrace | tuple[str, str]) -> ScorerRunRequest:
    trace_id, span_id = (trace.trace_id, trace.agent_span_id) if isinstance(trace, GeneratedTrace) else trace
    return ScorerRunRequest(
        target=SpanTarget(trace_id=trace_id, span_id=span_id, agent_name="support"),
        input=AgentRunInput(input_messages=(user_message("How do I reset my password?"),)),
        output=(assistant_message("Open Settings, then Reset password."),),
    )


async def scored(scorer: Scorer, trace: GeneratedTrace | tuple[str, str]) -> ScoredRun:
    return await scored_run_of(scorer, request_for(trace), agent_label="support")


class Dropped(ServiceObserver):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    def exporter_dropped(self, name: str, reason: str, n: int = 1) -> None:
        self.events.append((name, reason, n))


SinkFactory = Callable[..., PhoenixAnnotationSink]


@pytest.fixture
async def make_sink(phoenix: PhoenixServer) -> AsyncIterator[SinkFactory]:
    sinks: list[PhoenixAnnotationSink] = []

    def make(base_url: str | None = None, **kwargs: Any) -> PhoenixAnnotationSink:
        options: dict[str, Any] = {"timeout_s": 5, "backoff_base_s": 0.05, "backoff_max_s": 0.5}
        options.update(kwargs)
        sink = PhoenixAnnotationSink(base_url or phoenix.url, **options)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        await sink.close()


async def traces_in_phoenix(phoenix: PhoenixServer, count: int, *, seed: int) -> tuple[str, list[GeneratedTrace]]:
    """``count`` agent traces sent to Phoenix (a project of their own) and stored there."""
    project = f"sink-{uuid.uuid4().hex[:8]}"
    traces = list(TrafficGenerator(seed=seed, noise_spans=0).traces(count))
    for trace in traces:
        await phoenix.send_traces(with_project(trace.request, project))
    await phoenix.wait_for_spans(project, 2 * count)  # the HTTP span and the agent span of each
    return project, traces


async def annotations_by_span(phoenix: PhoenixServer, project: str, traces: list[GeneratedTrace]) -> dict[str, Any]:
    rows = await phoenix.span_annotations(project, [t.agent_span_id for t in traces])
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["span_id"], []).append(row)
    return out


# --- the format -------------------------------------------------------------------------------------------


async def test_span_annotation_is_phoenixs_annotation_of_the_scored_span() -> None:
    run = await scored(code_scorer("length", 0.5), ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"))
    body = span_annotation(run, "CODE")
    assert body == {
        "span_id": "00f067aa0ba902b7",
        "name": "length",
        "annotator_kind": "CODE",
        "identifier": run.score_id,
        "result": {"score": 0.5, "explanation": "length is 0.5"},
        "metadata": {
            "score_id": run.score_id,
            "scorer_id": "length",
            "scorer_name": "Length",
            "scorer_fingerprint": run.scorer_fingerprint,
            "run_id": run.result.run_id if run.result else None,
            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "agent_name": "support",
            "source": "scoring-sidecar",
            "sidecar_version": body["metadata"]["sidecar_version"] if body else None,
        },
    }
    failing = await scored(create_scorer(id="boom").generate_score(lambda ctx: 1 / 0), ("1" * 32, "2" * 16))
    assert failing.outcome == "failed" and span_annotation(failing) is None  # failures are not annotations


async def test_a_judged_annotation_carries_the_judge_facts_every_destination_reads(judge_server: JudgeServer) -> None:
    judge_server.reset(lambda body: Reply(content=REASON, usage={"prompt_tokens": 80, "completion_tokens": 20}))
    run = await scored(judged_scorer(judge_server), ("1" * 32, "2" * 16))
    body = span_annotation(run)
    facts = judge_facts(run)
    assert body is not None and facts is not None and body["annotator_kind"] == "LLM"
    metadata = body["metadata"]
    assert (metadata["judge_model"], metadata["judge_calls"]) == (facts.model, facts.calls) == ("openai/gpt-4o-mini", 1)
    assert (metadata["judge_input_tokens"], metadata["judge_output_tokens"]) == (80, 20)
    assert metadata.get("judge_estimated_cost_usd") == facts.estimated_cost_usd
    assert metadata.get("judge_cost_usd") == facts.cost_usd  # absent when the judge reported no cost


async def test_the_sink_implements_the_protocol(make_sink: SinkFactory) -> None:
    sink = make_sink(api_key=SECRET_KEY)
    assert isinstance(sink, Sink) and sink.name == "phoenix"
    assert SECRET_KEY not in repr(sink)


# --- against Phoenix ----------------------------------------------------------------------------------------


async def test_scored_runs_become_annotations_and_a_redelivery_updates_them(
    phoenix: PhoenixServer, make_sink: SinkFactory, judge_server: JudgeServer
) -> None:
    project, traces = await traces_in_phoenix(phoenix, 3, seed=31)
    judge_server.reset(lambda body: Reply(content=REASON, usage={"prompt_tokens": 80, "completion_tokens": 20}))
    code, judged = code_scorer("length", 0.5), judged_scorer(judge_server)
    runs = [await scored(scorer, trace) for trace in traces for scorer in (code, judged)]
    assert all(r.outcome == "scored" for r in runs)

    sink = make_sink(annotator_kinds={"length": "CODE", "helpfulness": "LLM"}, batch_size=4)
    await sink.start()
    for run in runs:
        await sink.submit(run)
    assert await sink.flush(30) is True
    assert sink.outstanding == 0 and sink.stored == 6

    by_span = await annotations_by_span(phoenix, project, traces)
    for trace in traces:
        rows = {row["name"]: row for row in by_span[trace.agent_span_id]}
        assert set(rows) == {"length", "helpfulness"}
        assert rows["length"]["annotator_kind"] == "CODE"
        assert rows["length"]["result"] == {"label": None, "score": 0.5, "explanation": "length is 0.5"}
        helpful = rows["helpfulness"]
        assert helpful["annotator_kind"] == "LLM"
        assert helpful["result"]["score"] == 0.75 and helpful["result"]["explanation"] == REASON
        assert helpful["metadata"]["judge_model"] == "openai/gpt-4o-mini"
        assert (helpful["metadata"]["judge_input_tokens"], helpful["metadata"]["judge_output_tokens"]) == (80, 20)
        assert "judge_estimated_cost_usd" in helpful["metadata"]
        for row in rows.values():
            assert row["identifier"] == row["metadata"]["score_id"]
            assert row["metadata"]["trace_id"] == trace.trace_id

    # Redelivered (the same score ids), with a new reason: updated in place, never a second annotation.
    second = Reply(content="Second opinion.", usage={"prompt_tokens": 8, "completion_tokens": 2})
    judge_server.reset(lambda body: second)
    again = [await scored(judged, trace) for trace in traces]
    assert {r.score_id for r in again} <= {r.score_id for r in runs}
    for run in again:
        await sink.submit(run)
    assert await sink.flush(30) is True
    by_span = await annotations_by_span(phoenix, project, traces)
    for trace in traces:
        names = sorted(row["name"] for row in by_span[trace.agent_span_id])
        assert names == ["helpfulness", "length"]
        [helpful] = [row for row in by_span[trace.agent_span_id] if row["name"] == "helpfulness"]
        assert helpful["result"]["explanation"] == "Second opinion."


async def test_an_annotation_waits_for_its_span_and_lands_once_the_trace_arrives(
    phoenix: PhoenixServer, make_sink: SinkFactory
) -> None:
    """The score comes first, the trace reaches Phoenix later: Phoenix answers 404 naming the span; the
    annotation waits (unconfirmed: nothing committed past it) and is stored once the span is there. Its
    batch-mates with known spans are stored at once."""
    project, known = await traces_in_phoenix(phoenix, 1, seed=32)
    [late] = TrafficGenerator(seed=33, noise_spans=0).traces(1)
    sink = make_sink(batch_size=10)
    await sink.start()
    await sink.submit(await scored(code_scorer(), late))
    await sink.submit(await scored(code_scorer(), known[0]))
    assert await sink.flush(1.5) is False
    assert sink.outstanding == 1 and sink.waiting_for_spans == 1
    assert len((await annotations_by_span(phoenix, project, known))[known[0].agent_span_id]) == 1

    await phoenix.send_traces(with_project(late.request, project))
    assert await sink.flush(30) is True
    assert sink.outstanding == 0 and sink.dropped == {"rejected": 0, "span_not_found": 0}
    [row] = (await annotations_by_span(phoenix, project, [late]))[late.agent_span_id]
    assert row["name"] == "length" and row["result"]["score"] == 0.5


async def test_a_span_that_never_reaches_phoenix_is_given_up_loudly_after_span_wait_s(
    phoenix: PhoenixServer, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    observer = Dropped()
    sink = make_sink(span_wait_s=1.0, observer=observer)
    await sink.start()
    run = await scored(code_scorer(), ("a" * 32, "b" * 16))
    with caplog.at_level(logging.ERROR, logger="exporters.phoenix"):
        await sink.submit(run)
        assert await sink.flush(3) is False  # waited, then given up: a drop fails the flush that sees it
    assert sink.outstanding == 0 and sink.dropped["span_not_found"] == 1
    assert observer.events == [("phoenix", "span_not_found", 1)]
    assert await sink.flush(1) is True  # the next checkpoint commits
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert run.score_id in line and "b" * 16 in line and "span_wait_s" in line


async def test_429_and_503_are_retried_with_backoff_and_401_blocks_and_says_so(
    phoenix: PhoenixServer, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    project, traces = await traces_in_phoenix(phoenix, 2, seed=34)
    front = await FaultyFront(phoenix.url).start()
    try:
        front.faults = [(429, {"Retry-After": "1"}), (503, {})]
        sink = make_sink(front.url, api_key=SECRET_KEY)
        await sink.start()
        with caplog.at_level(logging.INFO, logger="exporters.phoenix"):
            await sink.submit(await scored(code_scorer(), traces[0]))
            assert await sink.flush(10) is False  # 429: kept; Retry-After holds it even across a flush
            assert await sink.flush(10) is False  # 503, after the Retry-After second
            assert await sink.flush(10) is True
            statuses = [status for _, status, _ in front.log]
            assert statuses == [429, 503, 200]
            assert front.log[1][0] - front.log[0][0] >= 0.95  # Retry-After: 1 honoured
            assert {auth for _, _, auth in front.log} == {f"Bearer {SECRET_KEY}"}

            front.always = 401
            await sink.submit(await scored(code_scorer(), traces[1]))
            assert await sink.flush(5) is False
            assert await sink.flush(5) is False
            assert sink.problem is not None and "PHOENIX_API_KEY" in sink.problem and "401" in sink.problem
            front.always = None
            assert await sink.flush(10) is True
            assert sink.problem is None
    finally:
        await front.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "refuses the API key" in errors[0]  # once, not per retry
    assert any("takes annotations again" in r.getMessage() for r in caplog.records)
    assert all(SECRET_KEY not in r.getMessage() for r in caplog.records)
    assert set(await annotations_by_span(phoenix, project, traces)) == {t.agent_span_id for t in traces}


async def test_an_annotation_phoenix_rejects_is_found_alone_and_dropped_with_phoenixs_reason(
    phoenix: PhoenixServer, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Phoenix reserves the name 'note' (400): the batch is sent again one by one, the others are stored,
    the culprit is logged with its score id and Phoenix's words, counted, and not retried."""
    project, traces = await traces_in_phoenix(phoenix, 2, seed=35)
    observer = Dropped()
    sink = make_sink(observer=observer)
    await sink.start()
    bad = await scored(code_scorer("note"), traces[0])
    with caplog.at_level(logging.ERROR, logger="exporters.phoenix"):
        for run in (await scored(code_scorer(), traces[0]), bad, await scored(code_scorer(), traces[1])):
            await sink.submit(run)
        assert await sink.flush(10) is False  # a drop fails the flush that sees it
    assert await sink.flush(1) is True
    assert sink.dropped["rejected"] == 1 and observer.events == [("phoenix", "rejected", 1)]
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert bad.score_id in line and "HTTP 400" in line and "note" in line
    by_span = await annotations_by_span(phoenix, project, traces)
    assert sorted(row["name"] for rows in by_span.values() for row in rows) == ["length", "length"]


async def test_a_url_without_phoenixs_api_blocks_and_names_the_key(
    phoenix: PhoenixServer, make_sink: SinkFactory
) -> None:
    sink = make_sink(phoenix.url + "/not-phoenix")
    await sink.start()
    await sink.submit(await scored(code_scorer(), ("c" * 32, "d" * 16)))
    assert await sink.flush(5) is False
    assert sink.problem is not None and "exporters.phoenix.base_url" in sink.problem
    assert sink.outstanding == 1 and sink.dropped == {"rejected": 0, "span_not_found": 0}  # kept, never dropped


async def test_a_full_sink_makes_submit_wait_and_drops_nothing(phoenix: PhoenixServer, make_sink: SinkFactory) -> None:
    project, traces = await traces_in_phoenix(phoenix, 3, seed=36)
    front = await FaultyFront(phoenix.url).start()
    try:
        front.always = 503
        sink = make_sink(front.url, max_pending=2)
        await sink.start()
        runs = [await scored(code_scorer(), trace) for trace in traces]
        await sink.submit(runs[0])
        await sink.submit(runs[1])
        third = asyncio.create_task(sink.submit(runs[2]))
        await asyncio.sleep(0.5)
        assert not third.done() and sink.outstanding == 2  # backpressure: the run stays in flight
        front.always = None
        await asyncio.wait_for(third, 10)
        assert await sink.flush(10) is True
    finally:
        await front.stop()
    assert set(await annotations_by_span(phoenix, project, traces)) == {t.agent_span_id for t in traces}
