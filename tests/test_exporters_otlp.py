"""The OTLP trace sink against a real OTLP receiver on loopback (gRPC and HTTP/protobuf), from real scorer runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from pydantic import BaseModel, SecretStr, ValidationError

from exporters import otlp as o
from exporters.delivery import DeadLetter
from exporters.otlp import OtlpExporterSettings, OtlpTraceSink
from sidecar.conventions import Selection, spans_to_runs
from sidecar.core import ScoredRun, Sink
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.scoring import JudgeModel, Scorer, create_scorer, not_scorable
from sidecar.scoring.agent import AgentRunInput, SystemMessage, assistant_message, user_message
from sidecar.scoring.types import JudgeExecutionFailure, JudgeExecutionSuccess
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY
from tests.support.otlp_receiver import OtlpReceiver, ReceivedLog, ReceivedSpan, attributes
from tests.support.runs import scored_run_of

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
QUESTION = "How do I reset my password? PROMPT-MARKER-Q"
ANSWER = "Open Settings, choose Security, then Reset password. PROMPT-MARKER-A"
INSTRUCTIONS = "You are a strict judge. PROMPT-MARKER-I"
REASON = "The score is 0.75 because the answer addresses the question."
PROTOCOLS = ["grpc", "http/protobuf"]

ANALYZE_USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 64},
    "completion_tokens_details": {"reasoning_tokens": 12},
}
REASON_USAGE = {"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}


class Analysis(BaseModel):
    addressed: bool
    confidence: float


def judge_model(judge_server: JudgeServer) -> JudgeModel:
    return JudgeModel(
        model="openai/gpt-4o-mini",
        api_base=judge_server.url,
        api_key=SecretStr(SECRET_KEY),
        transport="http",
        timeout_s=2.0,
        max_retries=0,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
    )


def judged_scorer(judge_server: JudgeServer) -> Scorer:
    return (
        create_scorer(
            id="helpfulness",
            name="Helpfulness",
            judge={"model": judge_model(judge_server), "instructions": INSTRUCTIONS},
        )
        .analyze(
            description="is the question addressed",
            create_prompt=lambda ctx: f"Q: {ctx.run.input.input_messages[0].text}\nA: {ctx.run.output[0].text}",
            output_schema=Analysis,
        )
        .generate_score(lambda ctx: ctx.results.analyze_step_result.confidence)
        .generate_reason(description="explain", create_prompt=lambda ctx: f"Explain the score {ctx.score}.")
    )


def make_request(trace_id: str = TRACE_ID, span_id: str = SPAN_ID) -> ScorerRunRequest:
    target = SpanTarget(
        trace_id=trace_id,
        span_id=span_id,
        span_name="invoke_agent support",
        convention="genai",
        agent_name="support",
        version="2.3.0",
        service_name="shop",
        model="gpt-4o",
    )
    return ScorerRunRequest(
        target=target,
        input=AgentRunInput(input_messages=(user_message(QUESTION),), system_messages=(SystemMessage(content="Hi"),)),
        output=(assistant_message(ANSWER),),
    )


async def run_scorer(scorer: Scorer, request: ScorerRunRequest | None = None) -> ScoredRun:
    """Run the scorer as the runtime does and wrap the outcome."""
    return await scored_run_of(scorer, request or make_request(), agent_label="support")


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


SinkFactory = Callable[..., OtlpTraceSink]


@pytest.fixture
async def make_sink(otlp_receiver: OtlpReceiver, protocol: str) -> AsyncIterator[SinkFactory]:
    sinks: list[OtlpTraceSink] = []

    def make(**kwargs: Any) -> OtlpTraceSink:
        options: dict[str, Any] = {"timeout_s": 5, "schedule_delay_s": 0.05, "events": "both"}
        options.update(kwargs)
        sink = OtlpTraceSink(otlp_receiver.endpoint(protocol), protocol, **options)  # type: ignore[arg-type]
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        await sink.close(timeout_s=2)


def spans_of(receiver: OtlpReceiver, trace_id: str = TRACE_ID) -> list[ReceivedSpan]:
    return [s for s in receiver.spans if s.trace_id == trace_id]


def logs_of(receiver: OtlpReceiver, trace_id: str = TRACE_ID) -> list[ReceivedLog]:
    return [r for r in receiver.logs if r.trace_id == trace_id]


def run_span(spans: list[ReceivedSpan]) -> ReceivedSpan:
    [span] = [s for s in spans if s.name.startswith("scorer run: ")]
    return span


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.parent_span_id == parent.span_id), key=lambda s: s.span.start_time_unix_nano)


def event_attributes(span: ReceivedSpan) -> dict[str, Any]:
    [event] = [e for e in span.span.events if e.name == o.EVENT_EVALUATION_RESULT]
    return attributes(event.attributes)


def all_string_values(spans: list[ReceivedSpan], logs: list[ReceivedLog]) -> str:
    values: list[str] = []
    for s in spans:
        values.extend(str(v) for v in s.attributes.values())
        for event in s.span.events:
            values.extend(str(kv.value) for kv in event.attributes)
    for r in logs:
        values.extend(str(v) for v in r.attributes.values())
        values.append(str(r.record.body))
    return "\n".join(values)


async def test_the_sink_implements_the_protocol() -> None:
    sink = OtlpTraceSink("http://127.0.0.1:1")
    assert isinstance(sink, Sink)
    assert sink.name == "otlp"
    assert await sink.flush(1) is True  # never started: nothing submitted
    with pytest.raises(RuntimeError):
        await sink.submit(await run_scorer(create_scorer(id="x").generate_score(lambda ctx: 1.0)))
    with pytest.raises(ValueError):
        OtlpTraceSink("http://127.0.0.1:1", "http/json")  # type: ignore[arg-type]


async def test_a_judged_run_becomes_a_run_span_with_judge_children_and_an_evaluation_event(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, make_sink: SinkFactory, protocol: str
) -> None:
    judge_server.script(
        Reply.json({"addressed": True, "confidence": 0.75}, usage=ANALYZE_USAGE, cost=0.0021),
        Reply(content=REASON, usage=REASON_USAGE),
    )
    run = await run_scorer(judged_scorer(judge_server))
    assert run.outcome == "scored", run.error
    assert run.result is not None and run.result.judge is not None
    executions = run.result.judge.executions()
    assert len(executions) == 2

    sink = make_sink()
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(10) is True
    assert sink.outstanding == 0

    spans = spans_of(otlp_receiver)
    assert len(spans) == 3
    assert {s.protocol for s in spans} == {protocol}
    parent = run_span(spans)
    assert parent.name == "scorer run: 'helpfulness'"
    assert parent.trace_id == TRACE_ID
    assert parent.parent_span_id == SPAN_ID
    assert parent.span.kind == Span.SPAN_KIND_INTERNAL
    assert parent.attributes["openinference.span.kind"] == "EVALUATOR"  # Phoenix labels it an evaluator
    assert parent.span.start_time_unix_nano == run.started_unix_nano
    assert parent.span.end_time_unix_nano == run.finished_unix_nano
    assert parent.span.status.code == Status.STATUS_CODE_UNSET
    assert parent.resource["service.name"] == "scoring-sidecar"
    attrs = parent.attributes
    assert attrs[o.SIDECAR_INTERNAL] is True
    assert attrs["scoring_sidecar.internal"] is True
    assert attrs[o.SCORER_ID] == "helpfulness"
    assert attrs[o.SCORER_NAME] == "Helpfulness"
    assert attrs[o.SCORE_ID] == run.score_id
    assert attrs[o.RUN_ID] == run.result.run_id
    assert attrs[o.RUN_OUTCOME] == "scored"
    assert attrs[o.AGENT_NAME] == "support"
    assert attrs[o.AGENT_VERSION] == "2.3.0"
    assert attrs[o.GEN_AI_EVALUATION_NAME] == "Helpfulness"
    assert attrs[o.GEN_AI_EVALUATION_SCORE_VALUE] == pytest.approx(0.75)
    assert attrs[o.JUDGE_EXECUTION_COUNT] == 2
    estimates = [e.estimated_cost_usd for e in executions if e.estimated_cost_usd is not None]
    if estimates:
        assert attrs[o.JUDGE_ESTIMATED_COST_USD] == pytest.approx(sum(estimates))
    assert o.ERROR_TYPE not in attrs
    assert "gen_ai.operation.name" not in attrs

    assert event_attributes(parent) == {
        "gen_ai.evaluation.name": "Helpfulness",
        "gen_ai.evaluation.score.value": pytest.approx(0.75),
        "gen_ai.evaluation.explanation": REASON,
        o.SCORE_ID: run.score_id,
    }

    kids = children(spans, parent)
    assert [k.name for k in kids] == ["chat gpt-4o-mini", "chat gpt-4o-mini"]
    assert all(k.trace_id == TRACE_ID and k.span.kind == Span.SPAN_KIND_CLIENT for k in kids)
    # Laid out one after the other from the run's start, each as long as the execution.
    assert kids[0].span.start_time_unix_nano == run.started_unix_nano
    assert kids[1].span.start_time_unix_nano == kids[0].span.end_time_unix_nano
    for kid, execution in zip(kids, executions, strict=True):
        assert isinstance(execution, JudgeExecutionSuccess)
        assert kid.span.end_time_unix_nano - kid.span.start_time_unix_nano == execution.duration_ms * 1_000_000
        k = kid.attributes
        assert k["scoring_sidecar.internal"] is True
        assert k["gen_ai.operation.name"] == "chat"
        assert k["gen_ai.provider.name"] == "openai"
        assert k["gen_ai.request.model"] == "gpt-4o-mini"
        assert k["gen_ai.usage.input_tokens"] == execution.usage.input_tokens
        assert k["gen_ai.usage.output_tokens"] == execution.usage.output_tokens
        assert k[o.JUDGE_ATTEMPT_COUNT] == execution.attempt_count == 1
        assert k[o.JUDGE_MODEL_CALL_COUNT] == execution.model_call_count == 1
        assert kid.span.status.code == Status.STATUS_CODE_UNSET
    analyze, reason = kids[0].attributes, kids[1].attributes
    assert analyze[o.JUDGE_STEP] == "analyze" and reason[o.JUDGE_STEP] == "generate_reason"
    assert analyze["gen_ai.usage.input_tokens"] == 120 and analyze["gen_ai.usage.output_tokens"] == 30
    assert analyze["gen_ai.usage.cache_read.input_tokens"] == 64
    assert analyze["gen_ai.usage.reasoning.output_tokens"] == 12
    assert "gen_ai.usage.cache_read.input_tokens" not in reason
    # Cost: the provider's when it reported one, else the local estimate (when the price table knows the model).
    assert analyze["gen_ai.usage.cost.amount"] == pytest.approx(0.0021)
    assert analyze["gen_ai.usage.cost.currency"] == "USD"
    assert analyze["gen_ai.usage.cost.source"] == "provider"
    reason_execution = executions[1]
    if reason_execution.estimated_cost_usd is not None:
        assert reason["gen_ai.usage.cost.amount"] == pytest.approx(reason_execution.estimated_cost_usd)
        assert reason["gen_ai.usage.cost.currency"] == "USD"
        assert reason["gen_ai.usage.cost.source"] == "local"
    else:
        assert "gen_ai.usage.cost.amount" not in reason

    # The evaluation event as a log record parented to the scored span itself.
    [record] = logs_of(otlp_receiver)
    assert record.span_id == SPAN_ID
    assert record.record.event_name == "gen_ai.evaluation.result"
    assert record.record.time_unix_nano == run.finished_unix_nano
    assert record.resource["service.name"] == "scoring-sidecar"
    assert record.attributes == {
        "scoring_sidecar.internal": True,
        "gen_ai.evaluation.name": "Helpfulness",
        "gen_ai.evaluation.score.value": pytest.approx(0.75),
        "gen_ai.evaluation.explanation": REASON,
        o.SCORE_ID: run.score_id,
    }

    # Loop guard: fed back to the ingest side, none of our spans is ever scored (not even the chat spans).
    mapped = [
        spans_to_runs(request, Selection(kinds=frozenset({"agent", "inference"})))
        for request in otlp_receiver.trace_requests
    ]
    assert all(m.runs == () for m in mapped)
    assert sum(m.skipped.internal for m in mapped) == 2

    # Neither prompts, the conversation nor the key are exported.
    exported = all_string_values(spans, [record])
    assert "PROMPT-MARKER" not in exported
    assert SECRET_KEY not in exported
    assert "Explain the score" not in exported


@pytest.mark.parametrize("events", ["log", "span", "both"])
async def test_the_evaluation_goes_out_as_events_says_a_log_record_on_the_scored_span_or_a_span_event(
    otlp_receiver: OtlpReceiver, make_sink: SinkFactory, protocol: str, events: str
) -> None:
    """events: log is OpenTelemetry's way now (the span events API deprecated): the evaluation is a log record
    whose trace and span ids are the scored span's, with the GenAI conventions' attributes, and no span event;
    span (the default) the other way round; both, both."""
    run = await run_scorer(create_scorer(id="length", name="Length").generate_score(lambda ctx: 0.25))
    sink = make_sink(events=events)
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(10) is True
    parent = run_span(spans_of(otlp_receiver))
    span_events = [e.name for e in parent.span.events]
    records = logs_of(otlp_receiver)
    assert span_events == ([] if events == "log" else [o.EVENT_EVALUATION_RESULT])
    assert len(records) == (0 if events == "span" else 1)
    if events == "span":
        return
    [record] = records
    assert (record.trace_id, record.span_id) == (TRACE_ID, SPAN_ID)  # the scored span, not the scorer-run span
    assert record.protocol == protocol
    assert record.record.event_name == "gen_ai.evaluation.result"
    assert record.record.severity_number == SeverityNumber.SEVERITY_NUMBER_INFO
    assert record.attributes == {
        "scoring_sidecar.internal": True,  # the loop guard
        "gen_ai.evaluation.name": "Length",
        "gen_ai.evaluation.score.value": 0.25,
        o.SCORE_ID: run.score_id,
    }


async def test_events_log_falls_back_to_span_events_on_a_receiver_without_logs(
    traces_only_receiver: OtlpReceiver, protocol: str
) -> None:
    """A receiver without a logs signal: once it says so, the evaluations of later runs are span events, never
    exported nowhere; flushes confirm."""
    receiver = traces_only_receiver
    scorer = create_scorer(id="length").generate_score(lambda ctx: 0.5)
    endpoint = receiver.endpoint(protocol)
    sink = OtlpTraceSink(endpoint, protocol, timeout_s=5, schedule_delay_s=0.05, events="log")  # type: ignore[arg-type]
    await sink.start()
    try:
        await sink.submit(await run_scorer(scorer, make_request(span_id=f"{1:016x}")))
        assert await sink.flush(10) is True
        assert sink.disabled_signals == {"logs"}
        await sink.submit(await run_scorer(scorer, make_request(span_id=f"{2:016x}")))
        assert await sink.flush(10) is True
    finally:
        await sink.close()
    runs = {s.parent_span_id: s for s in spans_of(receiver) if s.name.startswith("scorer run:")}
    assert [e.name for e in runs[f"{1:016x}"].span.events] == []  # its log record was discarded (counted)
    assert [e.name for e in runs[f"{2:016x}"].span.events] == [o.EVENT_EVALUATION_RESULT]
    assert receiver.logs == []


def test_evaluation_logs_still_loads_as_events_and_cannot_be_set_beside_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="exporters.otlp"):
        on = OtlpExporterSettings.model_validate({"endpoint": "http://collector:4317", "evaluation_logs": True})
        off = OtlpExporterSettings.model_validate({"endpoint": "http://collector:4317", "evaluation_logs": False})
    assert (on.events, off.events) == ("both", "span")
    assert [r.getMessage() for r in caplog.records] == [
        "exporters.otlp.evaluation_logs is deprecated: write events: both instead (span | log | both)",
        "exporters.otlp.evaluation_logs is deprecated: write events: span instead (span | log | both)",
    ]
    with pytest.raises(ValidationError, match="set events only"):
        OtlpExporterSettings.model_validate({"endpoint": "http://c:4317", "evaluation_logs": True, "events": "log"})
    with pytest.raises(ValidationError, match="events"):
        OtlpExporterSettings.model_validate({"endpoint": "http://c:4317", "events": "logs"})


async def test_a_failed_run_ends_with_status_error_and_no_score(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, make_sink: SinkFactory
) -> None:
    judge_server.script(Reply.error(400, "bad request"))
    run = await run_scorer(judged_scorer(judge_server))
    assert run.outcome == "failed" and run.error is not None
    assert run.result is not None and run.result.judge is not None
    [execution] = run.result.judge.executions()
    assert isinstance(execution, JudgeExecutionFailure)

    sink = make_sink()
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(10) is True

    spans = spans_of(otlp_receiver)
    parent = run_span(spans)
    assert parent.span.status.code == Status.STATUS_CODE_ERROR
    attrs = parent.attributes
    assert attrs[o.ERROR_TYPE] == run.error.cause_name
    assert attrs[o.RUN_OUTCOME] == "failed"
    assert attrs[o.RUN_FAILED_STEP] == "analyze"
    assert o.GEN_AI_EVALUATION_SCORE_VALUE not in attrs
    event = event_attributes(parent)
    assert event["error.type"] == run.error.cause_name
    assert "gen_ai.evaluation.score.value" not in event

    [kid] = children(spans, parent)
    assert kid.span.status.code == Status.STATUS_CODE_ERROR
    assert kid.attributes["error.type"] == execution.error.name
    assert kid.attributes["gen_ai.operation.name"] == "chat"

    [record] = logs_of(otlp_receiver)
    assert record.span_id == SPAN_ID
    assert record.attributes["error.type"] == run.error.cause_name
    assert "gen_ai.evaluation.score.value" not in record.attributes


async def test_a_failed_run_never_exports_a_recovered_score(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, make_sink: SinkFactory
) -> None:
    judge_server.script(Reply.json({"addressed": True, "confidence": 0.5}), Reply.error(400, "no reason today"))
    run = await run_scorer(judged_scorer(judge_server))
    assert run.outcome == "failed" and run.result is not None and run.result.score == 0.5

    sink = make_sink(events="span")
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(10) is True
    parent = run_span(spans_of(otlp_receiver))
    assert o.GEN_AI_EVALUATION_SCORE_VALUE not in parent.attributes
    assert "gen_ai.evaluation.score.value" not in event_attributes(parent)
    assert [k.span.status.code for k in children(spans_of(otlp_receiver), parent)] == [
        Status.STATUS_CODE_UNSET,
        Status.STATUS_CODE_ERROR,
    ]
    assert otlp_receiver.logs == []  # events="span": span event only


async def test_function_only_and_not_scorable_runs(otlp_receiver: OtlpReceiver, make_sink: SinkFactory) -> None:
    other_trace = "0af7651916cd43dd8448eb211c80319c"
    scored = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.25))
    skipped = await run_scorer(
        create_scorer(id="needs-tools")
        .preprocess(lambda ctx: not_scorable("no tool calls in the run"))
        .generate_score(lambda ctx: 1.0),
        make_request(trace_id=other_trace),
    )
    assert scored.outcome == "scored" and skipped.outcome == "not_scorable"

    sink = make_sink()
    await sink.start()
    await sink.submit(scored)
    await sink.submit(skipped)
    assert await sink.flush(10) is True

    [function_only] = spans_of(otlp_receiver)  # no judge: no child span
    assert function_only.name == "scorer run: 'length'"
    assert function_only.attributes[o.GEN_AI_EVALUATION_SCORE_VALUE] == pytest.approx(0.25)
    assert function_only.attributes[o.JUDGE_EXECUTION_COUNT] == 0
    assert o.JUDGE_ESTIMATED_COST_USD not in function_only.attributes

    [span] = spans_of(otlp_receiver, other_trace)
    assert span.parent_span_id == SPAN_ID
    assert span.span.status.code == Status.STATUS_CODE_UNSET
    assert span.attributes[o.RUN_OUTCOME] == "not_scorable"
    assert span.attributes[o.NOT_SCORABLE_REASON] == "no tool calls in the run"
    assert span.attributes[o.NOT_SCORABLE_STEP] == "preprocess"
    assert o.GEN_AI_EVALUATION_SCORE_VALUE not in span.attributes
    assert event_attributes(span) == {
        "gen_ai.evaluation.name": "needs-tools",
        "gen_ai.evaluation.explanation": "no tool calls in the run",
        o.SCORE_ID: skipped.score_id,
    }
    assert len(logs_of(otlp_receiver)) == 1 and len(logs_of(otlp_receiver, other_trace)) == 1


async def test_flush_is_false_while_the_receiver_fails_and_the_spans_go_out_once_it_recovers(
    otlp_receiver: OtlpReceiver, make_sink: SinkFactory, protocol: str
) -> None:
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5))
    # A short export timeout: the exporters' first retry back-off (about 1 s) does not fit, so a failure is quick.
    sink = make_sink(timeout_s=0.5)
    await sink.start()
    otlp_receiver.fail()
    await sink.submit(run)
    assert await sink.flush(10) is False
    assert otlp_receiver.requests >= 2  # spans and logs were both attempted
    assert spans_of(otlp_receiver) == []
    assert sink.outstanding == 2  # kept: the run span and its log record
    # Still failing: the next flush sends them again and fails again (no commit past a lost span).
    assert await sink.flush(10) is False

    otlp_receiver.recover()
    assert await sink.flush(10) is True
    assert sink.outstanding == 0
    assert [s.name for s in spans_of(otlp_receiver)] == ["scorer run: 'length'"]
    assert len(logs_of(otlp_receiver)) == 1
    assert await sink.flush(10) is True  # nothing left over


async def test_flush_fails_for_non_retryable_errors_too(otlp_receiver: OtlpReceiver, make_sink: SinkFactory) -> None:
    """A receiver that answers a permanent error (HTTP 400, gRPC INVALID_ARGUMENT) for the batch: the one rule
    of every sink (docs/delivery.md) replaces the old hold, which stalled commits forever: the flush
    that sees it fails, the span is dropped, counted and set aside as OTLP/JSON, and the next flush confirms.
    (Under the old hold the span was kept and sent again until the receiver took it: ``spans_of == 1`` below.)"""
    import grpc  # type: ignore[import-untyped]

    letters: list[tuple[DeadLetter, str, str]] = []
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5))
    sink = make_sink(events="span", set_aside=lambda *letter: letters.append(letter))
    await sink.start()
    otlp_receiver.fail(http_status=400, grpc_code=grpc.StatusCode.INVALID_ARGUMENT)
    await sink.submit(run)
    assert await sink.flush(10) is False
    otlp_receiver.recover()
    assert await sink.flush(10) is True
    assert spans_of(otlp_receiver) == [] and sink.dropped == 1 and sink.outstanding == 0
    [(letter, reason, detail)] = letters
    assert (letter.exporter, letter.score_id, reason) == ("otlp", run.score_id, "rejected")
    assert letter.key == TRACE_ID.encode()
    assert ("HTTP 400" in detail or "INVALID_ARGUMENT" in detail) and "receiver told to fail" in detail
    [resource_spans] = json.loads(letter.payload)["resourceSpans"]  # OTLP/JSON: replayable to /v1/traces
    [span] = resource_spans["scopeSpans"][0]["spans"]
    assert span["name"] == "scorer run: 'length'"


async def test_a_passing_fault_after_the_sdks_retries_is_kept_not_dropped(
    otlp_receiver: OtlpReceiver, make_sink: SinkFactory
) -> None:
    """The batch sent again after a failed export is what decides: a receiver that fails (503, UNAVAILABLE)
    keeps the spans for the next flush; only a permanent answer drops them."""
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5))
    sink = make_sink(events="span", timeout_s=0.5)
    await sink.start()
    otlp_receiver.fail()
    await sink.submit(run)
    assert await sink.flush(10) is False
    assert sink.dropped == 0 and sink.outstanding == 1
    otlp_receiver.recover()
    assert await sink.flush(10) is True
    assert len(spans_of(otlp_receiver)) == 1 and sink.dropped == 0


async def test_a_full_queue_makes_submit_wait_for_room_and_drops_nothing(
    otlp_receiver: OtlpReceiver, make_sink: SinkFactory
) -> None:
    runs = [await run_scorer(create_scorer(id=f"s{i}").generate_score(lambda ctx: 0.5)) for i in range(3)]
    sink = make_sink(events="span", max_queued=1, schedule_delay_s=0.2)
    await sink.start()
    await sink.submit(runs[0])
    waiting = asyncio.create_task(sink.submit(runs[1]))
    await asyncio.sleep(0.05)
    assert not waiting.done() and sink.outstanding == 1  # held back until the export makes room
    await asyncio.wait_for(waiting, 5)
    await asyncio.wait_for(sink.submit(runs[2]), 5)
    assert await sink.flush(10) is True
    assert sink.dropped == 0
    assert sorted(s.name for s in spans_of(otlp_receiver)) == [f"scorer run: 's{i}'" for i in range(3)]


async def test_a_redelivered_run_reexports_the_same_span_ids(
    otlp_receiver: OtlpReceiver, make_sink: SinkFactory, judge_server: JudgeServer
) -> None:
    judge_server.script(*[Reply.json({"score": 0.5})] * 3)
    scorer = create_scorer(id="judged", judge=judge_model(judge_server)).generate_score(
        description="score", create_prompt=lambda ctx: "score it"
    )
    first = await run_scorer(scorer)
    again = await run_scorer(scorer)  # the same span scored again after a redelivery
    other = await run_scorer(scorer, make_request(span_id="00000000000000aa"))
    sink = make_sink(events="span")
    await sink.start()
    for run in (first, again, other):
        await sink.submit(run)
    assert await sink.flush(10)
    spans = spans_of(otlp_receiver)
    assert len(spans) == 6  # a run span and a judge span per run
    by_parent: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        by_parent.setdefault(span.parent_span_id, []).append(span)
    [run_a, run_b] = by_parent[SPAN_ID]
    [run_c] = by_parent["00000000000000aa"]
    assert run_a.span_id == run_b.span_id != run_c.span_id
    assert [s.span_id for s in by_parent[run_a.span_id]] == [by_parent[run_a.span_id][0].span_id] * 2
    assert len({s.span_id for s in spans}) == 4  # two distinct runs, each a run span and a judge span


async def test_headers_are_sent_and_http_is_compressed(
    otlp_receiver: OtlpReceiver, make_sink: SinkFactory, protocol: str
) -> None:
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5))
    sink = make_sink(headers={"Authorization": "Bearer otlp-token-123", "X-Tenant": "acme"})
    assert "otlp-token-123" not in repr(sink)
    await sink.start()
    await sink.submit(run)
    assert await sink.flush(10) is True
    assert otlp_receiver.headers
    for headers in otlp_receiver.headers:
        lowered = {k.lower(): v for k, v in headers.items()}
        assert lowered["authorization"] == "Bearer otlp-token-123"
        assert lowered["x-tenant"] == "acme"
    if protocol == "http/protobuf":
        assert set(otlp_receiver.encodings) == {"gzip"}


async def test_http_endpoint_may_name_the_traces_path(otlp_receiver: OtlpReceiver) -> None:
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5))
    sink = OtlpTraceSink(
        otlp_receiver.endpoint("http/protobuf") + "/v1/traces/",
        "http/protobuf",
        compression="none",
        timeout_s=5,
        events="both",
    )
    await sink.start()
    try:
        await sink.submit(run)
        assert await sink.flush(10) is True
    finally:
        await sink.close()
    assert len(spans_of(otlp_receiver)) == 1 and len(logs_of(otlp_receiver)) == 1
    assert set(otlp_receiver.encodings) == {""}


async def test_runs_with_invalid_ids_are_skipped(otlp_receiver: OtlpReceiver, make_sink: SinkFactory) -> None:
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5), make_request(trace_id="0" * 32))
    sink = make_sink()
    await sink.start()
    await sink.submit(run)
    assert sink.skipped == 1
    assert await sink.flush(5) is True
    assert otlp_receiver.spans == []


async def test_close_exports_what_is_queued(otlp_receiver: OtlpReceiver, protocol: str) -> None:
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5))
    sink = OtlpTraceSink(otlp_receiver.endpoint(protocol), protocol, timeout_s=5)  # type: ignore[arg-type]
    await sink.start()
    await sink.submit(run)
    await sink.close()
    assert len(spans_of(otlp_receiver)) == 1
    assert await sink.flush(1) is True  # closed: nothing pending any more
    await sink.close()  # idempotent


# --- a receiver without a logs signal, a receiver refusing traces, resources copied from the scored span ----


async def test_a_receiver_without_logs_turns_the_log_records_off_and_flushes_confirm(
    traces_only_receiver: OtlpReceiver, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Tempo, Jaeger, Phoenix, Langfuse: HTTP 404 (or 405) on /v1/logs, gRPC UNIMPLEMENTED. The first failed
    log export turns the log records off with one ERROR line; spans keep flowing and every flush confirms."""
    receiver = traces_only_receiver
    scorer = create_scorer(id="length").generate_score(lambda ctx: 0.5)
    sink = OtlpTraceSink(
        receiver.endpoint(protocol),
        protocol,  # type: ignore[arg-type]
        timeout_s=5,
        schedule_delay_s=0.05,
        events="both",
    )
    await sink.start()
    try:
        with caplog.at_level("ERROR", logger="exporters.otlp"):
            for i in range(3):
                await sink.submit(await run_scorer(scorer, make_request(span_id=f"{i + 1:016x}")))
            assert await sink.flush(10) is True
            assert sink.disabled_signals == {"logs"}
            for i in range(3, 6):
                await sink.submit(await run_scorer(scorer, make_request(span_id=f"{i + 1:016x}")))
            assert await sink.flush(10) is True
        assert sink.outstanding == 0 and sink.problem is None
    finally:
        await sink.close()
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    message = errors[0].getMessage()
    assert "no logs signal" in message and "exporters.otlp.events" in message
    assert ("HTTP 404" if protocol == "http/protobuf" else "gRPC UNIMPLEMENTED") in message
    assert receiver.endpoint(protocol) in message
    assert len([s for s in spans_of(receiver) if s.name.startswith("scorer run:")]) == 6
    assert receiver.logs == []


async def test_a_receiver_refusing_traces_blocks_flushes_and_says_which_key_to_change(
    otlp_receiver: OtlpReceiver, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    import grpc

    sink = OtlpTraceSink(
        otlp_receiver.endpoint(protocol),
        protocol,  # type: ignore[arg-type]
        timeout_s=2,
        schedule_delay_s=0.05,
        headers={"Authorization": f"Bearer {SECRET_KEY}"},
    )
    await sink.start()
    run = await run_scorer(create_scorer(id="length").generate_score(lambda ctx: 0.5))
    otlp_receiver.fail(http_status=401, grpc_code=grpc.StatusCode.UNAUTHENTICATED)
    try:
        with caplog.at_level("INFO", logger="exporters.otlp"):
            await sink.submit(run)
            assert await sink.flush(10) is False
            assert await sink.flush(10) is False  # kept, sent again, refused again: one ERROR line only
            assert sink.problem is not None and "exporters.otlp.headers" in sink.problem
            assert ("HTTP 401" if protocol == "http/protobuf" else "gRPC UNAUTHENTICATED") in sink.problem
            assert sink.outstanding == 1
            otlp_receiver.recover()
            assert await sink.flush(10) is True
        assert sink.problem is None and sink.disabled_signals == frozenset()
    finally:
        await sink.close()
    # The sink's own: one line for the refusal (the SDK's exporter logs each failed export as well).
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and r.name == "exporters.otlp"]
    assert len(errors) == 1 and "refuses traces" in errors[0], errors
    assert any("takes traces again" in r.getMessage() for r in caplog.records)
    assert all(SECRET_KEY not in r.getMessage() for r in caplog.records)
    assert len(spans_of(otlp_receiver)) == 1


async def test_the_scored_spans_resource_attributes_are_copied_onto_the_scores_spans(
    otlp_receiver: OtlpReceiver, make_sink: SinkFactory
) -> None:
    """Backends file traces by resource (Phoenix projects, Langfuse environments, Datadog env): the scores
    carry the scored trace's, whichever arrives first. The sidecar's own service.name stays."""
    sink = make_sink(resource_attributes=("openinference.project.name", "deployment.environment"))
    await sink.start()
    scorer = create_scorer(id="length").generate_score(lambda ctx: 0.5)

    def request(trace_id: str, resource: tuple[tuple[str, Any], ...]) -> ScorerRunRequest:
        base = make_request(trace_id=trace_id)
        return base.model_copy(update={"target": base.target.model_copy(update={"resource_attributes": resource})})

    shop, billing, bare = "1" * 32, "2" * 32, "3" * 32
    await sink.submit(
        await run_scorer(
            scorer,
            request(shop, (("openinference.project.name", "shop"), ("deployment.environment", "prod"))),
        )
    )
    await sink.submit(
        await run_scorer(scorer, request(billing, (("openinference.project.name", "billing"), ("k8s.pod", "x"))))
    )
    await sink.submit(await run_scorer(scorer, request(bare, ())))
    assert await sink.flush(10) is True
    await sink.close()

    def resource_of(trace_id: str) -> dict[str, Any]:
        [span] = spans_of(otlp_receiver, trace_id)
        [record] = logs_of(otlp_receiver, trace_id)
        assert record.resource == span.resource
        return span.resource

    assert resource_of(shop)["openinference.project.name"] == "shop"
    assert resource_of(shop)["deployment.environment"] == "prod"
    assert resource_of(billing)["openinference.project.name"] == "billing"
    assert "k8s.pod" not in resource_of(billing)  # not in the configured list
    assert "openinference.project.name" not in resource_of(bare)
    for trace_id in (shop, billing, bare):
        assert resource_of(trace_id)["service.name"] == "scoring-sidecar"
