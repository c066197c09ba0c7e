"""The Langfuse exporter against a stand-in that validates every score with the official ``langfuse`` package's
request model and answers as Langfuse does (tests/support/langfuse.py): the mapping (ids, value and data type,
comment, metadata, environment), batches and upserts, a partial 207, a server without batch scores, 401, 404,
429 with Retry-After, and keys that never reach a log line."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from exporters.delivery import DeadLetter, checkpointed
from exporters.langfuse import LangfuseExporterSettings, LangfuseScoreSink, langfuse_score
from exporters.registry import ExporterContext, exporter_kinds
from sidecar.core import ScoredRun, Sink
from sidecar.core.runs import ScorerRunRequest, SessionTurn, SessionWindow, SpanTarget
from sidecar.scoring import JudgeModel, Scorer, create_scorer
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY as JUDGE_KEY
from tests.support.langfuse import PUBLIC_KEY, SECRET_KEY, LangfuseStandIn
from tests.support.runs import labelled, scored_run_of
from tests.support.session_runs import session_run

TRACE_ID = "4BF92F3577B34DA6A3CE929D0E0E4736"  # upper case on purpose: Langfuse files OTLP ids in lower case
SPAN_ID = "00F067AA0BA902B7"
SPAN_END_NS = 1_700_000_000_123_456_789
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
        api_key=SecretStr(JUDGE_KEY),
        transport="http",
        timeout_s=2.0,
        max_retries=0,
    )
    return (
        create_scorer(id="helpfulness", name="Helpfulness", judge={"model": model, "instructions": "Judge."})
        .generate_score(lambda ctx: 0.75)
        .generate_reason(description="explain", create_prompt=lambda ctx: f"Explain the score {ctx.score}.")
    )


def request_for(
    trace_id: str = TRACE_ID, span_id: str = SPAN_ID, resource: tuple[tuple[str, Any], ...] = ()
) -> ScorerRunRequest:
    return ScorerRunRequest(
        target=SpanTarget(
            trace_id=trace_id,
            span_id=span_id,
            agent_name="support",
            version="2.3.0",
            end_time_unix_nano=SPAN_END_NS,
            resource_attributes=resource,
        ),
        input=AgentRunInput(input_messages=(user_message("How do I reset my password?"),)),
        output=(assistant_message("Open Settings, then Reset password."),),
    )


async def scored(scorer: Scorer, request: ScorerRunRequest | None = None) -> ScoredRun:
    return await scored_run_of(scorer, request or request_for(), agent_label="support")


def distinct_spans(n: int) -> list[ScorerRunRequest]:
    return [request_for(f"{i + 1:032x}", f"{i + 1:016x}") for i in range(n)]


@pytest.fixture
async def langfuse() -> AsyncIterator[LangfuseStandIn]:
    stand_in = await LangfuseStandIn().start()
    yield stand_in
    await stand_in.stop()
    assert stand_in.invalid == [], "the stand-in found requests the Langfuse API would not take"


SinkFactory = Callable[..., LangfuseScoreSink]


@pytest.fixture
async def make_sink(langfuse: LangfuseStandIn) -> AsyncIterator[SinkFactory]:
    sinks: list[LangfuseScoreSink] = []

    def make(base_url: str | None = None, **kwargs: Any) -> LangfuseScoreSink:
        options: dict[str, Any] = {
            "public_key": PUBLIC_KEY,
            "secret_key": SECRET_KEY,
            "timeout_s": 5,
            "backoff_base_s": 0.05,
            "backoff_max_s": 0.5,
        }
        options.update(kwargs)
        sink = LangfuseScoreSink(base_url or langfuse.url, **options)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        await sink.close()


# --- the mapping ----------------------------------------------------------------------------------------------


async def test_a_score_is_langfuses_score_of_the_scored_observation(judge_server: JudgeServer) -> None:
    judge_server.reset(lambda body: Reply(content=REASON, usage={"prompt_tokens": 80, "completion_tokens": 20}))
    run = await scored(judged_scorer(judge_server), request_for(resource=(("deployment.environment.name", "prod"),)))
    score = langfuse_score(run)
    assert score is not None and score.unusable_environment is None
    body = score.body
    assert {k: body[k] for k in ("id", "traceId", "observationId", "name", "value", "dataType")} == {
        "id": run.score_id,
        "traceId": TRACE_ID.lower(),
        "observationId": SPAN_ID.lower(),
        "name": "helpfulness",
        "value": 0.75,
        "dataType": "NUMERIC",
    }
    assert body["timestamp"] == "2023-11-14T22:13:20.123Z"  # the scored span's end: the same on a redelivery
    assert body["comment"] == REASON and body["environment"] == "prod"
    metadata = body["metadata"]
    assert metadata["score_id"] == run.score_id and metadata["scorer_fingerprint"] == run.scorer_fingerprint
    assert metadata["judge_model"] == "openai/gpt-4o-mini" and metadata["judge_calls"] == 1
    assert (metadata["judge_input_tokens"], metadata["judge_output_tokens"]) == (80, 20)
    assert "judge_estimated_cost_usd" in metadata and "score" not in metadata
    assert metadata["agent_name"] == "support" and metadata["agent_version"] == "2.3.0"
    failing = await scored(create_scorer(id="boom").generate_score(lambda ctx: 1 / 0))
    assert failing.outcome == "failed" and langfuse_score(failing) is None


async def test_labels_make_boolean_and_categorical_scores() -> None:
    run = await scored(code_scorer("policy", 1.0))
    passed, failed = langfuse_score(labelled(run, "pass")), langfuse_score(labelled(run, "fail"))
    category = langfuse_score(labelled(run, "refund_granted"))
    assert passed is not None and failed is not None and category is not None
    assert (passed.body["value"], passed.body["dataType"]) == (1.0, "BOOLEAN")
    assert (failed.body["value"], failed.body["dataType"]) == (0.0, "BOOLEAN")
    assert (category.body["value"], category.body["dataType"]) == ("refund_granted", "CATEGORICAL")
    assert category.body["metadata"]["score"] == 1.0 and category.body["metadata"]["label"] == "refund_granted"


@pytest.mark.parametrize(
    ("resource", "fallback", "expected"),
    [
        ((("deployment.environment.name", "staging"),), None, "staging"),
        ((("deployment.environment", "eu-1_prod"),), None, "eu-1_prod"),  # the older attribute name
        ((("deployment.environment.name", "Production"),), "prod", "prod"),  # upper case: not Langfuse's
        ((("deployment.environment.name", "langfuse-internal"),), None, None),  # the reserved prefix
        ((("deployment.environment.name", "x" * 41),), "default-env", "default-env"),
        ((), "fallback", "fallback"),
        ((), None, None),
    ],
)
async def test_the_environment_follows_langfuses_rules(
    resource: tuple[tuple[str, str], ...], fallback: str | None, expected: str | None
) -> None:
    score = langfuse_score(await scored(code_scorer(), request_for(resource=resource)), fallback)
    assert score is not None and score.body.get("environment") == expected


async def test_the_sink_implements_the_protocol_and_hides_its_keys(make_sink: SinkFactory) -> None:
    sink = make_sink()
    assert isinstance(sink, Sink) and sink.name == "langfuse"
    assert SECRET_KEY not in repr(sink) and PUBLIC_KEY not in repr(sink)


async def test_a_conversations_score_goes_to_its_session(langfuse: LangfuseStandIn, make_sink: SinkFactory) -> None:
    turns = tuple(
        SessionTurn(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", start_time_unix_nano=i, end_time_unix_nano=i + 7)
        for i in range(2)
    )
    window = SessionWindow(conversation_id="conv-42", turns=turns, close_reason="idle")
    request = request_for(f"{2:032x}", f"{2:016x}").model_copy(update={"session": window})
    run = await scored(code_scorer("coherence"), request)
    score = langfuse_score(run)
    assert score is not None and score.body["sessionId"] == "conv-42"
    assert "traceId" not in score.body and "observationId" not in score.body
    assert score.body["timestamp"] == "1970-01-01T00:00:00.000Z"  # the first turn's end: what names the id
    assert score.body["metadata"]["scope"] == "session"
    sink = make_sink()
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(10) is True and langfuse.scores[run.score_id]["sessionId"] == "conv-42"


# --- against the stand-in ---------------------------------------------------------------------------------------


async def test_scores_go_in_one_batch_and_a_redelivery_upserts_them(
    langfuse: LangfuseStandIn, make_sink: SinkFactory, judge_server: JudgeServer
) -> None:
    judge_server.reset(lambda body: Reply(content=REASON, usage={"prompt_tokens": 8, "completion_tokens": 2}))
    requests = distinct_spans(3)
    code, judged = code_scorer(), judged_scorer(judge_server)
    runs = [await scored(scorer, request) for request in requests for scorer in (code, judged)]
    sink = make_sink(batch_size=10)
    await sink.start()
    for run in runs:
        await sink.submit(run)
    assert await sink.flush(10) is True
    assert sink.stored == 6 and sink.outstanding == 0
    assert [r.status for r in langfuse.requests] == [202] and len(langfuse.requests[0].body) == 6
    assert set(langfuse.scores) == {run.score_id for run in runs}

    # Redelivered (the same score ids, a new reason): the same rows, updated, never a second score.
    second = Reply(content="Second opinion.", usage={"prompt_tokens": 8, "completion_tokens": 2})
    judge_server.reset(lambda body: second)
    again = [await scored(judged, request) for request in requests]
    for run in again:
        await sink.submit(run)
    assert await sink.flush(10) is True
    assert langfuse.rows_per_id() == {run.score_id: 1 for run in runs}  # exactly one per score id
    assert all(langfuse.writes[run.score_id] == 2 for run in again)
    assert {langfuse.scores[run.score_id]["comment"] for run in again} == {"Second opinion."}


async def test_a_partial_batch_finds_the_refused_score_drops_and_sets_it_aside(
    langfuse: LangfuseStandIn, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Langfuse answers 207 with one score refused (its config says otherwise): the batch is sent again score by
    score, the others are stored (upserted), the refused one is dropped with Langfuse's words, counted and set
    aside; the flush that saw it fails, the next confirms."""
    langfuse.refuse_names = {"tone"}
    letters: list[tuple[DeadLetter, str, str]] = []
    sink = make_sink(set_aside=lambda *letter: letters.append(letter))
    await sink.start()
    [first, second] = distinct_spans(2)
    runs = [
        await scored(code_scorer(), first),
        await scored(code_scorer("tone"), first),
        await scored(code_scorer(), second),
    ]
    with caplog.at_level(logging.ERROR, logger="exporters.langfuse"):
        for run in runs:
            await sink.submit(run)
        assert await sink.flush(10) is False
    assert await sink.flush(1) is True
    assert langfuse.requests[0].status == 207 and set(langfuse.scores) == {runs[0].score_id, runs[2].score_id}
    assert sink.dropped == {"rejected": 1}
    [(letter, reason, detail)] = letters
    assert (letter.exporter, letter.score_id, reason) == ("langfuse", runs[1].score_id, "rejected")
    assert json.loads(letter.payload)["name"] == "tone" and "score config" in detail
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert runs[1].score_id in line and "score config" in line


async def test_one_scorer_refused_in_every_interval_stops_no_flush(
    langfuse: LangfuseStandIn, make_sink: SinkFactory
) -> None:
    """Langfuse refuses one scorer's scores for good, in every checkpoint interval: each is dropped and handed to
    a checkpointed set-aside (the dead-letter topic, flushed after the sinks), so every flush confirms and commits
    go on; every refused score is set aside, every other one stored."""
    langfuse.refuse_names = {"tone"}
    letters: list[tuple[DeadLetter, str, str]] = []

    @checkpointed
    def set_aside(letter: DeadLetter, reason: str, detail: str) -> None:
        letters.append((letter, reason, detail))

    sink = make_sink(set_aside=set_aside)
    await sink.start()
    refused: list[str] = []
    stored: list[str] = []
    for span in distinct_spans(3):
        kept, tone = await scored(code_scorer(), span), await scored(code_scorer("tone"), span)
        await sink.submit(kept)
        await sink.submit(tone)
        assert await sink.flush(10) is True
        stored.append(kept.score_id)
        refused.append(tone.score_id)
    assert [letter.score_id for letter, _, _ in letters] == refused
    assert {reason for _, reason, _ in letters} == {"rejected"}
    assert set(langfuse.scores) == set(stored) and sink.dropped == {"rejected": 3}


async def test_a_refused_conversation_score_is_set_aside_under_the_conversation_id(
    langfuse: LangfuseStandIn, make_sink: SinkFactory
) -> None:
    """A conversation's score Langfuse refuses for good: its dead letter is keyed as its score record is, by the
    conversation id (``record_key``), not by the trace of its last turn."""
    langfuse.refuse_names = {"coherence"}
    letters: list[tuple[DeadLetter, str, str]] = []
    sink = make_sink(set_aside=lambda *letter: letters.append(letter))
    await sink.start()
    request = session_run([("Hi", "Hello."), ("Reset my password?", "Open Settings.")], conversation_id="conv-42")
    run = await scored(code_scorer("coherence"), request)
    await sink.submit(run)
    assert await sink.flush(10) is False
    [(letter, reason, _)] = letters
    assert (letter.score_id, reason) == (run.score_id, "rejected")
    assert letter.key == b"conv-42" == run.request.record_key
    assert json.loads(letter.payload)["sessionId"] == "conv-42"


async def test_a_server_without_batch_scores_gets_one_score_per_request(
    make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    old = await LangfuseStandIn(batch_scores=False).start()
    try:
        sink = make_sink(old.url)
        await sink.start()
        runs = [await scored(code_scorer(), request) for request in distinct_spans(3)]
        with caplog.at_level(logging.INFO, logger="exporters.langfuse"):
            for run in runs:
                await sink.submit(run)
            assert await sink.flush(10) is True
            assert sink.one_per_request and set(old.scores) == {run.score_id for run in runs}
            more = await scored(code_scorer("other"), distinct_spans(1)[0])
            await sink.submit(more)
            assert await sink.flush(10) is True
        assert isinstance(old.requests[-1].body, dict) and old.requests[-1].status == 200  # one object, 200
        assert sink.dropped == {"rejected": 0} and old.invalid == []
        assert sum("one score per request" in r.getMessage() for r in caplog.records) == 1
    finally:
        await old.stop()


async def test_429_is_retried_after_retry_after_and_401_blocks_and_says_which_keys(
    langfuse: LangfuseStandIn, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sink = make_sink()
    await sink.start()
    [first, second] = distinct_spans(2)
    with caplog.at_level(logging.DEBUG):
        langfuse.faults = [(429, {"Retry-After": "1"})]
        await sink.submit(await scored(code_scorer(), first))
        assert await sink.flush(10) is False  # 429: kept; Retry-After holds it even across a flush
        assert await sink.flush(10) is True
        assert [r.status for r in langfuse.requests] == [429, 202]
        assert langfuse.requests[1].at - langfuse.requests[0].at >= 0.95

        langfuse.secret_key = "another-secret"  # the keys the sidecar has are no longer the project's
        await sink.submit(await scored(code_scorer(), second))
        assert await sink.flush(3) is False
        assert sink.problem is not None and "LANGFUSE_SECRET_KEY" in sink.problem and "401" in sink.problem
        assert sink.outstanding == 1 and sink.dropped == {"rejected": 0}  # kept, never dropped
        langfuse.secret_key = SECRET_KEY
        assert await sink.flush(10) is True and sink.problem is None
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "refuses the API keys" in errors[0]  # once, not per retry
    for record in caplog.records:  # the keys, in clear or as the Basic credentials, never in a line
        assert SECRET_KEY not in record.getMessage() and PUBLIC_KEY not in record.getMessage()
    assert all(r.authorization is not None and r.authorization.startswith("Basic ") for r in langfuse.requests)


async def test_a_url_without_langfuses_api_blocks_and_names_the_key(
    langfuse: LangfuseStandIn, make_sink: SinkFactory
) -> None:
    sink = make_sink(langfuse.url + "/not-langfuse")
    await sink.start()
    await sink.submit(await scored(code_scorer()))
    assert await sink.flush(3) is False
    assert sink.problem is not None and "exporters.langfuse.base_url" in sink.problem
    assert sink.outstanding == 1


async def test_a_backend_down_keeps_everything_and_resends_when_it_is_back(
    langfuse: LangfuseStandIn, make_sink: SinkFactory
) -> None:
    sink = make_sink()
    await sink.start()
    runs = [await scored(code_scorer(), request) for request in distinct_spans(4)]
    await langfuse.stop()
    for run in runs:
        await sink.submit(run)
    assert await sink.flush(2) is False
    assert sink.outstanding == 4 and sink.failed_attempts >= 4 and sink.dropped == {"rejected": 0}
    await langfuse.start()
    assert await asyncio.wait_for(sink.flush(10), 15) is True
    assert set(langfuse.scores) == {run.score_id for run in runs}


# --- the block and the declaration ------------------------------------------------------------------------------


def test_the_block_checks_url_and_environment_and_reads_the_keys(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    assert not LangfuseExporterSettings().is_enabled
    without_keys = LangfuseExporterSettings(base_url="http://langfuse:3000")  # the keys may be set where it runs
    with caplog.at_level(logging.WARNING, logger="exporters.langfuse"):
        sink = exporter_kinds()["langfuse"].build(without_keys, ExporterContext())
    assert isinstance(sink, LangfuseScoreSink)
    [line] = [r.getMessage() for r in caplog.records]
    assert "LANGFUSE_PUBLIC_KEY" in line and "LANGFUSE_SECRET_KEY" in line
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk")
    block = LangfuseExporterSettings(base_url="http://langfuse:3000")
    assert block.is_enabled and block.keys() == ("pk", "sk")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk\n")  # mounted from a file
    assert block.keys() == ("pk", "sk")
    for bad in ("langfuse-prod", "Prod"):
        with pytest.raises(ValidationError, match="environment"):
            LangfuseExporterSettings(base_url="http://langfuse:3000", environment=bad)
    with pytest.raises(ValidationError, match="http"):
        LangfuseExporterSettings(base_url="langfuse:3000")


def test_the_exporter_declares_the_resource_attributes_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk")
    kind = exporter_kinds()["langfuse"]
    assert kind.kept_resource_attributes(LangfuseExporterSettings()) == ()
    on = LangfuseExporterSettings(base_url="http://langfuse:3000")
    assert kind.kept_resource_attributes(on) == ("deployment.environment.name", "deployment.environment")
    assert kind.drop_reasons == ("rejected",)
