"""Every piece of traced content in a run, and the run rebuilt with some of it replaced.

What a run carries that a judge can read: the input (messages, remembered messages, system instructions), the
output (text, reasoning, tool calls' arguments and results), the ground truth of an ``eval`` item, the request
context (retrieved documents), and the span's and resource's attributes a judge written in YAML reads. What is
structure stays as it is: message ids, roles, timestamps, tool call ids and tool names, mapping keys.

One traversal serves both uses (``map_texts``): with a function that only records, nothing is rebuilt (an
unchanged branch is returned as it was), so finding the texts costs a walk and no copies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from sidecar.scoring.agent import (
    AgentMessage,
    AgentRunInput,
    MessageContent,
    ReasoningPart,
    SystemMessage,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
)
from sidecar.scoring.steps import ScorerRun
from sidecar.scoring.types import to_json_value

__all__ = ["map_texts"]

TextMap = Callable[[str], str]

# Integers this long are read as text too: a card or phone number passed to a tool as a JSON number.
_LONG_INTEGER = 10**5


def map_texts(run: ScorerRun, fn: TextMap) -> ScorerRun:
    """``run`` with every text of its traced content passed through ``fn``; the same object when none changed."""
    changes: dict[str, Any] = {}
    for name in ("input", "output", "ground_truth", "request_context", "span_attributes", "resource_attributes"):
        value = getattr(run, name)
        mapped = _map(value, fn)
        if mapped is not value:
            changes[name] = mapped
    if not changes:
        return run
    return ScorerRun(
        input=changes.get("input", run.input),
        output=changes.get("output", run.output),
        run_id=run.run_id,
        ground_truth=changes.get("ground_truth", run.ground_truth),
        request_context=changes.get("request_context", run.request_context),
        span_attributes=changes.get("span_attributes", run.span_attributes),
        resource_attributes=changes.get("resource_attributes", run.resource_attributes),
    )


def _map(value: Any, fn: TextMap) -> Any:
    if isinstance(value, str):
        mapped = fn(value)
        return value if mapped == value else mapped
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        if abs(value) < _LONG_INTEGER:
            return value
        text = str(value)
        mapped = fn(text)
        return value if mapped == text else mapped
    if isinstance(value, AgentMessage):
        return _message(value, fn)
    if isinstance(value, AgentRunInput):
        return _run_input(value, fn)
    if isinstance(value, Mapping):
        items = {key: _map(item, fn) for key, item in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list | tuple):
        mapped_items = [_map(item, fn) for item in value]
        if all(new is old for new, old in zip(mapped_items, value, strict=True)):
            return value
        return tuple(mapped_items) if isinstance(value, tuple) else mapped_items
    if isinstance(value, BaseModel):  # any other model (an eval dataset's): its JSON, as scorers read it
        as_json = to_json_value(value)
        mapped = _map(as_json, fn)
        return value if mapped is as_json else mapped
    return value


def _run_input(value: AgentRunInput, fn: TextMap) -> AgentRunInput:
    inputs = _map(value.input_messages, fn)
    remembered = _map(value.remembered_messages, fn)
    systems = _systems(value.system_messages, fn)
    tagged = {tag: _systems(messages, fn) for tag, messages in value.tagged_system_messages.items()}
    unchanged_tags = all(tagged[tag] is messages for tag, messages in value.tagged_system_messages.items())
    if (
        inputs is value.input_messages
        and remembered is value.remembered_messages
        and systems is value.system_messages
        and unchanged_tags
    ):
        return value
    return value.model_copy(
        update={
            "input_messages": inputs,
            "remembered_messages": remembered,
            "system_messages": systems,
            "tagged_system_messages": tagged,
        }
    )


def _systems(messages: tuple[SystemMessage, ...], fn: TextMap) -> tuple[SystemMessage, ...]:
    mapped = tuple(
        message
        if (content := fn(message.content)) == message.content
        else message.model_copy(update={"content": content})
        for message in messages
    )
    return messages if all(new is old for new, old in zip(mapped, messages, strict=True)) else mapped


def _message(message: AgentMessage, fn: TextMap) -> AgentMessage:
    parts = message.content.parts
    mapped = tuple(_part(part, fn) for part in parts)
    if all(new is old for new, old in zip(mapped, parts, strict=True)):
        return message
    content = MessageContent(format=message.content.format, parts=mapped)
    return message.model_copy(update={"content": content})


def _part(part: TextPart | ToolInvocationPart | ReasoningPart, fn: TextMap) -> Any:
    if isinstance(part, TextPart):
        text = fn(part.text)
        return part if text == part.text else part.model_copy(update={"text": text})
    if isinstance(part, ReasoningPart):
        reasoning = fn(part.reasoning)
        return part if reasoning == part.reasoning else part.model_copy(update={"reasoning": reasoning})
    call = part.tool_invocation
    args, result = _map(call.args, fn), _map(call.result, fn)
    if args is call.args and result is call.result:
        return part
    updated: ToolInvocation = call.model_copy(update={"args": args, "result": result})
    return part.model_copy(update={"tool_invocation": updated})
