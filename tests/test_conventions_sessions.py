"""Turns of conversations from traces made by the real OpenTelemetry SDK, and a window of turns as one scorer run
(the contract of ``sidecar.core.runs.SessionWindow``)."""

from __future__ import annotations

import json

from opentelemetry.trace import Tracer

from sidecar.conventions import Selection
from sidecar.conventions.session_runs import session_run
from sidecar.conventions.session_turns import DEFAULT_ID_ATTRIBUTES, TurnCaps, TurnSummary, turns_of
from sidecar.conventions.trace_runs import TraceSpan, group_by_trace, trace_runs
from sidecar.core import names as n
from sidecar.core.scored import score_id_of
from sidecar.ingest import decode_traces
from tests.support.conversations import Turn, conversation, trace_spans, turn_trace
from tests.support.otel import otlp_proto, record_spans

AGENTS = Selection()
CAPS = TurnCaps()


def turns(spans: list[TraceSpan], *, caps: TurnCaps = CAPS, admitted: tuple[str, ...] = ("s",)) -> list[TurnSummary]:
    runs = trace_runs(spans, AGENTS, ready_reason="root_idle").runs
    found = turns_of(
        spans, runs, id_attributes=DEFAULT_ID_ATTRIBUTES, caps=caps, admitted=lambda _: admitted, complete=True
    )
    return list(found.turns)


def test_a_turn_names_its_conversation_from_the_agent_span_and_keeps_what_a_judge_reads() -> None:
    trace = turn_trace("conv-1", Turn("Where is order 7?", "It left on Monday.", ("track", '{"order": 7}', "Monday")))
    [turn] = turns(trace_spans(trace))
    assert turn.conversation_id == "conv-1"
    assert (turn.trace_id, turn.span_id) == (trace.trace_id, trace.agent_span_id)
    assert turn.user == "Where is order 7?" and turn.answer == "It left on Monday."
    assert turn.system == "You help customers with their orders."
    [tool] = turn.tools
    assert (tool.name, tool.args, tool.result) == ("track", {"order": 7}, "Monday")
    assert turn.agent_name == "support-bot" and turn.service_name == "support-api"
    assert 0 < turn.start_time_unix_nano < turn.end_time_unix_nano
    assert not turn.truncated and turn.complete and turn.scorers == ("s",)
    assert turn.key == f"conv-1/{trace.trace_id}:{trace.agent_span_id}".encode()
    # The bytes on the internal topic read back as the same turn.
    assert TurnSummary.decode(turn.encode()) == turn


def test_the_conversation_id_may_be_on_another_span_of_the_trace_and_a_trace_without_one_makes_no_turn() -> None:
    [turn] = turns(trace_spans(turn_trace("sess-9", Turn("Hi", "Hello"), id_on="llm")))
    assert turn.conversation_id == "sess-9"  # OpenInference's session.id, on the LLM call
    spans = trace_spans(turn_trace("unused", Turn("Hi", "Hello"), id_on="nowhere"))
    runs = trace_runs(spans, AGENTS, ready_reason="root_idle").runs
    found = turns_of(spans, runs, id_attributes=DEFAULT_ID_ATTRIBUTES, caps=TurnCaps(), admitted=lambda _: ("s",),
                     complete=True)  # fmt: skip
    assert found.turns == () and found.no_conversation == 1
    # Only the attributes the operator names count, first present wins.
    found = turns_of(spans, runs, id_attributes=("tenant.thread",), caps=TurnCaps(), admitted=lambda _: ("s",),
                     complete=True)  # fmt: skip
    assert found.no_conversation == 1


def test_a_nested_agent_is_part_of_its_parents_turn_not_a_turn_of_its_own() -> None:
    def build(tracer: Tracer) -> None:
        outer = {
            n.GEN_AI_OPERATION_NAME: "invoke_agent",
            n.GEN_AI_AGENT_NAME: "router",
            n.GEN_AI_CONVERSATION_ID: "conv-2",
            n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Refund?"}]}]),
            n.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Done"}]}]
            ),
        }
        inner = {**outer, n.GEN_AI_AGENT_NAME: "refunds"}
        with (
            tracer.start_as_current_span("invoke_agent router", attributes=outer),
            tracer.start_as_current_span("invoke_agent refunds", attributes=inner),
        ):
            pass

    [spans] = group_by_trace(decode_traces(otlp_proto(record_spans(build)), "otlp_proto")).values()
    [turn] = turns(spans)
    assert turn.agent_name == "router"
    [nested] = turn.tools  # the nested agent is one call of the outer run
    assert nested.name == "refunds"


def test_each_field_is_capped_and_the_cut_flagged() -> None:
    long_result = json.dumps({"rows": ["x" * 50] * 20})
    trace = turn_trace("conv-3", Turn("q" * 100, "a" * 100, ("lookup", json.dumps({"q": "y" * 80}), long_result)))
    caps = TurnCaps(text=40, tool_args=30, tool_result=60, system=10, tool_calls=16)
    [turn] = turns(trace_spans(trace), caps=caps)
    assert turn.truncated
    assert len(turn.user) == 40 and len(turn.answer) == 40 and len(turn.system) == 10
    [tool] = turn.tools
    assert isinstance(tool.args, str) and len(tool.args) == 30  # cut JSON is kept as its text
    assert isinstance(tool.result, str) and len(tool.result) == 60
    [uncut] = turns(trace_spans(trace), caps=TurnCaps(tool_calls=0, text=1000, tool_args=1000, tool_result=10_000))
    assert uncut.tools == () and uncut.truncated  # tool calls past the cap are left out, and that is said


def test_a_window_is_one_run_whose_turn_i_is_input_message_i_and_output_message_i() -> None:
    said = [
        Turn("I want to return my boots.", "Sure: what is the order number?"),
        Turn("It is 4411.", "Thanks, checking order 4411.", ("orders", '{"id": 4411}', '{"status": "delivered"}')),
        Turn("Any news?", "Your return label is on its way."),
    ]
    traces = conversation("conv-4", said)
    summaries = [turn for trace in traces for turn in turns(trace_spans(trace))]
    run = session_run("conv-4", list(reversed(summaries)), "idle")  # any order in: the turns' order out
    assert [m.text for m in run.input.input_messages] == [t.question for t in said]
    assert [m.text for m in run.output] == [t.answer for t in said]
    assert [m.role for m in run.output] == ["assistant"] * 3
    [call] = run.output[1].tool_invocations
    assert (call.tool_name, call.args, call.result, call.state) == (
        "orders",
        {"id": 4411},
        {"status": "delivered"},
        "result",
    )
    assert [s.content for s in run.input.system_messages] == ["You help customers with their orders."]
    assert run.input.input_messages[0].id == f"{traces[0].agent_span_id}-in-0"
    assert run.output[2].id == f"{traces[2].agent_span_id}-out-0"
    # The score attaches to the last turn's agent span; it is named by the first turn and keyed by the conversation.
    assert (run.target.trace_id, run.target.span_id) == (traces[2].trace_id, traces[2].agent_span_id)
    assert run.target.agent_name == "support-bot" and run.scope == "session"
    assert run.subject == f"session:conv-4:{traces[0].trace_id}:{traces[0].agent_span_id}"
    assert run.record_key == b"conv-4"
    window = run.session
    assert window is not None and window.complete and window.close_reason == "idle"
    assert [t.trace_id for t in window.turns] == [t.trace_id for t in traces]
    # A window cut by a bound is incomplete, and a window with one more turn keeps its id (named by its first).
    cut = session_run("conv-4", summaries[:2], "max_turns")
    assert cut.session is not None and not cut.session.complete
    assert score_id_of("fp", cut.subject) == score_id_of("fp", run.subject)


def test_a_later_turn_with_other_instructions_adds_them_once() -> None:
    traces = [
        turn_trace("conv-5", Turn("a", "b")),
        turn_trace("conv-5", Turn("c", "d"), instructions="Be brief."),
        turn_trace("conv-5", Turn("e", "f"), instructions="Be brief."),
    ]
    run = session_run("conv-5", [t for trace in traces for t in turns(trace_spans(trace))], "idle")
    assert [s.content for s in run.input.system_messages] == ["You help customers with their orders.", "Be brief."]
