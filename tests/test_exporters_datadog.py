"""The Datadog exporter against a stand-in of the evaluation-metric intake that validates every request against
the shape ddtrace sends and answers as Datadog does (tests/support/datadog.py): the mapping (decimal ids, the
128-bit trace id, label rules, metric types, assessments, tags), batches, 400 and 413 split to their culprit,
403, 429 with Retry-After, one write per score id per process, and a key that never reaches a log line."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from exporters.datadog import (
    DatadogEvaluationSink,
    DatadogExporterSettings,
    SentScores,
    Threshold,
    datadog_evaluation,
    datadog_tag,
    evaluation_label,
)
from exporters.delivery import DeadLetter
from exporters.registry import ExporterContext, SettingsView, exporter_kinds
from sidecar import __version__
from sidecar.core import ScoredRun, Sink
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.scoring import JudgeModel, Scorer, create_scorer
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.datadog import API_KEY, DatadogStandIn
from tests.support.judge import SECRET_KEY as JUDGE_KEY
from tests.support.runs import labelled, scored_run_of
from tests.support.session_runs import session_run

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
REASON = "The score is 0.75 because the answer addresses the question."


def code_scorer(scorer_id: str = "length", score: float = 0.5, reason: str | None = None) -> Scorer:
    return (
        create_scorer(id=scorer_id, name=scorer_id.title())
        .generate_score(lambda ctx: score)
        .generate_reason(lambda ctx: reason if reason is not None else f"{scorer_id} is {ctx.score}")
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
        create_scorer(id="prompt-alignment", name="Alignment", judge={"model": model, "instructions": "Judge."})
        .generate_score(lambda ctx: 0.75)
        .generate_reason(description="explain", create_prompt=lambda ctx: f"Explain the score {ctx.score}.")
    )


def request_for(
    trace_id: str = TRACE_ID, span_id: str = SPAN_ID, *, service: str | None = "support-bot", env: str | None = None
) -> ScorerRunRequest:
    resource = (("deployment.environment.name", env),) if env else ()
    return ScorerRunRequest(
        target=SpanTarget(
            trace_id=trace_id,
            span_id=span_id,
            agent_name="support",
            version="2.3.0",
            service_name=service,
            resource_attributes=resource,
        ),
        input=AgentRunInput(input_messages=(user_message("How do I reset my password?"),)),
        output=(assistant_message("Open Settings, then Reset password."),),
    )


async def scored(scorer: Scorer, request: ScorerRunRequest | None = None) -> ScoredRun:
    return await scored_run_of(scorer, request or request_for(), agent_label="support")


def distinct_spans(n: int) -> list[ScorerRunRequest]:
    return [request_for(f"{(i + 1) << 64 | (i + 7):032x}", f"{i + 1:016x}") for i in range(n)]


@pytest.fixture
async def datadog() -> AsyncIterator[DatadogStandIn]:
    stand_in = await DatadogStandIn().start()
    yield stand_in
    await stand_in.stop()
    assert stand_in.invalid == [], "the stand-in found requests the intake would not take"


SinkFactory = Callable[..., DatadogEvaluationSink]


@pytest.fixture
async def make_sink(datadog: DatadogStandIn) -> AsyncIterator[SinkFactory]:
    sinks: list[DatadogEvaluationSink] = []

    def make(base_url: str | None = None, **kwargs: Any) -> DatadogEvaluationSink:
        options: dict[str, Any] = {"api_key": API_KEY, "timeout_s": 5, "backoff_base_s": 0.05, "backoff_max_s": 0.5}
        options.update(kwargs)
        sink = DatadogEvaluationSink(base_url or datadog.url, **options)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        await sink.close()


# --- the mapping ----------------------------------------------------------------------------------------------


async def test_an_evaluation_joins_the_otel_span_by_its_decimal_ids(judge_server: JudgeServer) -> None:
    judge_server.reset(lambda body: Reply(content=REASON, usage={"prompt_tokens": 80, "completion_tokens": 20}))
    run = await scored(judged_scorer(judge_server), request_for(env="Prod"))
    evaluation = datadog_evaluation(run)
    assert evaluation is not None
    metric = evaluation.metric
    # The full 128-bit trace id in decimal (not APM's low 64 bits: 11803532876627986230).
    assert metric["join_on"] == {
        "span": {"span_id": "67667974448284343", "trace_id": "100985939111033328018442752961257817910"}
    }
    assert metric["ml_app"] == "support-bot" and metric["label"] == "prompt_alignment"
    assert (metric["metric_type"], metric["score_value"]) == ("score", 0.75) and "assessment" not in metric
    assert metric["reasoning"] == REASON and metric["timestamp_ms"] == run.finished_unix_nano // 1_000_000
    assert metric["tags"] == [
        "source:otel",
        "scorer_id:prompt-alignment",
        f"score_id:{run.score_id}",
        f"scoring_sidecar_version:{__version__}",
        "judge_model:openai/gpt-4o-mini",
        "agent_version:2.3.0",
        "env:prod",
    ]
    failing = await scored(create_scorer(id="boom").generate_score(lambda ctx: 1 / 0))
    assert failing.outcome == "failed" and datadog_evaluation(failing) is None


def test_labels_follow_datadogs_rules() -> None:
    assert evaluation_label("prompt-alignment") == "prompt_alignment"
    assert evaluation_label("tool.call accuracy") == "tool_call_accuracy"
    assert evaluation_label("9lives") == "score_9lives" and evaluation_label("_x") == "score__x"
    assert evaluation_label("é-ok") == "score___ok" and len(evaluation_label("a" * 300)) == 200
    assert datadog_tag("env", "Prod EU/1") == "env:prod_eu/1"


async def test_kinds_assessments_and_ml_app() -> None:
    run = await scored(code_scorer("policy", 1.0), request_for(service=None))
    passed = datadog_evaluation(labelled(run, "pass"))
    failed = datadog_evaluation(labelled(run, "fail"))
    category = datadog_evaluation(labelled(run, "refund_granted"), ml_app="refunds")
    assert passed is not None and failed is not None and category is not None
    assert (passed.metric["metric_type"], passed.metric["boolean_value"], passed.metric["assessment"]) == (
        "boolean",
        True,
        "pass",
    )
    assert (failed.metric["boolean_value"], failed.metric["assessment"]) == (False, "fail")
    assert (category.metric["metric_type"], category.metric["categorical_value"]) == ("categorical", "refund_granted")
    assert "assessment" not in category.metric and category.metric["ml_app"] == "refunds"
    assert passed.metric["ml_app"] == "unknown_service"  # no service.name: what OTel SDKs name such a service
    low, high = await scored(code_scorer("length", 0.2)), await scored(code_scorer("length", 0.8))
    thresholds = {"length": Threshold(min=0.5)}
    assert datadog_evaluation(low, thresholds=thresholds).metric["assessment"] == "fail"  # type: ignore[union-attr]
    assert datadog_evaluation(high, thresholds=thresholds).metric["assessment"] == "pass"  # type: ignore[union-attr]


def test_sent_scores_forget_the_oldest_first() -> None:
    sent = SentScores(2)
    for score_id in ("a", "b", "c"):
        sent.add(score_id)
    assert "a" not in sent and "b" in sent and "c" in sent and len(sent) == 2
    none = SentScores(0)
    none.add("a")
    assert "a" not in none


# --- against the stand-in ---------------------------------------------------------------------------------------


async def test_evaluations_go_in_one_request_and_arrive_as_ddtrace_sends_them(
    datadog: DatadogStandIn, make_sink: SinkFactory
) -> None:
    runs = [await scored(code_scorer(), request) for request in distinct_spans(3)]
    sink = make_sink(batch_size=10)
    assert isinstance(sink, Sink) and sink.name == "datadog" and API_KEY not in repr(sink)
    await sink.start()
    for run in runs:
        await sink.submit(run)
    assert await sink.flush(10) is True and sink.stored == 3
    assert [r.status for r in datadog.requests] == [202] and {r.api_key for r in datadog.requests} == {API_KEY}
    assert datadog.score_ids() == [run.score_id for run in runs]
    for run, metric in zip(runs, datadog.metrics, strict=True):
        target = run.request.target
        assert metric["join_on"]["span"] == {
            "span_id": str(int(target.span_id, 16)),
            "trace_id": str(int(target.trace_id, 16)),
        }
        assert "source:otel" in metric["tags"] and metric["label"] == "length"


async def test_a_redelivery_within_the_process_writes_nothing_twice(
    datadog: DatadogStandIn, make_sink: SinkFactory
) -> None:
    """No idempotency key at Datadog: a score id the sink wrote (or is writing) is not sent again."""
    sink = make_sink()
    await sink.start()
    runs = [await scored(code_scorer(), request) for request in distinct_spans(2)]
    for run in runs:
        await sink.submit(run)
    for run in runs:  # redelivered before the first ones were confirmed
        await sink.submit(run)
    assert await sink.flush(10) is True
    again = [await scored(code_scorer(), request) for request in distinct_spans(2)]
    assert {run.score_id for run in again} == {run.score_id for run in runs}
    for run in again:  # and after
        await sink.submit(run)
    assert await sink.flush(10) is True
    assert sorted(datadog.score_ids()) == sorted(run.score_id for run in runs) and sink.already_sent == 4


async def test_a_submit_cancelled_while_it_waits_for_room_is_sent_when_the_run_comes_again(
    datadog: DatadogStandIn, make_sink: SinkFactory
) -> None:
    """A run whose submit never queued (a revoked partition cancels its waiting runs) is redelivered later: that
    copy must be written, not taken for one already on its way."""
    sink = make_sink(max_pending=1)
    await sink.start()
    first, second = [await scored(code_scorer(), request) for request in distinct_spans(2)]
    datadog.always = 503  # the first stays unconfirmed: no room for the second
    await sink.submit(first)
    waiting = asyncio.ensure_future(sink.submit(second))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    datadog.always = None
    assert await sink.flush(10) is True
    await sink.submit(second)  # redelivered
    assert await sink.flush(10) is True
    assert sorted(datadog.score_ids()) == sorted([first.score_id, second.score_id]) and sink.already_sent == 0


async def test_a_refused_conversation_evaluation_is_set_aside_under_the_conversation_id(
    datadog: DatadogStandIn, make_sink: SinkFactory
) -> None:
    """A conversation's evaluation Datadog refuses for good: its dead letter is keyed as its score record is, by
    the conversation id (``record_key``), not by the trace of its last turn."""
    datadog.refuse_labels = {"coherence"}
    letters: list[tuple[DeadLetter, str, str]] = []
    sink = make_sink(set_aside=lambda *letter: letters.append(letter))
    await sink.start()
    request = session_run([("Hi", "Hello."), ("Reset my password?", "Open Settings.")], conversation_id="conv-42")
    run = await scored_run_of(code_scorer("coherence"), request, agent_label="support")
    await sink.submit(run)
    assert await sink.flush(10) is False
    [(letter, reason, _)] = letters
    assert (letter.score_id, reason) == (run.score_id, "rejected")
    assert letter.key == b"conv-42" == run.request.record_key


async def test_a_400_finds_the_refused_evaluation_drops_and_sets_it_aside(
    datadog: DatadogStandIn, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    datadog.refuse_labels = {"tone"}
    letters: list[tuple[DeadLetter, str, str]] = []
    sink = make_sink(set_aside=lambda *letter: letters.append(letter))
    await sink.start()
    [first, second] = distinct_spans(2)
    runs = [await scored(code_scorer(), first), await scored(code_scorer("tone"), first)]
    runs.append(await scored(code_scorer(), second))
    with caplog.at_level(logging.ERROR, logger="exporters.datadog"):
        for run in runs:
            await sink.submit(run)
        assert await sink.flush(10) is False
    assert await sink.flush(1) is True
    assert sorted(datadog.score_ids()) == sorted([runs[0].score_id, runs[2].score_id])
    assert sink.dropped == {"rejected": 1}
    [(letter, reason, detail)] = letters
    assert (letter.exporter, letter.score_id, reason) == ("datadog", runs[1].score_id, "rejected")
    assert json.loads(letter.payload)["label"] == "tone" and "already used" in detail and "HTTP 400" in detail
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert runs[1].score_id in line and "already used" in line
    await sink.submit(runs[1])  # refused for good: this process does not write it again
    assert await sink.flush(1) is True and sink.dropped == {"rejected": 1}


async def test_413_splits_the_batch_until_each_request_fits(datadog: DatadogStandIn, make_sink: SinkFactory) -> None:
    runs = [await scored(code_scorer(), request) for request in distinct_spans(6)]
    first = datadog_evaluation(runs[0])
    assert first is not None
    one = len(json.dumps({"data": {"type": "evaluation_metric", "attributes": {"metrics": [first.metric]}}}))
    datadog.max_body_bytes = one + 200  # a proxy with a low limit: one evaluation per request passes
    huge = await scored(code_scorer("verbose", reason="why " * 2000), distinct_spans(7)[6])
    sink = make_sink(batch_size=10)
    await sink.start()
    for run in [*runs, huge]:
        await sink.submit(run)
    assert await sink.flush(10) is False  # the one that fits nowhere is dropped
    assert sorted(datadog.score_ids()) == sorted(run.score_id for run in runs)
    assert sink.dropped == {"rejected": 1} and 413 in {r.status for r in datadog.requests}
    assert all(r.bytes <= datadog.max_body_bytes for r in datadog.requests if r.status == 202)


async def test_429_waits_for_retry_after_and_403_blocks_and_names_the_key(
    datadog: DatadogStandIn, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    [first, second] = distinct_spans(2)
    sink = make_sink()
    await sink.start()
    with caplog.at_level(logging.DEBUG):
        datadog.faults = [(429, {"Retry-After": "1"})]
        await sink.submit(await scored(code_scorer(), first))
        assert await sink.flush(10) is False
        assert await sink.flush(10) is True
        assert [r.status for r in datadog.requests] == [429, 202]
        assert datadog.requests[1].at - datadog.requests[0].at >= 0.95

        datadog.api_key = "a-revoked-key-is-not-this-one"
        await sink.submit(await scored(code_scorer(), second))
        assert await sink.flush(3) is False
        assert sink.problem is not None and "DD_API_KEY" in sink.problem and "403" in sink.problem
        assert sink.outstanding == 1 and sink.dropped == {"rejected": 0}
        datadog.api_key = API_KEY
        assert await sink.flush(10) is True and sink.problem is None
    assert all(API_KEY not in r.getMessage() for r in caplog.records)
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 1


# --- the block and the declaration ------------------------------------------------------------------------------


def test_the_block_checks_site_and_url_and_reads_the_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("DD_API_KEY", raising=False)
    assert not DatadogExporterSettings().enabled
    assert DatadogExporterSettings(site="datadoghq.eu").url == "https://api.datadoghq.eu"
    assert DatadogExporterSettings(base_url="http://proxy:8126").url == "http://proxy:8126"
    with caplog.at_level(logging.WARNING, logger="exporters.datadog"):  # the key may be set where it runs
        sink = exporter_kinds()["datadog"].build(DatadogExporterSettings(enabled=True), ExporterContext())
    assert isinstance(sink, DatadogEvaluationSink)
    assert ["DD_API_KEY" in r.getMessage() for r in caplog.records] == [True]
    monkeypatch.setenv("DD_API_KEY", "k")
    assert DatadogExporterSettings(enabled=True).api_key_value() == "k"
    monkeypatch.setenv("DD_API_KEY", "k\n")  # mounted from a file
    assert DatadogExporterSettings(enabled=True).api_key_value() == "k"
    with pytest.raises(ValidationError, match="site"):
        DatadogExporterSettings(site="https://app.datadoghq.com")
    with pytest.raises(ValidationError, match="min"):
        DatadogExporterSettings(thresholds={"length": {}})


def test_labels_must_not_collide_and_thresholds_name_scorers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DD_API_KEY", "k")
    kind = exporter_kinds()["datadog"]
    block = DatadogExporterSettings(enabled=True, thresholds={"ghost": {"min": 0.5}})
    scorers = ("prompt-alignment", "prompt_alignment", "length")
    view = SettingsView(scorer_ids=scorers, input_topics=(), dead_letter_topic=None)
    problems = kind.problems(block, view)
    assert [p["loc"] for p in problems] == [("scorers", 1, "id"), ("exporters", "datadog", "thresholds", "ghost")]
    assert kind.kept_resource_attributes(block) == ("deployment.environment.name", "deployment.environment")
    assert kind.problems(DatadogExporterSettings(), view) == []
