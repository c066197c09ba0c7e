"""Message content sent as OTLP log events, read by the span it belongs to, and laid on that span.

Instrumentations that follow OTEP 4430 (span events deprecated in favour of log-based events) write an LLM call's
content as log records in the call's span context, not on the span:

- ``gen_ai.client.inference.operation.details`` (``opentelemetry-instrumentation-openai-v2`` and every
  instrumentation on ``opentelemetry-util-genai`` with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=
  event_only`` or ``span_and_event``): one record per call whose attributes are the span attributes the content would
  have been (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``);
- the per-message events ``gen_ai.system|user|assistant|tool.message`` and ``gen_ai.choice`` (OpenLLMetry with
  ``use_attributes=False``, and the older OpenTelemetry instrumentations), the message's fields in the record's
  body; Azure AI Inference's and Semantic Kernel's, the message as JSON in ``gen_ai.event.content``; the 1.26–1.27
  ``gen_ai.content.prompt|completion`` events.

Each is laid on its span as the instrumentation would have written it there (the details' attributes as span
attributes, the per-message events as span events, their body's fields as attributes), so that everything that
reads spans reads them, unchanged: the span and trace stages, dead letters, conversations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, LogsData
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from sidecar.conventions.selection import classify
from sidecar.core import names

__all__ = ["LogContent", "SpanContent", "SpanKey", "attach", "awaits_content", "content_by_span"]

SpanKey = tuple[bytes, bytes]  # (trace id, span id)

# The details event's attributes that are content (its others repeat the span's: model, usage, finish reasons).
_DETAILS_CONTENT = frozenset(
    {
        names.GEN_AI_INPUT_MESSAGES,
        names.GEN_AI_OUTPUT_MESSAGES,
        names.GEN_AI_SYSTEM_INSTRUCTIONS,
        "gen_ai.tool.definitions",
    }
)
_MESSAGE_EVENTS = names.CONTENT_EVENT_NAMES
# The events that hold a call's answer: once one arrived, the span's content is whole (the request's events are
# written before the call, its answer's after).
_OUTPUT_EVENTS = frozenset({names.EVENT_CHOICE, names.EVENT_CONTENT_COMPLETION})
# What a span carries when its content is its own, in any convention the mapping reads.
_CONTENT_KEYS = frozenset(
    {
        names.GEN_AI_INPUT_MESSAGES,
        names.GEN_AI_OUTPUT_MESSAGES,
        names.GEN_AI_PROMPT,
        names.GEN_AI_COMPLETION,
        names.INPUT_VALUE,
        names.OUTPUT_VALUE,
        names.TRACELOOP_ENTITY_INPUT,
        names.TRACELOOP_ENTITY_OUTPUT,
    }
)
_CONTENT_PREFIXES = (
    f"{names.GEN_AI_PROMPT}.",
    f"{names.GEN_AI_COMPLETION}.",
    f"{names.LLM_INPUT_MESSAGES}.",
    f"{names.LLM_OUTPUT_MESSAGES}.",
    names.MASTRA_PREFIX,
)


@dataclass(slots=True)
class SpanContent:
    """What the log records of one span hold: attributes to lay on it, events to add to it, in order."""

    attributes: list[KeyValue] = field(default_factory=list)
    events: list[tuple[str, int, list[KeyValue]]] = field(default_factory=list)  # (name, time, attributes)
    complete: bool = False  # holds the call's answer
    size: int = 0  # encoded bytes of the log records it came from

    def add(self, other: SpanContent) -> None:
        self.attributes.extend(other.attributes)
        self.events.extend(other.events)
        self.complete = self.complete or other.complete
        self.size += other.size


def _event_name(record: LogRecord) -> str:
    if record.event_name:
        return str(record.event_name)
    for kv in record.attributes:
        if kv.key == names.LOG_EVENT_NAME:
            return str(kv.value.string_value)
    return ""


def _content_of(record: LogRecord, name: str) -> SpanContent:
    size = record.ByteSize()
    if name == names.EVENT_INFERENCE_DETAILS:
        attributes = [kv for kv in record.attributes if kv.key in _DETAILS_CONTENT]
        complete = any(kv.key == names.GEN_AI_OUTPUT_MESSAGES for kv in attributes)
        return SpanContent(attributes=attributes, complete=complete, size=size)
    fields = [kv for kv in record.attributes if kv.key != names.LOG_EVENT_NAME]
    body = record.body
    kind = body.WhichOneof("value")
    if kind == "kvlist_value":
        fields.extend(body.kvlist_value.values)
    elif kind is not None:  # a body that is the message's text
        fields.append(KeyValue(key=names.EVENT_ATTR_CONTENT, value=body))
    when = record.time_unix_nano or record.observed_time_unix_nano
    return SpanContent(events=[(name, when, fields)], complete=name in _OUTPUT_EVENTS, size=size)


@dataclass(slots=True)
class LogContent:
    """The content of a logs record, by the span it belongs to, and how many content records named no span."""

    by_span: dict[SpanKey, SpanContent] = field(default_factory=dict)
    without_span: int = 0


def content_by_span(logs: LogsData) -> LogContent:
    """The content events of ``logs`` by their span (trace id, span id), in the records' order; the other log
    records (an application's own logs) are not read."""
    found = LogContent()
    for resource_logs in logs.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                name = _event_name(record)
                if name != names.EVENT_INFERENCE_DETAILS and name not in _MESSAGE_EVENTS:
                    continue
                if len(record.trace_id) != 16 or len(record.span_id) != 8:
                    found.without_span += 1
                    continue
                key = (bytes(record.trace_id), bytes(record.span_id))
                content = _content_of(record, name)
                held = found.by_span.get(key)
                if held is None:
                    found.by_span[key] = content
                else:
                    held.add(content)
    return found


def _has_own_content(span: Span) -> bool:
    for kv in span.attributes:
        key = kv.key
        if key in _CONTENT_KEYS or key.startswith(_CONTENT_PREFIXES):
            return True
    return any(event.name in _MESSAGE_EVENTS for event in span.events)


def awaits_content(span: Span) -> bool:
    """Whether an LLM call's span may have its content in log records: it carries none of its own. Agent spans
    do not wait: their runs read their LLM calls' content (``scope: trace``)."""
    kind, internal, _ = classify(span.attributes)
    return kind == "inference" and not internal and not _has_own_content(span)


def attach(span: Span, contents: Iterable[SpanContent]) -> bool:
    """Lay ``contents`` on ``span``: attributes the span does not have yet, events after its own. Returns whether
    anything was laid."""
    present = {kv.key for kv in span.attributes}
    laid = False
    for content in contents:
        for kv in content.attributes:
            if kv.key not in present:
                present.add(kv.key)
                span.attributes.append(kv)
                laid = True
        for name, when, attributes in content.events:
            event = span.events.add(name=name, time_unix_nano=when)
            event.attributes.extend(attributes)
            laid = True
    return laid
