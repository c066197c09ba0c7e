"""Turns of a conversation (``scope: session``): what one whole-trace run contributes to its conversation.

A **turn** is the whole-trace run of a top-level agent span (no agent span above it in its trace) whose trace
carries a conversation id: ``gen_ai.conversation.id`` (OTel GenAI) or ``session.id`` (OpenInference), or
whatever ``sessions.id_attributes`` lists, first present wins, read from the agent span, else from any span
of its trace. Its **summary** (:class:`TurnSummary`) keeps what a conversation judge reads (the user's
request, the system instructions, the answer, the tool calls with their results) with each field capped
(:class:`TurnCaps`, a cut is flagged ``truncated``), and what the score needs to attach to the turn's agent
span. Summaries travel as compact JSON through the internal topic (docs/sessions.md), keyed
``<conversation id>/<trace id>:<span id>``: one key per turn, so compaction keeps every turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.conventions.attributes import any_value
from sidecar.conventions.trace_runs import TraceSpan
from sidecar.core import names
from sidecar.core.runs import ResourceValue, ScorerRunRequest

__all__ = [
    "DEFAULT_ID_ATTRIBUTES",
    "TraceTurns",
    "TurnCaps",
    "TurnSummary",
    "TurnTool",
    "cap_turn",
    "conversation_id_of",
    "turn_key",
    "turns_of",
]

# OTel GenAI names the conversation on agent and inference spans; OpenInference's ``using_session`` puts
# ``session.id`` on every span of the trace.
DEFAULT_ID_ATTRIBUTES: tuple[str, ...] = (names.GEN_AI_CONVERSATION_ID, "session.id")


@dataclass(frozen=True, slots=True)
class TurnCaps:
    """The most each field of a turn keeps, in characters (tool calls: how many per turn)."""

    text: int = 8192  # the user's request, the answer
    tool_args: int = 1024
    tool_result: int = 2048
    system: int = 4096
    tool_calls: int = 16


class _Summary(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


class TurnTool(_Summary):
    """One tool call of a turn: its id, name, arguments and result (each capped; a cut one is JSON text)."""

    id: str
    name: str
    args: Any = None
    result: Any = None


class TurnSummary(_Summary):
    """One turn as the internal topic carries it, and as stage 2 keeps it (as these bytes) until its window
    closes."""

    conversation_id: str
    trace_id: str
    span_id: str  # the turn's agent span
    parent_span_id: str | None = None
    span_name: str = ""
    start_time_unix_nano: int
    end_time_unix_nano: int
    agent_name: str | None = None
    agent_id: str | None = None
    version: str | None = None  # the agent's version (docs/versions.md)
    service_name: str | None = None
    model: str | None = None
    convention: str = ""
    resource_attributes: tuple[tuple[str, ResourceValue], ...] = ()
    system: str = ""
    user: str = ""
    answer: str = ""
    tools: tuple[TurnTool, ...] = ()
    complete: bool = True  # the trace was whole (its root ended, then quiet) when the turn was built
    truncated: bool = False  # a field was cut to its cap, or tool calls past the cap were left out
    # The session scorers whose targets (agents, services, where) admit the turn's agent span.
    scorers: tuple[str, ...] = ()

    @property
    def turn_id(self) -> str:
        return f"{self.trace_id}:{self.span_id}"

    @property
    def key(self) -> bytes:
        return turn_key(self.conversation_id, self.turn_id)

    def encode(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_defaults=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> TurnSummary:
        return cls.model_validate_json(data)


def turn_key(conversation_id: str, turn_id: str) -> bytes:
    """``<conversation id>/<trace id>:<span id>``: one key per turn (a conversation id may hold ``/``; the
    turn id never does, so the key splits at its last ``/``)."""
    return f"{conversation_id}/{turn_id}".encode()


@dataclass(frozen=True, slots=True)
class TraceTurns:
    """What a ready trace gives the conversations: its turns, and its top-level agent runs without a
    conversation id (no turn: their per-trace scorers run as before)."""

    turns: tuple[TurnSummary, ...] = ()
    no_conversation: int = 0


def conversation_id_of(spans: Sequence[TraceSpan], agent: TraceSpan | None, id_attributes: Sequence[str]) -> str | None:
    """The conversation id: from the agent span's attributes, else from any span of the trace (the first key of
    ``id_attributes`` present wins on each span)."""
    if agent is not None and (found := _id_on(agent, id_attributes)) is not None:
        return found
    for item in spans:
        if item is not agent and (found := _id_on(item, id_attributes)) is not None:
            return found
    return None


def _id_on(item: TraceSpan, id_attributes: Sequence[str]) -> str | None:
    values: dict[str, str] = {}
    for kv in item.span.attributes:
        if kv.key in id_attributes:
            value = any_value(kv.value)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                values[kv.key] = str(value)
    return next((values[key] for key in id_attributes if key in values), None)


def turns_of(
    spans: Sequence[TraceSpan],
    runs: Sequence[ScorerRunRequest],
    *,
    id_attributes: Sequence[str],
    caps: TurnCaps,
    admitted: Callable[[TraceSpan], Collection[str]],
    complete: bool,
) -> TraceTurns:
    """The turns of one ready trace: each run (``trace_runs`` over its spans) of a top-level agent span whose
    trace names a conversation and that ``admitted`` gives at least one session scorer."""
    by_id = {item.span.span_id: item for item in spans}
    run_ids = {bytes.fromhex(run.target.span_id) for run in runs}
    turns: list[TurnSummary] = []
    no_conversation = 0
    for run in runs:
        span_id = bytes.fromhex(run.target.span_id)
        agent = by_id.get(span_id)
        if agent is None or _under_another_run(agent, by_id, run_ids):
            continue
        conversation = conversation_id_of(spans, agent, id_attributes)
        if conversation is None:
            no_conversation += 1
            continue
        scorers = tuple(admitted(agent))
        if scorers:
            turns.append(_summary(run, agent, conversation, scorers, caps, complete))
    return TraceTurns(tuple(turns), no_conversation)


def _under_another_run(agent: TraceSpan, by_id: Mapping[bytes, TraceSpan], run_ids: Collection[bytes]) -> bool:
    seen = {agent.span.span_id}
    parent = agent.span.parent_span_id
    while parent and parent not in seen:
        if parent in run_ids:
            return True
        seen.add(parent)
        item = by_id.get(parent)
        if item is None:
            return False
        parent = item.span.parent_span_id
    return False


def _summary(
    run: ScorerRunRequest,
    agent: TraceSpan,
    conversation: str,
    scorers: tuple[str, ...],
    caps: TurnCaps,
    complete: bool,
) -> TurnSummary:
    users = [m.text for m in run.input.input_messages if m.role == "user" and m.text]
    system = "\n\n".join(m.content for m in run.input.system_messages if m.content)
    answer = "\n\n".join(m.text for m in run.output if m.role == "assistant" and m.text)
    calls = [call for message in run.output for call in message.tool_invocations]
    tools = tuple(
        TurnTool(id=call.tool_call_id, name=call.tool_name, args=call.args, result=call.result)
        for call in calls[: caps.tool_calls + 1]  # one past the cap: cap_turn sees there were more
    )
    target = run.target
    summary = TurnSummary(
        conversation_id=conversation,
        trace_id=target.trace_id,
        span_id=target.span_id,
        parent_span_id=target.parent_span_id,
        span_name=target.span_name,
        start_time_unix_nano=agent.span.start_time_unix_nano,
        end_time_unix_nano=agent.span.end_time_unix_nano,
        agent_name=target.agent_name,
        agent_id=target.agent_id,
        version=target.version,
        service_name=target.service_name,
        model=target.model,
        convention=target.convention,
        resource_attributes=target.resource_attributes,
        tools=tools,
        complete=complete,
        scorers=scorers,
        system=system,
        user=users[-1] if users else "",
        answer=answer,
    )
    return cap_turn(summary, caps)


def cap_turn(turn: TurnSummary, caps: TurnCaps) -> TurnSummary:
    """``turn`` with each field cut to its cap, and flagged ``truncated`` when one was (stage 1 caps the turns it
    publishes; ``eval`` the turns of a dataset's conversation, to the same bounds)."""
    cut = turn.truncated

    def capped(text: str, limit: int) -> str:
        nonlocal cut
        if len(text) <= limit:
            return text
        cut = True
        return text[:limit]

    def capped_value(value: Any, limit: int) -> Any:
        nonlocal cut
        if value is None:
            return None
        if isinstance(value, str):
            return capped(value, limit)
        encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        if len(encoded) <= limit:
            return value
        cut = True
        return encoded[:limit]

    if len(turn.tools) > caps.tool_calls:
        cut = True
    tools = tuple(
        TurnTool(
            id=tool.id,
            name=capped(tool.name, caps.tool_args),
            args=capped_value(tool.args, caps.tool_args),
            result=capped_value(tool.result, caps.tool_result),
        )
        for tool in turn.tools[: caps.tool_calls]
    )
    fields = {
        "system": capped(turn.system, caps.system),
        "user": capped(turn.user, caps.text),
        "answer": capped(turn.answer, caps.text),
    }
    return turn.model_copy(update={"tools": tools, "truncated": cut, **fields})
