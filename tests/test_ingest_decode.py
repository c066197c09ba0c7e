"""Record decoding and the pure reading of a record, then span scope's mapping of it: good records decode and map,
bad ones become dead letters."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.conventions.trace_runs import group_by_trace
from sidecar.core import names as n
from sidecar.ingest import DeadLetter, DeadLetterReason, IngestConfig, TraceDecodeError, decode_traces, read_record
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.stages.span import SpanAssembly, SpanRuns
from tests.support.custom_scorer import create_constant_scorer
from tests.support.otel import otlp_json, otlp_proto
from tests.support.traces import agent_trace

AGENT = {
    n.GEN_AI_OPERATION_NAME: "invoke_agent",
    n.GEN_AI_AGENT_NAME: "a",
    n.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps([{"type": "text", "content": "Be kind."}]),
    n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hello"}]}]),
    n.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]),
}
SPANS = agent_trace(AGENT) + agent_trace(AGENT, service_name="other")  # two resource spans
PROTO = otlp_proto(SPANS)
JSON = otlp_json(SPANS)
PROTO_CONFIG = IngestConfig()
JSON_CONFIG = IngestConfig(encoding="otlp_json")
SPAN_SCOPE = SpanAssembly([ConfiguredScorer(create_constant_scorer())])


@dataclass(frozen=True)
class Ingested:
    """A record as the service reads it (``read_record``) and as span scope maps it."""

    runs: tuple[Any, ...]
    dead_letters: tuple[DeadLetter, ...]
    mapped: SpanRuns | None
    spans_seen: int


def ingest(value: bytes | None, config: IngestConfig) -> Ingested:
    read = read_record(value, config)
    if read.traces is None:
        return Ingested((), (read.letter,) if read.letter is not None else (), None, 0)
    mapped = SPAN_SCOPE.of_record(read.traces)
    return Ingested(tuple(request for _, request in mapped.runs), tuple(mapped.letters), mapped, read.spans)


def test_proto_and_json_decode_to_the_same_traces() -> None:
    from_proto = decode_traces(PROTO)
    from_json = decode_traces(JSON, "otlp_json")

    assert len(from_proto.resource_spans) == 2
    assert from_proto == from_json


def test_json_as_the_collector_writes_it() -> None:
    # Hand-written like the Collector's otlp_json: hex ids, int64 as strings, enum as int, camelCase.
    document: dict[str, Any] = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "s"},
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "parentSpanId": "",
                                "name": "invoke_agent a",
                                "kind": 1,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": 1700000001000000000,
                                "flags": 769,
                                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in AGENT.items()]
                                + [{"key": n.GEN_AI_USAGE_INPUT_TOKENS, "value": {"intValue": "12"}}],
                                "status": {},
                            }
                        ],
                    }
                ],
            }
        ]
    }
    result = ingest(json.dumps(document).encode(), JSON_CONFIG)

    (run,) = result.runs
    t = run.target
    assert (t.trace_id, t.span_id, t.parent_span_id) == (
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
        None,
    )
    assert (t.service_name, t.input_tokens, t.end_time_unix_nano, t.sampled) == (
        "svc",
        12,
        1700000001000000000,
        True,
    )
    assert run.input.input_messages[0].text == "hello" and run.output[0].text == "hi"


def test_empty_record_is_an_empty_export() -> None:
    assert ingest(b"", PROTO_CONFIG).dead_letters == ()
    assert ingest(None, PROTO_CONFIG).runs == ()


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b"\xff\xff\xff\xff", "otlp_proto"),
        (b"\x12\x03abc", "otlp_proto"),  # valid protobuf, but only unknown fields: not an export
        (PROTO[: len(PROTO) // 2], "otlp_proto"),
        (PROTO, "otlp_json"),
        (b"[1, 2]", "otlp_json"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5}]}]}]}', "otlp_json"),
    ],
)
def test_undecodable_records(data: bytes, encoding: str) -> None:
    with pytest.raises(TraceDecodeError):
        decode_traces(data, encoding)  # type: ignore[arg-type]
    config = IngestConfig(encoding=encoding)  # type: ignore[arg-type]
    (letter,) = ingest(data, config).dead_letters
    assert letter.reason is DeadLetterReason.DECODE_ERROR and letter.detail and letter.span_id is None


def test_record_over_the_size_limit_is_not_decoded() -> None:
    (letter,) = ingest(PROTO, IngestConfig(max_record_bytes=100)).dead_letters
    assert letter.reason is DeadLetterReason.RECORD_TOO_LARGE and str(len(PROTO)) in letter.detail


def test_good_record_yields_runs() -> None:
    result = ingest(PROTO, PROTO_CONFIG)
    assert [r.target.service_name for r in result.runs] == ["travel-api", "other"]
    assert result.dead_letters == () and result.spans_seen == 6


# --- properties: nothing a producer can write stops the pipeline ---------------------------------------

VALID_REASONS = set(DeadLetterReason) - {DeadLetterReason.INTERNAL_ERROR}


def _check(data: bytes, config: IngestConfig) -> None:
    result = ingest(data, config)  # must not raise
    assert {d.reason for d in result.dead_letters} <= VALID_REASONS
    assert all(d.detail for d in result.dead_letters)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048), st.sampled_from([PROTO_CONFIG, JSON_CONFIG]))
def test_arbitrary_bytes_never_raise(data: bytes, config: IngestConfig) -> None:
    result = ingest(data, config)
    try:
        decode_traces(data, config.encoding)
    except TraceDecodeError:
        assert [d.reason for d in result.dead_letters] == [DeadLetterReason.DECODE_ERROR]
    else:
        assert {d.reason for d in result.dead_letters} <= VALID_REASONS


@st.composite
def _mutated(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete" and data:
            del data[pos : pos + draw(st.integers(1, 16))]
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(PROTO))
def test_mutated_proto_records_never_raise(data: bytes) -> None:
    _check(data, PROTO_CONFIG)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(JSON))
def test_mutated_json_records_never_raise(data: bytes) -> None:
    _check(data, JSON_CONFIG)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_message_keys = st.sampled_from(
    [
        n.GEN_AI_INPUT_MESSAGES,
        n.GEN_AI_OUTPUT_MESSAGES,
        n.GEN_AI_SYSTEM_INSTRUCTIONS,
        n.GEN_AI_PROMPT,
        "mastra.agent_run.input",
        "mastra.agent_run.output",
        n.INPUT_VALUE,
        "llm.input_messages.0.message.role",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
        "gen_ai.prompt.0.content",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_message_keys, _json_values, min_size=1, max_size=4))
def test_arbitrary_message_content_is_a_run_or_an_unmappable_reject(content: dict[str, Any]) -> None:
    attrs = {n.GEN_AI_OPERATION_NAME: "invoke_agent", **{k: json.dumps(v) for k, v in content.items()}}
    data = otlp_proto(agent_trace(attrs))

    result = ingest(data, PROTO_CONFIG)

    assert {d.reason for d in result.dead_letters} <= {DeadLetterReason.UNMAPPABLE}
    assert result.mapped is not None
    assert len(result.runs) + len(result.dead_letters) + result.mapped.ingest_skips().get("no_content", 0) == 1


def test_a_protobuf_record_of_one_trace_is_handed_on_whole_for_the_trace_buffer() -> None:
    one = otlp_proto(agent_trace(AGENT))
    [spans] = group_by_trace(decode_traces(one), record=one).values()
    assert spans and all(item.record is one for item in spans)  # buffered as it came, not span by span
    # Two traces in a record: spans one by one.
    traces = group_by_trace(decode_traces(PROTO), record=PROTO)
    assert len(traces) == 2 and all(item.record is None for spans in traces.values() for item in spans)
