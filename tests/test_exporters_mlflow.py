"""The MLflow exporter against a real ``mlflow server`` on loopback (tests/support/mlflow.py): the mapping, an
assessment per score read back from MLflow's REST API, a redelivery updated in place (MLflow answers a second
create of the same id with a 500), a trace that arrives late, one that never does (the permanent-refusal rule
within ``trace_wait_s``), conversations under MLflow's session key, the experiment found or created, and the
credentials through a front that answers 401 first."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import SecretStr, ValidationError

from exporters.delivery import DeadLetter, checkpointed
from exporters.mlflow import (
    ExperimentRef,
    MlflowAssessmentSink,
    MlflowExporterSettings,
    assessment_id,
    mlflow_assessment,
    resolve_experiment,
)
from exporters.registry import ExporterContext, exporter_kinds
from sidecar.core import ScoredRun, Sink
from sidecar.core.runs import ScorerRunRequest, SessionTurn, SessionWindow, SpanTarget
from sidecar.scoring import JudgeModel, Scorer, create_scorer
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY as JUDGE_KEY
from tests.support.mlflow import MlflowServer
from tests.support.phoenix import FaultyFront
from tests.support.runs import labelled, scored_run_of

TOKEN = "mlflow-token-SECRET-1234"
REASON = "The answer addresses the question."


def new_ids() -> tuple[str, str]:
    """A trace id and span id no other test uses (the session's MLflow is shared)."""
    return uuid.uuid4().hex, uuid.uuid4().hex[:16]


def otlp_trace(trace_id: str, span_id: str, *, conversation: str | None = None) -> ExportTraceServiceRequest:
    """The agent's span as its app exports it (a root span: MLflow files the trace when it arrives)."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    kv = resource.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "support-api"
    span = resource.scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes.fromhex(trace_id), bytes.fromhex(span_id)
    span.name = "invoke_agent support"
    span.start_time_unix_nano, span.end_time_unix_nano = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000
    if conversation is not None:
        attribute = span.attributes.add()
        attribute.key, attribute.value.string_value = "gen_ai.conversation.id", conversation
    return request


def request_for(trace_id: str, span_id: str) -> ScorerRunRequest:
    return ScorerRunRequest(
        target=SpanTarget(trace_id=trace_id.upper(), span_id=span_id.upper(), agent_name="support"),
        input=AgentRunInput(input_messages=(user_message("How do I reset my password?"),)),
        output=(assistant_message("Open Settings, then Reset password."),),
    )


def code_scorer(scorer_id: str = "length", score: float = 0.5) -> Scorer:
    return create_scorer(id=scorer_id).generate_score(lambda ctx: score).generate_reason(lambda ctx: REASON)


def judged_scorer(judge_server: JudgeServer) -> Scorer:
    model = JudgeModel(
        model="openai/gpt-4o-mini", api_base=judge_server.url, api_key=SecretStr(JUDGE_KEY), transport="http"
    )
    return (
        create_scorer(id="helpfulness", judge={"model": model})
        .generate_score(description="score", create_prompt=lambda ctx: "Score it.")
        .generate_reason(lambda ctx: REASON)
    )


async def scored(scorer: Scorer, request: ScorerRunRequest) -> ScoredRun:
    return await scored_run_of(scorer, request, agent_label="support")


SinkFactory = Callable[..., MlflowAssessmentSink]


@pytest.fixture
async def make_sink(mlflow: MlflowServer) -> AsyncIterator[SinkFactory]:
    sinks: list[MlflowAssessmentSink] = []

    def make(tracking_uri: str | None = None, **kwargs: Any) -> MlflowAssessmentSink:
        options: dict[str, Any] = {"timeout_s": 10, "backoff_base_s": 0.05, "backoff_max_s": 0.5}
        options.update(kwargs)
        sink = MlflowAssessmentSink(tracking_uri or mlflow.url, **options)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        await sink.close()


@pytest.fixture
async def experiment(mlflow: MlflowServer) -> str:
    return await mlflow.experiment(f"agents-{uuid.uuid4().hex[:8]}")


# --- the mapping ------------------------------------------------------------------------------------------------


async def test_a_judged_score_is_an_llm_judge_assessment_of_the_scored_span(judge_server: JudgeServer) -> None:
    judge_server.script(Reply.json({"score": 0.75}, usage={"prompt_tokens": 100, "completion_tokens": 20}))
    trace_id, span_id = new_ids()
    run = await scored(judged_scorer(judge_server), request_for(trace_id, span_id))
    assessment = mlflow_assessment(run)
    assert assessment is not None
    body = assessment.body
    assert assessment.trace_id == body["trace_id"] == f"tr-{trace_id}"  # lower case, as MLflow files OTLP ids
    assert body["span_id"] == span_id
    assert body["assessment_id"] == assessment_id(run.score_id) == f"a-{uuid.UUID(run.score_id).hex}"
    assert body["assessment_name"] == "helpfulness"  # the scorer id: align() pairs it with human assessments
    assert body["source"] == {"source_type": "LLM_JUDGE", "source_id": "helpfulness"}
    assert body["feedback"] == {"value": 0.75}
    assert body["rationale"] == REASON and body["valid"] is True
    metadata = body["metadata"]
    assert metadata["score_id"] == run.score_id and metadata["scorer_fingerprint"] == run.scorer_fingerprint
    assert metadata["judge_model"] == "openai/gpt-4o-mini" and metadata["judge_calls"] == "1"
    assert (metadata["judge_input_tokens"], metadata["judge_output_tokens"]) == ("100", "20")
    assert float(metadata["judge_estimated_cost_usd"]) == pytest.approx(100 * 1.5e-07 + 20 * 6e-07)
    assert all(isinstance(v, str) for v in metadata.values())  # MLflow's metadata is a map of strings
    assert JUDGE_KEY not in str(body)


async def test_values_follow_the_scores_kind_and_a_failed_run_is_an_error() -> None:
    trace_id, span_id = new_ids()
    run = await scored(code_scorer("policy", 1.0), request_for(trace_id, span_id))
    assert mlflow_assessment(run).body["source"]["source_type"] == "CODE"  # type: ignore[union-attr]
    values = [mlflow_assessment(labelled(run, label)).body["feedback"] for label in ("pass", "fail", "refund")]  # type: ignore[union-attr]
    assert values == [{"value": True}, {"value": False}, {"value": "refund"}]
    failing = create_scorer(id="broken").generate_score(lambda ctx: 1 / 0)
    failed = await scored(failing, request_for(trace_id, span_id))
    error = mlflow_assessment(failed)
    assert error is not None and "value" not in error.body["feedback"] and "rationale" not in error.body
    assert error.body["feedback"]["error"] == {"error_code": "ZeroDivisionError", "error_message": "division by zero"}
    assert error.body["metadata"]["failed_step"] == "generate_score"
    not_scorable = dataclasses.replace(run, outcome="not_scorable")
    assert mlflow_assessment(not_scorable) is None


# --- against the real server --------------------------------------------------------------------------------------


async def test_assessments_are_stored_and_a_redelivery_updates_the_same_one(
    mlflow: MlflowServer, make_sink: SinkFactory, experiment: str
) -> None:
    ids = [new_ids() for _ in range(3)]
    for trace_id, span_id in ids:
        await mlflow.send_traces(otlp_trace(trace_id, span_id), experiment)
    runs = [await scored(code_scorer(), request_for(t, s)) for t, s in ids]
    sink = make_sink(batch_size=2)
    assert isinstance(sink, Sink) and sink.name == "mlflow"
    await sink.start()
    for run in runs:
        await sink.submit(run)
    assert await sink.flush(20) is True
    assert (sink.stored, sink.updated) == (3, 0)
    for (trace_id, span_id), run in zip(ids, runs, strict=True):
        [row] = await mlflow.assessments(trace_id)
        assert row["assessment_id"] == assessment_id(run.score_id)
        assert (row["span_id"], row["assessment_name"], row["feedback"]["value"]) == (span_id, "length", 0.5)
        assert row["source"] == {"source_type": "CODE", "source_id": "length"} and row["valid"] is True

    # Redelivered after a restart (another sink, as after a kill -9), the score changed meanwhile (a judge
    # answers differently): MLflow refuses the same id with a 500, the sink updates that assessment in place.
    again = make_sink()
    await again.start()
    changed = dataclasses.replace(runs[0], result=runs[0].result.model_copy(update={"score": 0.25}))  # type: ignore[union-attr]
    await again.submit(changed)
    await again.submit(runs[1])
    assert await again.flush(20) is True
    assert (again.stored, again.updated) == (2, 2)
    [first] = await mlflow.assessments(ids[0][0])
    assert first["feedback"]["value"] == 0.25 and first["assessment_id"] == assessment_id(runs[0].score_id)
    assert len(await mlflow.assessments(ids[1][0])) == 1


async def test_an_assessment_a_human_overrode_stays_overridden_when_its_score_is_redelivered(
    mlflow: MlflowServer, make_sink: SinkFactory, experiment: str
) -> None:
    """MLflow's review flow: a human's assessment `overrides` the judge's, which MLflow lists as `valid: false`.
    A redelivery updates the judge's in place and leaves it overridden."""
    trace_id, span_id = new_ids()
    await mlflow.send_traces(otlp_trace(trace_id, span_id), experiment)
    run = await scored(code_scorer(), request_for(trace_id, span_id))
    sink = make_sink()
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(20) is True
    ours = assessment_id(run.score_id)
    human = {
        "assessment_name": "length",
        "trace_id": f"tr-{trace_id}",
        "span_id": span_id,
        "source": {"source_type": "HUMAN", "source_id": "reviewer@example.com"},
        "create_time": "2026-01-01T00:00:00Z",
        "last_update_time": "2026-01-01T00:00:00Z",
        "feedback": {"value": 0.9},
        "overrides": ours,
    }
    await mlflow.call("POST", f"/api/3.0/mlflow/traces/tr-{trace_id}/assessments", {"assessment": human})
    again = make_sink()
    await again.start()
    await again.submit(run)
    assert await again.flush(20) is True and again.updated == 1
    rows = {row["source"]["source_type"]: row for row in await mlflow.assessments(trace_id)}
    assert set(rows) == {"CODE", "HUMAN"}
    assert (rows["CODE"]["assessment_id"], rows["CODE"]["valid"]) == (ours, False)  # still superseded
    assert rows["HUMAN"]["valid"] is True and rows["HUMAN"]["overrides"] == ours


async def test_an_assessment_waits_for_its_trace_to_reach_mlflow(
    mlflow: MlflowServer, make_sink: SinkFactory, experiment: str
) -> None:
    trace_id, span_id = new_ids()
    run = await scored(code_scorer(), request_for(trace_id, span_id))
    sink = make_sink(trace_wait_s=60)
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(1) is False  # MLflow has no such trace yet: the assessment waits
    assert sink.waiting_for_traces == 1 and sum(sink.dropped.values()) == 0
    await mlflow.send_traces(otlp_trace(trace_id, span_id), experiment)  # the agents' trace arrives late
    assert await sink.flush(20) is True
    [row] = await mlflow.assessments(trace_id)
    assert row["assessment_id"] == assessment_id(run.score_id)


async def test_a_trace_that_never_arrives_ends_under_the_permanent_refusal_rule_within_trace_wait_s(
    make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    letters: list[tuple[DeadLetter, str, str]] = []

    @checkpointed
    def set_aside(letter: DeadLetter, reason: str, detail: str) -> None:
        letters.append((letter, reason, detail))

    trace_id, span_id = new_ids()
    run = await scored(code_scorer(), request_for(trace_id, span_id))
    sink = make_sink(trace_wait_s=1.0, set_aside=set_aside)
    await sink.start()
    await sink.submit(run)
    started = asyncio.get_running_loop().time()
    with caplog.at_level(logging.ERROR, logger="exporters.mlflow"):
        assert await sink.flush(15) is True  # the drop is on the (checkpointed) dead letters: commits go on
    assert asyncio.get_running_loop().time() - started < 10
    assert sink.dropped == {"rejected": 0, "trace_not_found": 1}
    [(letter, reason, detail)] = letters
    assert (letter.exporter, letter.score_id, reason) == ("mlflow", run.score_id, "trace_not_found")
    assert letter.key == trace_id.upper().encode() and b'"assessment_name": "length"' in letter.payload
    assert f"Trace with ID 'tr-{trace_id}' not found" in detail
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and run.score_id in errors[0] and "exporters.mlflow.trace_wait_s" in errors[0]


async def test_a_conversations_score_goes_on_its_last_turns_trace_under_mlflows_session_key(
    mlflow: MlflowServer, make_sink: SinkFactory, experiment: str
) -> None:
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    turns = [new_ids() for _ in range(2)]
    for trace_id, span_id in turns:
        await mlflow.send_traces(otlp_trace(trace_id, span_id, conversation=conversation), experiment)
    window = SessionWindow(
        conversation_id=conversation,
        turns=tuple(SessionTurn(trace_id=t, span_id=s, start_time_unix_nano=1, end_time_unix_nano=2) for t, s in turns),
        close_reason="idle",
    )
    last_trace, last_span = turns[-1]
    request = request_for(last_trace, last_span).model_copy(update={"session": window})
    run = await scored(code_scorer("coherence", 0.9), request)
    sink = make_sink()
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(20) is True
    info = await mlflow.trace(last_trace)
    assert info is not None and info["trace_metadata"]["mlflow.trace.session"] == conversation  # MLflow's own
    [row] = info["assessments"]
    assert "span_id" not in row  # the conversation's, not a span's
    assert row["metadata"]["mlflow.trace.session"] == conversation and row["metadata"]["turns"] == "2"
    assert await mlflow.assessments(turns[0][0]) == []


async def test_credentials_go_as_mlflow_clients_send_them_and_a_refusal_names_them(
    mlflow: MlflowServer, make_sink: SinkFactory, experiment: str, caplog: pytest.LogCaptureFixture
) -> None:
    front = await FaultyFront(mlflow.url).start()
    try:
        trace_id, span_id = new_ids()
        await mlflow.send_traces(otlp_trace(trace_id, span_id), experiment)
        block = MlflowExporterSettings(tracking_uri=front.url)
        sink = make_sink(front.url, headers=block.auth_headers({"MLFLOW_TRACKING_TOKEN": f"{TOKEN}\n"}))
        assert TOKEN not in repr(sink)
        await sink.start()
        front.always = 401
        with caplog.at_level(logging.INFO, logger="exporters.mlflow"):
            await sink.submit(await scored(code_scorer(), request_for(trace_id, span_id)))
            assert await sink.flush(2) is False
            assert sink.problem is not None and "MLFLOW_TRACKING_TOKEN" in sink.problem
            front.always = None
            assert await sink.flush(20) is True
        assert sink.problem is None and len(await mlflow.assessments(trace_id)) == 1
        assert {auth for _, _, auth in front.log} == {f"Bearer {TOKEN}"}
        assert TOKEN not in caplog.text
        basic = MlflowExporterSettings(tracking_uri=front.url, username="ops", password=SecretStr("pw"))
        assert basic.auth_headers({}) == {"Authorization": "Basic b3BzOnB3"}
    finally:
        await front.stop()


async def test_a_url_without_mlflows_api_blocks_and_names_the_key(make_sink: SinkFactory) -> None:
    front = await FaultyFront("http://127.0.0.1:9").start()
    try:
        front.always = 404  # a web server, not MLflow: a 404 without MLflow's RESOURCE_DOES_NOT_EXIST
        sink = make_sink(front.url)
        await sink.start()
        await sink.submit(await scored(code_scorer(), request_for(*new_ids())))
        assert await sink.flush(2) is False
        assert sink.problem is not None and "no MLflow tracking API" in sink.problem
        assert "exporters.mlflow.tracking_uri" in sink.problem and sink.waiting_for_traces == 0
    finally:
        await front.stop()


async def test_the_experiment_is_found_by_id_or_created_by_name_once(
    mlflow: MlflowServer, make_sink: SinkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"scores-{uuid.uuid4().hex[:8]}"
    assert await mlflow.experiment_id(name) is None
    with caplog.at_level(logging.INFO, logger="exporters.mlflow"):
        created = await resolve_experiment(mlflow.url, ExperimentRef(name=name), {}, 10)
        assert await resolve_experiment(mlflow.url, ExperimentRef(name=name), {}, 10) == created  # found, not made
        assert await resolve_experiment(mlflow.url, ExperimentRef(experiment_id=created), {}, 10) == created
    assert await mlflow.experiment_id(name) == created
    assert sum("created the MLflow experiment" in r.getMessage() for r in caplog.records) == 1
    sink = make_sink(experiment=ExperimentRef(name=name))
    with caplog.at_level(logging.INFO, logger="exporters.mlflow"):
        await sink.start()
        for _ in range(100):
            if sink.experiment_id is not None:
                break
            await asyncio.sleep(0.1)
    assert sink.experiment_id == created
    assert any(f"x-mlflow-experiment-id: {created}" in r.getMessage() for r in caplog.records)


def test_the_block_reads_mlflows_own_variables_and_checks_what_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ValidationError, match="required when the MLflow exporter is enabled"):
        MlflowExporterSettings(enabled=True)  # where the settings load (validate, run), the variable is read
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///tmp/mlruns")
    with pytest.raises(
        ValidationError, match=re.escape("http(s) URL in MLFLOW_TRACKING_URI (it holds 'file:///tmp/mlruns')")
    ):
        MlflowExporterSettings(enabled=True)
    env = {"MLFLOW_TRACKING_URI": "http://mlflow:5000", "MLFLOW_EXPERIMENT_NAME": "agents"}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env["MLFLOW_TRACKING_URI"])
    block = MlflowExporterSettings(enabled=True)
    assert block.resolved_tracking_uri(env) == "http://mlflow:5000"
    assert block.experiment(env) == ExperimentRef(name="agents")
    assert block.experiment({"MLFLOW_EXPERIMENT_ID": "7", **env}) == ExperimentRef(experiment_id="7")
    assert MlflowExporterSettings(tracking_uri="http://m:5000", experiment_id="3").experiment(env) == ExperimentRef("3")
    assert not MlflowExporterSettings().is_enabled  # a variable alone never turns the exporter on
    for bad, words in [
        ({"tracking_uri": "file:///tmp/mlruns"}, "http:// or https://"),
        ({"tracking_uri": "http://m:5000", "experiment_id": "1", "experiment_name": "a"}, "not both"),
        ({"tracking_uri": "http://m:5000", "username": "ops"}, "go together"),
    ]:
        with pytest.raises(ValidationError, match=words):
            MlflowExporterSettings.model_validate(bad)


def test_the_exporter_is_declared_with_its_drop_reasons_and_builds_from_its_block() -> None:
    kind = exporter_kinds()["mlflow"]
    assert kind.drop_reasons == ("rejected", "trace_not_found")
    assert kind.build(MlflowExporterSettings(), ExporterContext()) is None
    sink = kind.build(MlflowExporterSettings(tracking_uri="http://mlflow:5000", trace_wait_s=5), ExporterContext())
    assert isinstance(sink, MlflowAssessmentSink) and sink.trace_wait_s == 5
