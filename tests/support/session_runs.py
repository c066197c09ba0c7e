"""Session runs as the session contract shapes them (sidecar/core/runs.py): turn ``i`` is input message ``i``
and output message ``i``, the window's turns carry trace and span ids, the target is the last turn's agent
span. What stage 2 hands to scorers, built here from plain turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.core.runs import ScorerRunRequest, SessionCloseReason, SessionTurn, SessionWindow, SpanTarget
from sidecar.scoring.agent import (
    AgentRunInput,
    SystemMessage,
    ToolInvocation,
    assistant_message,
    user_message,
)


@dataclass(frozen=True)
class Turn:
    user: str
    answer: str
    # (tool name, arguments, result)
    calls: Sequence[tuple[str, Any, Any]] = field(default_factory=tuple)


def session_run(
    turns: Sequence[Turn | tuple[str, str]],
    *,
    system: str | None = None,
    conversation_id: str = "conv-1",
    agent: str = "support-bot",
    close_reason: SessionCloseReason = "idle",
) -> ScorerRunRequest:
    built = [t if isinstance(t, Turn) else Turn(*t) for t in turns]
    trace_ids = [f"{i + 1:032x}" for i in range(len(built))]
    span_ids = [f"{0xA0 + i:016x}" for i in range(len(built))]
    inputs = tuple(user_message(t.user, id=f"{span_ids[i]}-in-0") for i, t in enumerate(built))
    outputs = tuple(
        assistant_message(
            t.answer,
            id=f"{span_ids[i]}-out-0",
            tool_invocations=tuple(
                ToolInvocation(state="result", tool_call_id=f"call-{i}-{j}", tool_name=name, args=args, result=result)
                for j, (name, args, result) in enumerate(t.calls)
            ),
        )
        for i, t in enumerate(built)
    )
    window = SessionWindow(
        conversation_id=conversation_id,
        turns=tuple(
            SessionTurn(
                trace_id=trace_ids[i],
                span_id=span_ids[i],
                start_time_unix_nano=1_700_000_000_000_000_000 + i * 60_000_000_000,
                end_time_unix_nano=1_700_000_000_000_000_000 + i * 60_000_000_000 + 2_000_000_000,
                agent_name=agent,
            )
            for i in range(len(built))
        ),
        close_reason=close_reason,
    )
    last = len(built) - 1
    return ScorerRunRequest(
        target=SpanTarget(trace_id=trace_ids[last], span_id=span_ids[last], agent_name=agent),
        input=AgentRunInput(input_messages=inputs, system_messages=(SystemMessage(content=system),) if system else ()),
        output=outputs,
        session=window,
    )


def run_kwargs(request: ScorerRunRequest) -> dict[str, Any]:
    """``scorer.run(**run_kwargs(request))``, as the runtime calls it."""
    return {"input": request.input, "output": request.output}


def turn_run(request_bytes: bytes) -> ScorerRunRequest:
    """The whole-trace run of a turn's trace (one OTLP export), as stage 1 builds it from a ready trace."""
    from sidecar.conventions import Selection
    from sidecar.conventions.trace_runs import group_by_trace, trace_runs
    from sidecar.ingest import decode_traces

    [spans] = group_by_trace(decode_traces(request_bytes)).values()
    [run] = trace_runs(spans, Selection(), ready_reason="root_idle").runs
    return run


def session_of_turns(turns: Sequence[ScorerRunRequest], conversation_id: str) -> ScorerRunRequest:
    """The session run of a conversation's turns per the contract: input message i is turn i's user message,
    output message i its answer with the turn's tool invocations inside, the first turn's system messages, the
    last turn's agent span as the target. What stage 2 hands to scorers, here for tests of what they score."""
    from sidecar.scoring.agent import MessageContent, TextPart, ToolInvocationPart

    inputs = []
    outputs = []
    for run in turns:
        span = run.target.span_id
        user = [m for m in run.input.input_messages if m.role == "user"][-1]
        inputs.append(user_message(user.text, id=f"{span}-in-0"))
        calls = [ToolInvocationPart(tool_invocation=c) for m in run.output for c in m.tool_invocations]
        answer = [m.text for m in run.output if m.role == "assistant" and m.text]
        parts: list[Any] = [*calls, *([TextPart(text=answer[-1])] if answer else [])]
        outputs.append(
            assistant_message(id=f"{span}-out-0").model_copy(update={"content": MessageContent(parts=tuple(parts))})
        )
    window = SessionWindow(
        conversation_id=conversation_id,
        turns=tuple(
            SessionTurn(
                trace_id=run.target.trace_id,
                span_id=run.target.span_id,
                start_time_unix_nano=i,
                end_time_unix_nano=run.target.end_time_unix_nano,
                agent_name=run.target.agent_name,
            )
            for i, run in enumerate(turns)
        ),
        close_reason="idle",
    )
    return ScorerRunRequest(
        target=turns[-1].target,
        input=AgentRunInput(input_messages=tuple(inputs), system_messages=turns[0].input.system_messages),
        output=tuple(outputs),
        session=window,
    )
