"""Tool calls of a run, read the way Mastra's scorer utils read them (``extractToolCalls``, the raw
invocations ``noToolErrors`` checks, and the tool-call steps of a trajectory).

Messages arrive typed (:class:`~sidecar.scoring.agent.AgentMessage`, the service's runs) or as plain
dicts in Mastra's stored shape (``content.parts`` with ``tool-invocation`` parts, the legacy
``content.toolInvocations`` array, or an older message-level ``toolInvocations``), as ``eval`` datasets
write them. Both come out as the same immutable :class:`ToolCall` records, in call order.

Which messages belong to the run's turn: Mastra scores an agent run whose output holds every message the
agent produced in the turn (tool calls included). Our runs are often one model call of that turn, where
the calls made earlier in the turn arrive as *input* messages after the user's message. So the turn is
the input's messages after its last user message, then the output (for Mastra-shaped inputs, which hold
only user messages, that is the output alone, as in Mastra).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.scoring.agent import AgentMessage, AgentRunInput
from sidecar.scoring.types import to_json_value

__all__ = [
    "ToolCall",
    "ToolCalls",
    "as_messages",
    "extract_tool_calls",
    "is_error_invocation",
    "tool_invocations",
    "turn_messages",
]

# Mastra's extractToolCalls keeps only these states: a streaming ``partial-call`` is not a call yet, and
# a thrown call (``output-error``) is reported by noToolErrors, not counted as a selected tool.
_COUNTED_STATES = frozenset({"call", "result"})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation of the run, in call order (``order`` counts from 0 across the turn)."""

    name: str
    arguments: Any
    result: Any
    error: str | None
    order: int
    call_id: str
    state: str
    message_index: int
    invocation_index: int
    # The executor flagged the result as a failure (``isError``), even without an ``error`` field.
    is_error: bool = False

    @property
    def failed(self) -> bool:
        """Mastra's ``isErrorInvocation``: no result (``call``), thrown (``output-error``), flagged
        (``isError``) or a result carrying a truthy ``error``."""
        return is_error_invocation(self.state, self.result, self.is_error)

    @property
    def succeeded(self) -> bool:
        """A trajectory step's ``success``: answered, and not flagged as an error."""
        return self.state == "result" and not self.is_error

    def to_json(self) -> dict[str, Any]:
        """Mastra's ``ToolCallInfo`` names, plus what the record adds (arguments, result, error)."""
        data: dict[str, Any] = {
            "toolName": self.name,
            "toolCallId": self.call_id,
            "messageIndex": self.message_index,
            "invocationIndex": self.invocation_index,
            "order": self.order,
            "state": self.state,
        }
        if self.arguments is not None:
            data["args"] = self.arguments
        if self.result is not None:
            data["result"] = self.result
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """``extractToolCalls``' answer: the names in call order and one record per call."""

    calls: tuple[ToolCall, ...]

    @property
    def tools(self) -> list[str]:
        return [c.name for c in self.calls]

    def infos(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.calls]


def is_error_invocation(state: str, result: Any, is_error: bool) -> bool:
    error = result.get("error") if isinstance(result, Mapping) else None
    return state in ("call", "output-error") or is_error or _truthy(error)


def _truthy(value: Any) -> bool:
    # JavaScript's Boolean(): "", 0, NaN, null and undefined are false; objects and arrays are true.
    if value is None or value is False:
        return False
    if isinstance(value, int | float):
        return value == value and value != 0  # NaN is false
    if isinstance(value, str):
        return value != ""
    return True


# -- messages ----------------------------------------------------------------------------------------


def as_messages(value: Any) -> list[Any]:
    """A run output (or a message list) as a list of messages: typed ones stay typed."""
    if isinstance(value, AgentMessage):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, Mapping) and ("content" in value or "toolInvocations" in value) and "role" in value:
        return [value]  # a single message
    return []


def _role(message: Any) -> str | None:
    if isinstance(message, AgentMessage):
        return message.role
    role = message.get("role") if isinstance(message, Mapping) else None
    return role if isinstance(role, str) else None


def turn_messages(run_input: Any, run_output: Any) -> list[Any]:
    """The messages of the scored turn: the input's messages after its last user message, then the output.

    An input that is not in the agent shape contributes nothing (Mastra reads the output alone).
    """
    before: list[Any] = []
    if isinstance(run_input, AgentRunInput):
        inputs: list[Any] = list(run_input.input_messages)
    else:
        value = to_json_value(run_input) if run_input is not None else None
        raw = value.get("inputMessages") if isinstance(value, Mapping) else None
        inputs = list(raw) if isinstance(raw, list) else []
    last_user = max((i for i, m in enumerate(inputs) if _role(m) == "user"), default=-1)
    before = [m for m in inputs[last_user + 1 :] if _role(m) in ("assistant", "tool")]
    return before + as_messages(run_output)


# -- invocations -------------------------------------------------------------------------------------


def _typed_invocations(message: AgentMessage) -> list[dict[str, Any]]:
    return [to_json_value(inv) for inv in message.tool_invocations]


def _dict_invocations(message: Mapping[str, Any], *, merge: bool) -> list[dict[str, Any]]:
    content = message.get("content")
    content = content if isinstance(content, Mapping) else {}
    legacy_raw = content.get("toolInvocations")
    if legacy_raw is None:
        legacy_raw = message.get("toolInvocations")  # the message shape of Mastra's first scorers
    legacy = [i for i in legacy_raw if isinstance(i, Mapping)] if isinstance(legacy_raw, list) else None
    parts = content.get("parts")
    from_parts = [
        p["toolInvocation"]
        for p in (parts if isinstance(parts, list) else [])
        if isinstance(p, Mapping)
        and p.get("type") == "tool-invocation"
        and isinstance(p.get("toolInvocation"), Mapping)
    ]
    if not merge:
        # extractToolCalls: the legacy array when present (even empty), else the parts.
        return [dict(i) for i in (legacy if legacy is not None else from_parts)]
    return [dict(i) for i in _merge(legacy or [], from_parts)]


def _merge(legacy: Sequence[Mapping[str, Any]], from_parts: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Both storage forms of one message: a call present in the parts wins (it holds the final state, and
    thrown calls live only there); a call only in the legacy array keeps its place among them."""
    part_ids = {p.get("toolCallId") for p in from_parts if p.get("toolCallId")}
    merged: list[Mapping[str, Any]] = []
    emitted = 0
    position = {p.get("toolCallId"): i for i, p in enumerate(from_parts) if p.get("toolCallId")}
    for invocation in legacy:
        call_id = invocation.get("toolCallId")
        if call_id and call_id in part_ids:
            index = position[call_id]
            if index >= emitted:
                merged.extend(from_parts[emitted : index + 1])
                emitted = index + 1
        else:
            merged.append(invocation)
    merged.extend(from_parts[emitted:])
    return merged


def _invocations_of(message: Any, *, merge: bool) -> list[dict[str, Any]]:
    if isinstance(message, AgentMessage):
        return _typed_invocations(message)
    if isinstance(message, Mapping):
        return _dict_invocations(message, merge=merge)
    return []


def _error_text(invocation: Mapping[str, Any]) -> str | None:
    text = invocation.get("errorText")
    if isinstance(text, str) and text:
        return text
    result = invocation.get("result")
    error = result.get("error") if isinstance(result, Mapping) else None
    if _truthy(error):
        return error if isinstance(error, str) else str(to_json_value(error))
    if invocation.get("isError") is True:
        return "the tool reported an error"
    return None


def _record(invocation: Mapping[str, Any], order: int, message_index: int, invocation_index: int) -> ToolCall:
    call_id = invocation.get("toolCallId")
    state = invocation.get("state")
    return ToolCall(
        name=str(invocation.get("toolName") or ""),
        arguments=invocation.get("args", invocation.get("input")),
        result=invocation.get("result", invocation.get("output")),
        error=_error_text(invocation),
        order=order,
        # Mastra names an id-less call by its position: `${messageIndex}-${invocationIndex}`.
        call_id=str(call_id) if call_id else f"{message_index}-{invocation_index}",
        state=state if isinstance(state, str) else "",
        message_index=message_index,
        invocation_index=invocation_index,
        is_error=invocation.get("isError") is True,
    )


def _walk(messages: Iterable[Any], *, merge: bool) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for message_index, message in enumerate(messages):
        for invocation_index, invocation in enumerate(_invocations_of(message, merge=merge)):
            calls.append(_record(invocation, len(calls), message_index, invocation_index))
    return calls


def tool_invocations(run_input: Any, run_output: Any) -> tuple[ToolCall, ...]:
    """Every invocation of the turn, both storage forms merged (what ``noToolErrors`` and trajectories read)."""
    return tuple(_walk(turn_messages(run_input, run_output), merge=True))


def extract_tool_calls(run_input: Any, run_output: Any) -> ToolCalls:
    """Mastra's ``extractToolCalls``: named calls in state ``call`` or ``result``, in order."""
    walked = [
        c for c in _walk(turn_messages(run_input, run_output), merge=False) if c.name and c.state in _COUNTED_STATES
    ]
    return ToolCalls(tuple(_renumber(walked)))


def _renumber(calls: list[ToolCall]) -> list[ToolCall]:
    return [
        ToolCall(
            c.name,
            c.arguments,
            c.result,
            c.error,
            i,
            c.call_id,
            c.state,
            c.message_index,
            c.invocation_index,
            c.is_error,
        )
        for i, c in enumerate(calls)
    ]
