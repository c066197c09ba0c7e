"""Realistic agent traces for the convention tests: an HTTP request, an agent span, noise around it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

from tests.support.otel import record_spans

__all__ = ["agent_trace", "hex_ids", "span_by_name"]

Events = Sequence[tuple[str, Mapping[str, AttributeValue]]]


def agent_trace(
    agent_attributes: Mapping[str, AttributeValue],
    *,
    agent_span_name: str = "invoke_agent travel-agent",
    events: Events = (),
    child_attributes: Mapping[str, AttributeValue] | None = None,
    service_name: str = "travel-api",
) -> list[ReadableSpan]:
    """HTTP server span → agent span (given attributes/events) → optional child LLM span, DB span."""

    def build(tracer: Tracer) -> None:
        with (
            tracer.start_as_current_span(
                "POST /chat",
                kind=SpanKind.SERVER,
                attributes={
                    "http.request.method": "POST",
                    "url.path": "/chat",
                    "http.response.status_code": 200,
                },
            ),
            tracer.start_as_current_span(agent_span_name, attributes=dict(agent_attributes)) as agent,
        ):
            for name, attrs in events:
                agent.add_event(name, dict(attrs))
            if child_attributes is not None:
                with tracer.start_as_current_span(
                    "chat gpt-4o", kind=SpanKind.CLIENT, attributes=dict(child_attributes)
                ):
                    pass
            with tracer.start_as_current_span(
                "SELECT bookings", kind=SpanKind.CLIENT, attributes={"db.system.name": "postgresql"}
            ):
                pass

    return record_spans(build, service_name=service_name)


def span_by_name(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    return next(s for s in spans if s.name == name)


def hex_ids(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
    }
