"""Target selection: kinds, name filters, attribute predicates, shared sampling, loop guard, rejects."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from sidecar.conventions import AttributePredicate, NameFilter, Selection, sample_score, spans_to_runs
from sidecar.core import names as n
from sidecar.ingest import decode_traces
from tests.support.otel import otlp_proto, record_spans
from tests.support.traces import agent_trace


def _agent(name: str, **extra: Any) -> dict[str, Any]:
    return {
        n.GEN_AI_OPERATION_NAME: "invoke_agent",
        n.GEN_AI_AGENT_NAME: name,
        n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        n.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "yo"}]}]),
        **extra,
    }


def _traces(*agents: dict[str, Any], service: str = "shop") -> TracesData:
    return decode_traces(otlp_proto([s for a in agents for s in agent_trace(a, service_name=service)]))


def test_agent_and_service_filters_use_globs() -> None:
    traces = _traces(_agent("billing-bot"), _agent("support-bot"), _agent("internal-probe"))

    only_bots = spans_to_runs(traces, Selection(agents=NameFilter(include=("*-bot",), exclude=("billing-*",))))
    other_service = spans_to_runs(traces, Selection(services=NameFilter(include=("payments",))))

    assert [r.target.agent_name for r in only_bots.runs] == ["support-bot"]
    assert only_bots.skipped.filtered == 2
    assert other_service.runs == () and other_service.skipped.filtered == 3


def test_attribute_predicates() -> None:
    traces = _traces(_agent("a", **{"deployment.tier": "prod"}), _agent("b", **{"deployment.tier": "dev"}), _agent("c"))

    def names(*where: AttributePredicate) -> list[str | None]:
        return [r.target.agent_name for r in spans_to_runs(traces, Selection(where=where)).runs]

    assert names(AttributePredicate(key="deployment.tier", value="prod")) == ["a"]
    assert names(AttributePredicate(key="deployment.tier", op="exists")) == ["a", "b"]
    assert names(AttributePredicate(key="deployment.tier", op="absent")) == ["c"]
    assert names(AttributePredicate(key="deployment.tier", op="not_equals", value="dev")) == ["a", "c"]


def test_sampling_follows_the_shared_rule_and_nests() -> None:
    traces = _traces(*(_agent(f"agent-{i}") for i in range(60)))
    spans = [s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans]
    agent_spans = [s for s in spans if any(kv.key == n.GEN_AI_AGENT_NAME for kv in s.attributes)]

    def kept(rate: float) -> set[str]:
        return {r.target.span_id for r in spans_to_runs(traces, Selection(sample_rate=rate)).runs}

    expected = {
        s.span_id.hex()
        for s in agent_spans
        if int.from_bytes(hashlib.sha256(s.trace_id).digest()[:6], "big") / 2**48 < 0.5
    }
    assert kept(0.5) == expected and 0 < len(expected) < 60
    assert kept(0.2) <= kept(0.5) <= kept(1.0)
    assert kept(0.0) == set()
    assert spans_to_runs(traces, Selection(sample_rate=0.5)).skipped.sampled_out == 60 - len(expected)
    assert sample_score(bytes(16)) == int.from_bytes(hashlib.sha256(bytes(16)).digest()[:6], "big") / 2**48


def test_loop_guard_skips_the_sidecars_own_spans() -> None:
    own_service = _traces(_agent("judge"), service=n.SIDECAR_SERVICE_NAME)
    marked = _traces(_agent("judge", **{n.SIDECAR_INTERNAL: True}))
    marked_as_text = _traces(_agent("judge", **{n.SIDECAR_INTERNAL: "true"}))

    for traces in (own_service, marked, marked_as_text):
        result = spans_to_runs(traces, Selection(kinds=frozenset({"agent", "inference"})))
        assert result.runs == () and result.skipped.internal == 1


def test_oversize_span_is_rejected_as_too_large_not_scored() -> None:
    big = "x" * 5000
    traces = _traces(
        _agent(
            "a",
            **{n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": big}]}])},
        )
    )

    result = spans_to_runs(traces, Selection(max_input_bytes=4096))

    assert result.runs == ()
    (reject,) = result.rejects
    assert reject.reason == "too_large" and "> 4096" in reject.detail


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        (n.GEN_AI_INPUT_MESSAGES, "{not json"),
        (n.GEN_AI_INPUT_MESSAGES, json.dumps({"role": "user"})),
        (n.GEN_AI_OUTPUT_MESSAGES, json.dumps([{"role": "assistant", "parts": ["bare string"]}])),
        (n.GEN_AI_OUTPUT_MESSAGES, json.dumps([{"role": "wizard", "parts": []}])),
        (
            n.GEN_AI_OUTPUT_MESSAGES,
            json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": 3}]}]),
        ),
    ],
)
def test_malformed_messages_are_unmappable_rejects(attribute: str, value: str) -> None:
    traces = _traces(_agent("ok"), _agent("broken", **{attribute: value}))

    result = spans_to_runs(traces)

    assert [r.target.agent_name for r in result.runs] == ["ok"]
    (reject,) = result.rejects
    assert reject.reason == "unmappable" and reject.detail and len(reject.span_id) == 16


def test_span_with_malformed_ids_is_an_invalid_span() -> None:
    traces = _traces(_agent("a"))
    span = next(s for s in traces.resource_spans[0].scope_spans[0].spans if s.name.startswith("invoke_agent"))
    span.trace_id = b"\x01\x02\x03"

    (reject,) = spans_to_runs(traces).rejects
    assert (reject.reason, reject.trace_id) == ("invalid_span", "010203")


def test_agent_span_without_content_is_counted_not_dead_lettered() -> None:
    traces = _traces({n.GEN_AI_OPERATION_NAME: "invoke_agent", n.GEN_AI_AGENT_NAME: "quiet"})

    result = spans_to_runs(traces)

    assert result.runs == () and result.rejects == () and result.skipped.no_content == 1


def test_non_agent_spans_are_not_candidates() -> None:
    spans = record_spans(lambda t: t.start_span("GET /health", attributes={"http.route": "/health"}).end())

    result = spans_to_runs(decode_traces(otlp_proto(spans)))

    assert (result.spans_seen, result.runs, result.rejects, result.skipped.filtered) == (1, (), (), 0)


def test_runs_keep_the_resource_attributes_they_are_told_to_keep() -> None:
    """For the OTLP exporter, which copies them onto the scores' spans (scalars only; others are left)."""
    traces = _traces(_agent("support"))
    resource = traces.resource_spans[0].resource
    for key, value in (("openinference.project.name", "shop"), ("deployment.environment", "prod")):
        kv = resource.attributes.add()
        kv.key, kv.value.string_value = key, value
    listed = resource.attributes.add()
    listed.key = "service.namespace"
    listed.value.array_value.values.add().string_value = "not a scalar"
    keep = {"openinference.project.name", "deployment.environment", "service.namespace"}

    [run] = spans_to_runs(traces, resource_attributes=keep).runs
    assert dict(run.target.resource_attributes) == {
        "openinference.project.name": "shop",
        "deployment.environment": "prod",
    }
    [plain] = spans_to_runs(traces).runs
    assert plain.target.resource_attributes == ()
