"""A conversation's window of turns → one scorer run (``scope: session``), in Mastra's agent run shape.

The contract (``sidecar.core.runs.SessionWindow``): the turns in order of their agent span's start (ties: trace
id, then span id); turn ``i`` is ``input.input_messages[i]`` (the user's request of that turn, id
``<span id>-in-0``) and ``output[i]`` (the agent's answer with its tool calls inside, id ``<span id>-out-0``),
one of each per turn even when a turn has no text, so that index ``i`` always names turn ``i + 1``. System
instructions come from the first turn; a different one in a later turn is added once. The run's ``target``
is the last turn's agent span: the score attaches to the trace where the conversation ended.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.conventions.session_turns import TurnSummary
from sidecar.core.runs import (
    ScorerRunRequest,
    SessionCloseReason,
    SessionTurn,
    SessionWindow,
    SpanTarget,
)
from sidecar.core.timestamps import iso_millis
from sidecar.scoring.agent import (
    AgentMessage,
    AgentRunInput,
    MessageContent,
    SystemMessage,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
)

__all__ = ["in_order", "session_run"]


def in_order(turns: Sequence[TurnSummary]) -> list[TurnSummary]:
    """The turns as a conversation reads them: by agent span start, then trace id, then span id."""
    return sorted(turns, key=lambda t: (t.start_time_unix_nano, t.trace_id, t.span_id))


def session_run(
    conversation_id: str, turns: Sequence[TurnSummary], close_reason: SessionCloseReason, *, ordered: bool = False
) -> ScorerRunRequest:
    """The run of one window (``turns`` in any order, or in the order given when ``ordered``: a dataset's
    conversation, which has no clock; at least one)."""
    turns = list(turns) if ordered else in_order(turns)
    if not turns:
        raise ValueError("a session run needs at least one turn")
    systems = list(dict.fromkeys(t.system for t in turns if t.system))
    run_input = AgentRunInput(
        input_messages=tuple(_request(t) for t in turns),
        system_messages=tuple(SystemMessage(content=s) for s in systems),
    )
    window = SessionWindow(
        conversation_id=conversation_id,
        turns=tuple(
            SessionTurn(
                trace_id=t.trace_id,
                span_id=t.span_id,
                start_time_unix_nano=t.start_time_unix_nano,
                end_time_unix_nano=t.end_time_unix_nano,
                agent_name=t.agent_name,
                complete=t.complete,
                truncated=t.truncated,
            )
            for t in turns
        ),
        close_reason=close_reason,
    )
    return ScorerRunRequest(
        target=_target(turns[-1]), input=run_input, output=tuple(_answer(t) for t in turns), session=window
    )


def _iso(unix_nano: int) -> str:
    return iso_millis(unix_nano) if unix_nano > 0 else ""


def _request(turn: TurnSummary) -> AgentMessage:
    parts = (TextPart(text=turn.user),) if turn.user else ()
    return AgentMessage(
        id=f"{turn.span_id}-in-0",
        role="user",
        created_at=_iso(turn.start_time_unix_nano),
        content=MessageContent(parts=parts),
    )


def _answer(turn: TurnSummary) -> AgentMessage:
    tools = tuple(
        ToolInvocationPart(
            tool_invocation=ToolInvocation(
                state="result" if tool.result is not None else "call",
                tool_call_id=tool.id,
                tool_name=tool.name,
                args=tool.args,
                result=tool.result,
            )
        )
        for tool in turn.tools
    )
    text = (TextPart(text=turn.answer),) if turn.answer else ()
    return AgentMessage(
        id=f"{turn.span_id}-out-0",
        role="assistant",
        created_at=_iso(turn.end_time_unix_nano),
        content=MessageContent(parts=(*tools, *text)),
    )


def _target(turn: TurnSummary) -> SpanTarget:
    return SpanTarget(
        trace_id=turn.trace_id,
        span_id=turn.span_id,
        parent_span_id=turn.parent_span_id,
        span_name=turn.span_name,
        kind="agent",
        convention=turn.convention,
        agent_name=turn.agent_name,
        agent_id=turn.agent_id,
        version=turn.version,
        service_name=turn.service_name,
        model=turn.model,
        end_time_unix_nano=turn.end_time_unix_nano,
        resource_attributes=turn.resource_attributes,
    )
