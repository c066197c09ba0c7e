"""Kafka record bytes → OTLP ``TracesData``, as the Collector's Kafka exporter writes them."""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Literal

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

__all__ = ["Encoding", "TraceDecodeError", "decode_traces", "hex_ids_to_base64", "objects"]

Encoding = Literal["otlp_proto", "otlp_json"]
_HEX_ID = re.compile(r"[0-9a-fA-F]{16}|[0-9a-fA-F]{32}")


class TraceDecodeError(ValueError):
    """The record is not one OTLP trace export in the configured encoding."""


def decode_traces(data: bytes, encoding: Encoding = "otlp_proto") -> TracesData:
    """Decode one record value: a ``TracesData`` / ``ExportTraceServiceRequest`` (same wire format).

    Raises :class:`TraceDecodeError` and nothing else on bad input. A non-empty record that decodes
    to no resource spans is an error too: protobuf happily reads random bytes as unknown fields.
    """
    if encoding == "otlp_proto":
        traces = _decode_proto(data)
    elif encoding == "otlp_json":
        traces = _decode_json(data)
    else:
        raise TraceDecodeError(f"unknown encoding {encoding!r}")
    if data and not traces.resource_spans:
        raise TraceDecodeError("record holds no resource spans")
    return traces


def _decode_proto(data: bytes) -> TracesData:
    traces = TracesData()
    try:
        traces.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise TraceDecodeError(f"invalid OTLP protobuf: {exc}") from exc
    return traces


def _decode_json(data: bytes) -> TracesData:
    try:
        document = json.loads(data)
        if not isinstance(document, dict):
            raise TraceDecodeError("OTLP/JSON record is not an object")
        _ids_to_base64(document)
        traces = TracesData()
        json_format.ParseDict(document, traces, ignore_unknown_fields=True)
    except TraceDecodeError:
        raise
    except (json_format.ParseError, ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
        raise TraceDecodeError(f"invalid OTLP/JSON: {exc.__class__.__name__}: {exc}"[:300]) from exc
    return traces


def _ids_to_base64(document: dict[str, Any]) -> None:
    """OTLP/JSON writes trace and span ids as hex; protobuf's JSON mapping expects base64 bytes."""
    for resource_spans in objects(document.get("resourceSpans", document.get("resource_spans"))):
        for scope_spans in objects(resource_spans.get("scopeSpans", resource_spans.get("scope_spans"))):
            for span in objects(scope_spans.get("spans")):
                hex_ids_to_base64(span)
                for link in objects(span.get("links")):
                    hex_ids_to_base64(link)


def hex_ids_to_base64(obj: dict[str, Any]) -> None:
    """An OTLP/JSON object's trace and span ids, written as hex, in the base64 that protobuf's JSON mapping reads."""
    for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"):
        value = obj.get(key)
        if isinstance(value, str) and _HEX_ID.fullmatch(value):
            obj[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")


def objects(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (nothing when it is not one)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
