"""Traces made by the real OpenTelemetry SDK and encoded exactly as the Collector writes them to Kafka."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

__all__ = ["otlp_json", "otlp_proto", "otlp_request", "record_spans", "set_structured", "to_any_value"]


def record_spans(build: Callable[[Tracer], None], *, service_name: str = "support-agent") -> list[ReadableSpan]:
    """Run ``build(tracer)`` against a fresh TracerProvider and return the finished spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("tests.support.otel", "1.0.0"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def otlp_request(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    request = encode_spans(spans)
    assert isinstance(request, ExportTraceServiceRequest)
    return request


def otlp_proto(spans: Sequence[ReadableSpan] | ExportTraceServiceRequest) -> bytes:
    request = spans if isinstance(spans, ExportTraceServiceRequest) else otlp_request(spans)
    return bytes(request.SerializeToString())


def otlp_json(spans: Sequence[ReadableSpan] | ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON: lowerCamelCase keys, enums as integers, 64-bit integers as strings, and trace/span
    ids as hex (protobuf's own JSON mapping would write base64)."""
    request = spans if isinstance(spans, ExportTraceServiceRequest) else otlp_request(spans)
    document = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if key in link:
                            link[key] = base64.b64decode(link[key]).hex()
    return json.dumps(document).encode()


def to_any_value(value: Any, target: AnyValue) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, (list, tuple)):
        target.array_value.SetInParent()
        for item in value:
            to_any_value(item, target.array_value.values.add())
    elif isinstance(value, dict):
        target.kvlist_value.SetInParent()
        for k, v in value.items():
            kv = target.kvlist_value.values.add()
            kv.key = k
            to_any_value(v, kv.value)
    else:
        raise TypeError(type(value))


def set_structured(request: ExportTraceServiceRequest, key: str, value: Any) -> None:
    """Replace attribute ``key`` on every span having it by a structured AnyValue (kvlist/array),
    as SDKs that support complex attributes write it; the Python SDK itself cannot."""
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                for kv in span.attributes:
                    if kv.key == key:
                        kv.value.Clear()
                        to_any_value(value, kv.value)
