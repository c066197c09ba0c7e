"""Content sent as OTLP log events, read by span and laid on it (``conventions.log_content``), and OTLP logs records
decoded (``ingest.logs``): log records made by the real OpenTelemetry SDK and encoded as the Collector writes them."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable
from typing import Any

from google.protobuf.json_format import MessageToDict
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry._logs import LogRecord as ApiLogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from sidecar.conventions import Selection, spans_to_runs
from sidecar.conventions.log_content import attach, awaits_content, content_by_span
from sidecar.core import names as n
from sidecar.ingest import decode_traces
from sidecar.ingest.logs import LogDecodeError, decode_logs, read_logs_record
from sidecar.ingest.pipeline import IngestConfig
from tests.support.otel import otlp_proto, record_spans

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0x00F067AA0BA902B7


def _logs(emit: Callable[[Any], None]) -> bytes:
    """Log records emitted through the SDK in the span context (TRACE_ID, SPAN_ID), as the Collector writes them."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "app"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    emit(provider.get_logger("tests"))
    provider.shutdown()
    return bytes(encode_logs(exporter.get_finished_logs()).SerializeToString())


def _context() -> Any:
    span = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1)))
    return set_span_in_context(span)


def _event(logger: Any, name: str, *, body: Any = None, attributes: dict[str, Any] | None = None) -> None:
    logger.emit(ApiLogRecord(event_name=name, body=body, attributes=attributes, context=_context()))


def _llm_span(**attributes: Any) -> Any:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("chat gpt-4o", attributes={n.GEN_AI_OPERATION_NAME: "chat", **attributes}):
            pass

    traces = decode_traces(otlp_proto(record_spans(build)))
    span = traces.resource_spans[0].scope_spans[0].spans[0]
    span.trace_id = TRACE_ID.to_bytes(16, "big")
    span.span_id = SPAN_ID.to_bytes(8, "big")
    return traces, span


def _joined_run(logs: bytes) -> Any:
    traces, span = _llm_span()
    assert awaits_content(span)
    found = content_by_span(decode_logs(logs))
    content = found.by_span[(span.trace_id, span.span_id)]
    assert content.complete
    assert attach(span, [content])
    assert not awaits_content(span)
    (run,) = spans_to_runs(traces, Selection(kinds=frozenset({"inference"}))).runs
    return run


def test_the_details_event_of_util_genai_is_laid_on_its_span_as_attributes() -> None:
    def emit(logger: Any) -> None:
        _event(
            logger,
            n.EVENT_INFERENCE_DETAILS,
            attributes={
                n.GEN_AI_OPERATION_NAME: "chat",
                n.GEN_AI_INPUT_MESSAGES: json.dumps(
                    [
                        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
                        {"role": "user", "parts": [{"type": "text", "content": "Capital of France?"}]},
                    ]
                ),
                n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "Paris."}]}]
                ),
            },
        )

    run = _joined_run(_logs(emit))
    assert [m.content for m in run.input.system_messages] == ["Be brief."]
    assert run.input.input_messages[-1].text == "Capital of France?"
    assert run.output[0].text == "Paris."


def test_openllmetry_message_events_are_laid_on_their_span_as_events() -> None:
    call = {"id": "call_1", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}, "type": "function"}

    def emit(logger: Any) -> None:
        _event(logger, n.EVENT_SYSTEM_MESSAGE, body={"content": "You report the weather."})
        _event(logger, n.EVENT_USER_MESSAGE, body={"content": "Weather in Paris?"})
        _event(logger, n.EVENT_ASSISTANT_MESSAGE, body={"content": None, "tool_calls": [call]})
        _event(logger, n.EVENT_TOOL_MESSAGE, body={"content": "18C"})  # no id: answers the open call
        _event(
            logger, n.EVENT_CHOICE, body={"index": 0, "message": {"content": "Sunny, 18C."}, "finish_reason": "stop"}
        )
        _event(logger, "app.audit", body="not content")  # an application's own log: not read

    run = _joined_run(_logs(emit))
    assert [m.content for m in run.input.system_messages] == ["You report the weather."]
    assert run.output[0].text == "Sunny, 18C."
    (invocation,) = [i for m in run.input.input_messages for i in m.tool_invocations]
    assert (invocation.tool_name, invocation.args, invocation.result) == ("get_weather", {"city": "Paris"}, "18C")


def test_a_choice_with_its_tool_calls_beside_the_message_and_content_without_a_span() -> None:
    call = {"id": "call_1", "function": {"name": "lookup", "arguments": "{}"}, "type": "function"}

    def emit(logger: Any) -> None:
        _event(logger, n.EVENT_USER_MESSAGE, body={"content": "Look it up."})
        _event(logger, n.EVENT_CHOICE, body={"index": 0, "message": {"content": None}, "tool_calls": [call]})
        logger.emit(ApiLogRecord(event_name=n.EVENT_USER_MESSAGE, body={"content": "no span"}))

    logs = _logs(emit)
    assert content_by_span(decode_logs(logs)).without_span == 1
    run = _joined_run(logs)
    (invocation,) = run.output[0].tool_invocations
    assert invocation.tool_name == "lookup" and invocation.state == "call"


def test_a_span_with_content_of_its_own_does_not_wait_and_keeps_its_own() -> None:
    _, span = _llm_span(**{"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "mine"})
    assert not awaits_content(span)
    _, agent = _llm_span(**{n.GEN_AI_OPERATION_NAME: "invoke_agent"})
    assert not awaits_content(agent)  # agent runs read their LLM calls: they never wait


def _as_json(logs: bytes) -> bytes:
    """OTLP/JSON as the Collector writes it: hex ids."""
    from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

    data = LogsData()
    data.ParseFromString(logs)
    document = MessageToDict(data)
    for resource in document["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    record[key] = base64.b64decode(record[key]).hex()
    return json.dumps(document).encode()


def test_logs_records_decode_as_proto_and_json_and_bad_ones_are_dead_letters() -> None:
    logs = _logs(lambda logger: _event(logger, n.EVENT_USER_MESSAGE, body={"content": "hi"}))
    proto = read_logs_record(logs, IngestConfig())
    as_json = read_logs_record(_as_json(logs), IngestConfig(encoding="otlp_json"))
    assert proto.logs == as_json.logs and proto.log_records == 1
    assert read_logs_record(b"\xff" * 40, IngestConfig()).letter is not None
    assert read_logs_record(logs, IngestConfig(max_record_bytes=10)).letter is not None
    assert read_logs_record(None, IngestConfig()).logs is None


@given(st.binary(max_size=300), st.sampled_from(["otlp_proto", "otlp_json"]))
def test_decoding_any_bytes_raises_only_a_decode_error(data: bytes, encoding: Any) -> None:
    with contextlib.suppress(LogDecodeError):
        decode_logs(data, encoding)
