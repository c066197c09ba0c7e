"""Which spans a rule recognises (OpenLLMetry's ``llm.request.type`` and ``traceloop.span.kind`` too), the
``unrecognised`` count for spans that look like LLM or agent spans and that no rule selects, and one tool call
however many places recorded it (``conventions.tool_calls``).

The shapes the real instrumentation packages write are covered end to end in ``test_instrumented_e2e.py``; these
tests pin each rule on spans made with the SDK."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.trace import Tracer

from sidecar.conventions import Selection, spans_to_runs
from sidecar.conventions.selection import classify
from sidecar.conventions.tool_calls import merge_requested, not_in
from sidecar.conventions.trace_runs import group_by_trace, trace_runs
from sidecar.core import names as n
from sidecar.ingest import decode_traces
from sidecar.scoring.agent import ToolInvocation
from tests.support.otel import otlp_proto, record_spans

INFERENCE = Selection(kinds=frozenset({"inference", "agent"}))


def _spans(*attributes: dict[str, Any]) -> Any:
    def build(tracer: Tracer) -> None:
        for i, attrs in enumerate(attributes):
            with tracer.start_as_current_span(f"span-{i}", attributes=attrs):
                pass

    return decode_traces(otlp_proto(record_spans(build)))


def _classes(*attributes: dict[str, Any]) -> list[tuple[str | None, bool]]:
    traces = _spans(*attributes)
    spans = [s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return [(c.kind, c.unrecognised) for c in (classify(s.attributes) for s in spans)]


LEGACY_CHAT = {
    n.LLM_REQUEST_TYPE: "chat",
    n.GEN_AI_SYSTEM: "openai",
    "gen_ai.prompt.0.role": "system",
    "gen_ai.prompt.0.content": "Be brief.",
    "gen_ai.prompt.1.role": "user",
    "gen_ai.prompt.1.content": "Capital of France?",
    "gen_ai.completion.0.role": "assistant",
    "gen_ai.completion.0.content": "Paris.",
}


def test_openllmetry_kinds_are_recognised() -> None:
    assert _classes(
        {n.LLM_REQUEST_TYPE: "chat"},
        {n.LLM_REQUEST_TYPE: "completion"},
        {n.LLM_REQUEST_TYPE: "embedding"},
        {n.TRACELOOP_SPAN_KIND: "agent"},
        {n.TRACELOOP_SPAN_KIND: "workflow"},
        {n.TRACELOOP_SPAN_KIND: "task"},
        {n.TRACELOOP_SPAN_KIND: "tool"},
    ) == [
        ("inference", False),
        ("inference", False),
        (None, False),
        ("agent", False),
        ("agent", False),
        (None, False),
        (None, False),
    ]


def test_a_span_that_looks_like_an_llm_call_and_that_no_rule_selects_is_unrecognised() -> None:
    assert _classes(
        {n.GEN_AI_REQUEST_MODEL: "gpt-4o"},  # a GenAI attribute, no kind
        {n.GEN_AI_OPERATION_NAME: "unknown", n.GEN_AI_AGENT_NAME: "x"},  # an operation no rule knows
        {n.OPENINFERENCE_SPAN_KIND: "SOMETHING_NEW"},
        {n.LLM_REQUEST_TYPE: "audio"},
        {"gen_ai.prompt.0.content": "hi"},  # legacy content without a kind
        {n.GEN_AI_OPERATION_NAME: "execute_tool", n.GEN_AI_SYSTEM: "openai"},  # a tool: recognised
        {n.OPENINFERENCE_SPAN_KIND: "CHAIN", n.LLM_MODEL_NAME: "m"},  # a chain: recognised
        {"http.request.method": "GET"},  # not an LLM span at all
        {n.GEN_AI_REQUEST_MODEL: "gpt-4o", n.SIDECAR_INTERNAL: True},  # the sidecar's own
    ) == [
        (None, True),
        (None, True),
        (None, True),
        (None, True),
        (None, True),
        (None, False),
        (None, False),
        (None, False),
        (None, False),
    ]


def test_openllmetry_legacy_spans_are_scored_and_the_others_counted() -> None:
    traces = _spans(LEGACY_CHAT, {n.GEN_AI_REQUEST_MODEL: "gpt-4o"}, {"http.request.method": "GET"})

    result = spans_to_runs(traces, INFERENCE)

    (run,) = result.runs
    assert run.input.system_messages[0].content == "Be brief."
    assert run.input.input_messages[-1].text == "Capital of France?"
    assert run.output[0].text == "Paris."
    assert result.skipped.unrecognised == 1  # whatever the selection: an agent-only selection counts it too
    assert spans_to_runs(traces, Selection()).skipped.unrecognised == 1


def _workflow(tracer: Tracer, *, own_content: bool, second_agent: bool = False) -> None:
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Plan my day."}]}])
    answer = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Go to the Louvre."}]}])
    workflow: dict[str, Any] = {n.GEN_AI_OPERATION_NAME: "invoke_agent"}
    if own_content:
        workflow |= {n.GEN_AI_INPUT_MESSAGES: messages, n.GEN_AI_OUTPUT_MESSAGES: answer}
    agent = {
        n.GEN_AI_OPERATION_NAME: "invoke_agent",
        n.GEN_AI_AGENT_NAME: "Planner",
        n.GEN_AI_INPUT_MESSAGES: messages,
        n.GEN_AI_OUTPUT_MESSAGES: answer,
    }
    with tracer.start_as_current_span("Agent workflow", attributes=workflow):
        with tracer.start_as_current_span("invoke_agent Planner", attributes=agent):
            pass
        if second_agent:
            with tracer.start_as_current_span("invoke_agent Reviewer", attributes=agent | {n.GEN_AI_AGENT_NAME: "R"}):
                pass


def _trace_runs(build: Any) -> list[str]:
    traces = decode_traces(otlp_proto(record_spans(build)))
    (spans,) = group_by_trace(traces).values()
    return [run.target.span_name for run in trace_runs(spans, Selection(), ready_reason="root_idle").runs]


def test_a_workflow_without_content_around_one_agent_is_not_a_run() -> None:
    assert _trace_runs(lambda t: _workflow(t, own_content=False)) == ["invoke_agent Planner"]
    # With content of its own, or around two agents, the workflow is a run of its own, as before.
    assert _trace_runs(lambda t: _workflow(t, own_content=True)) == ["Agent workflow", "invoke_agent Planner"]
    assert _trace_runs(lambda t: _workflow(t, own_content=False, second_agent=True)) == [
        "Agent workflow",
        "invoke_agent Planner",
        "invoke_agent Reviewer",
    ]


def _call(call_id: str, name: str, args: Any, result: Any = None) -> ToolInvocation:
    state = "result" if result is not None else "call"
    return ToolInvocation(state=state, tool_call_id=call_id, tool_name=name, args=args, result=result)


def test_a_requested_call_and_its_tool_span_are_one_call() -> None:
    spans = [_call("span-1", "get_weather", '{"city": "Paris"}', "sunny"), _call("span-2", "translate", "{}", "ok")]
    requested = [
        _call("call_a", "get_weather", {"city": "Paris"}),  # no id on the span: matched by name and arguments
        _call("call_b", "get_weather", {"city": "Rome"}),  # no span recorded it: added as asked
    ]

    merged = merge_requested(spans, requested, span_ids=frozenset({"span-1", "span-2"}))

    assert [(c.tool_call_id, c.tool_name, c.result) for c in merged] == [
        ("call_a", "get_weather", "sunny"),
        ("span-2", "translate", "ok"),
        ("call_b", "get_weather", None),
    ]
    assert not_in(merged, [_call("call_a", "x", None), _call("", "translate", {})]) == [merged[2]]


_calls = st.lists(
    st.builds(
        _call,
        call_id=st.sampled_from(["", "c1", "c2", "c3"]),
        name=st.sampled_from(["a", "b"]),
        args=st.sampled_from([{}, {"x": 1}, '{"x": 1}']),
        result=st.sampled_from([None, "r"]),
    ),
    max_size=6,
)


@given(recorded=_calls, requested=_calls)
def test_merging_never_loses_or_doubles_a_recorded_call(
    recorded: list[ToolInvocation], requested: list[ToolInvocation]
) -> None:
    merged = merge_requested(recorded, requested)
    # Every tool span stays, in its place; each requested call is either one of them or added once, after them.
    assert [c.tool_name for c in merged[: len(recorded)]] == [c.tool_name for c in recorded]
    assert len(recorded) <= len(merged) <= len(recorded) + len(requested)
    # Calls already known are left out, and nothing else.
    assert not_in(merged, []) == merged
    assert not_in(merged, merged) == []
