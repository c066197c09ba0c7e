"""Message payloads of every supported convention, read into Mastra message parts.

Two levels of trust. Attributes that a convention defines as messages (``gen_ai.input.messages``,
``llm.input_messages.*``, event ``tool_calls``) must follow their schema: a violation raises
:class:`MappingError` and the span is dead-lettered. Free-form values (``input.value``,
``mastra.*.input``, legacy ``gen_ai.prompt``) are read leniently: whatever cannot be read as
messages is kept as text, because a judge can still read text.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sidecar.conventions.attributes import MappingError, parse_json_text, unflatten
from sidecar.core import names
from sidecar.scoring.agent import ReasoningPart, TextPart, ToolInvocation, ToolInvocationPart

__all__ = [
    "ParsedMessage",
    "Role",
    "chat_message",
    "event_messages",
    "flattened_messages",
    "free_form",
    "genai_messages",
    "genai_system_instructions",
    "merge_tool_results",
    "openinference_messages",
]

Role = Literal["user", "assistant", "system", "tool"]
Part = TextPart | ToolInvocationPart | ReasoningPart

_ROLES: Mapping[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "model": "assistant",  # Gemini
    "ai": "assistant",
    "system": "system",
    "developer": "system",  # OpenAI's newer name for system
    "tool": "tool",
    "function": "tool",  # OpenAI's pre-tools name
    "ipython": "tool",
}
_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})
_REASONING_TYPES = frozenset({"reasoning", "thinking"})
_CALL_TYPES = frozenset({"tool_call", "tool-call", "function_call", "tool_use"})
_RESULT_TYPES = frozenset({"tool_call_response", "tool-result", "tool_result", "function_call_output"})
_INPUT_TEXT_KEYS = ("prompt", "input", "query", "question", "message", "content", "text")


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    role: Role
    parts: tuple[Part, ...]


def _role(value: Any, default: Role) -> Role:
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise MappingError(f"message role is not a string: {type(value).__name__}")
    role = _ROLES.get(value.lower())
    if role is None:
        raise MappingError(f"unknown message role {value[:40]!r}")
    return role


def _args(value: Any) -> Any:
    # Providers send arguments as a JSON string; scorers compare them as objects.
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _str(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _call(call_id: Any, name: Any, args: Any) -> ToolInvocationPart:
    return ToolInvocationPart(
        tool_invocation=ToolInvocation(state="call", tool_call_id=_str(call_id), tool_name=_str(name), args=_args(args))
    )


def _result(call_id: Any, name: Any, result: Any) -> ToolInvocationPart:
    return ToolInvocationPart(
        tool_invocation=ToolInvocation(state="result", tool_call_id=_str(call_id), tool_name=_str(name), result=result)
    )


def _part(raw: Any, *, strict: bool) -> Part | None:
    """One message part in GenAI (``content``) or AI SDK / Mastra (``text``, camelCase ids) form."""
    if isinstance(raw, str):
        if strict:
            raise MappingError("message part is not an object")
        return TextPart(text=raw)
    if not isinstance(raw, Mapping):
        raise MappingError(f"message part is a {type(raw).__name__}")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise MappingError("message part without a type")
    if kind in _TEXT_TYPES:
        text = raw.get("content", raw.get("text"))
        if not isinstance(text, str):
            raise MappingError("text part without string content")
        return TextPart(text=text)
    if kind in _REASONING_TYPES:
        return ReasoningPart(reasoning=_str(raw.get("content", raw.get("text", raw.get("reasoning")))))
    if kind in _CALL_TYPES:
        return _call(
            raw.get("id", raw.get("toolCallId", raw.get("call_id"))),
            raw.get("name", raw.get("toolName")),
            raw.get("arguments", raw.get("args", raw.get("input"))),
        )
    if kind in _RESULT_TYPES:
        return _result(
            raw.get("id", raw.get("toolCallId", raw.get("call_id"))),
            raw.get("name", raw.get("toolName")),
            raw.get("response", raw.get("result", raw.get("output"))),
        )
    if kind == "tool-invocation":
        inv = raw.get("toolInvocation")
        if not isinstance(inv, Mapping):
            raise MappingError("tool-invocation part without toolInvocation")
        try:
            return ToolInvocationPart(tool_invocation=ToolInvocation.model_validate(inv))
        except ValueError as exc:
            raise MappingError("invalid toolInvocation") from exc
    # Images, audio, files, server tool calls: nothing a text judge can read.
    return None


def _parts(raw: Any, *, strict: bool) -> list[Part]:
    if not isinstance(raw, list):
        raise MappingError("message parts are not a list")
    return [p for p in (_part(r, strict=strict) for r in raw) if p is not None]


def _tool_calls(raw: Any) -> list[Part]:
    raw = parse_json_text(raw, what="tool_calls")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise MappingError("tool_calls is not a list")
    calls: list[Part] = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise MappingError("tool call is not an object")
        fn = item.get("function")
        source = fn if isinstance(fn, Mapping) else item
        calls.append(
            _call(
                item.get("id", item.get("toolCallId")),
                source.get("name", item.get("toolName")),
                source.get("arguments", item.get("args", item.get("input"))),
            )
        )
    return calls


def chat_message(obj: Mapping[str, Any], default_role: Role) -> ParsedMessage:
    """A message as chat APIs, OpenLLMetry, span events, the AI SDK and Mastra write it."""
    role = _role(obj.get("role"), default_role)
    parts: list[Part] = []
    if "parts" in obj:
        parts.extend(_parts(obj["parts"], strict=False))
    content = obj.get("content")
    if isinstance(content, Mapping):  # MastraDBMessage: content = {format: 2, parts, content?}
        if "parts" in content:
            parts.extend(_parts(content["parts"], strict=False))
        elif isinstance(content.get("content"), str):
            parts.append(TextPart(text=content["content"]))
    elif isinstance(content, list):
        parts.extend(_parts(content, strict=False))
    elif content is not None:
        text = _str(content)
        if role == "tool" and obj.get("tool_call_id") is not None:
            parts.append(_result(obj.get("tool_call_id"), obj.get("name"), text))
        else:
            parts.append(TextPart(text=text))
    if "tool_calls" in obj:
        parts.extend(_tool_calls(obj["tool_calls"]))
    if "toolInvocations" in obj and isinstance(obj["toolInvocations"], list):
        parts.extend(
            p
            for p in (
                _part({"type": "tool-invocation", "toolInvocation": i}, strict=False) for i in obj["toolInvocations"]
            )
            if p is not None
        )
    return ParsedMessage(role=role, parts=tuple(parts))


def genai_messages(value: Any, *, what: str) -> list[ParsedMessage]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages``: [{role, parts: [{type, ...}]}]."""
    data = parse_json_text(value, what=what)
    if not isinstance(data, list):
        raise MappingError(f"{what}: not a list of messages")
    messages: list[ParsedMessage] = []
    for item in data:
        if not isinstance(item, Mapping) or "parts" not in item:
            raise MappingError(f"{what}: message without parts")
        role = _role(item.get("role"), "user")
        messages.append(ParsedMessage(role=role, parts=tuple(_parts(item["parts"], strict=True))))
    return messages


def genai_system_instructions(value: Any) -> list[str]:
    """``gen_ai.system_instructions``: a JSON list of parts, or (as Mastra writes it) plain text."""
    data: Any = value
    if isinstance(value, str):
        if value.lstrip()[:1] not in ("[", "{"):
            return [value] if value else []
        try:
            data = json.loads(value)
        except (ValueError, RecursionError):
            return [value]  # instructions that merely start with a bracket
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list):
        raise MappingError("gen_ai.system_instructions: not a list of parts")
    return [p.text for p in _parts(data, strict=False) if isinstance(p, TextPart) and p.text]


def openinference_messages(attributes: Mapping[str, Any], prefix: str) -> list[ParsedMessage]:
    """``llm.input_messages.<i>.message.role|content|contents.<j>.message_content.*|tool_calls.<j>.tool_call.*``."""
    messages: list[ParsedMessage] = []
    for item in unflatten(attributes, prefix):
        msg = item.get("message", {}) if isinstance(item, Mapping) else None
        if not isinstance(msg, Mapping):
            raise MappingError(f"{prefix}: malformed message")
        obj: dict[str, Any] = {"role": msg.get("role"), "content": msg.get("content")}
        if msg.get("name") is not None:
            obj["name"] = msg["name"]
        if msg.get("tool_call_id") is not None:
            obj["tool_call_id"] = msg["tool_call_id"]
        contents = msg.get("contents")
        if isinstance(contents, list):
            obj["parts"] = [
                {"type": c.get("type", "text"), "text": c.get("text")}
                for c in (x.get("message_content", {}) if isinstance(x, Mapping) else {} for x in contents)
                if isinstance(c, Mapping) and isinstance(c.get("text"), str)
            ]
        calls = msg.get("tool_calls")
        if isinstance(calls, list):
            obj["tool_calls"] = [
                {"id": tc.get("id"), "function": tc.get("function", {})}
                for tc in (x.get("tool_call", {}) if isinstance(x, Mapping) else {} for x in calls)
                if isinstance(tc, Mapping) and tc  # an empty slot of sparse indices (OpenInference numbers oddly)
            ]
        messages.append(chat_message(obj, "user"))
    return messages


def flattened_messages(attributes: Mapping[str, Any], prefix: str, default_role: Role) -> list[ParsedMessage]:
    """OpenLLMetry's ``gen_ai.prompt.<i>.role|content|tool_calls.<j>.name|arguments|id``."""
    out: list[ParsedMessage] = []
    for item in unflatten(attributes, prefix):
        if not isinstance(item, Mapping):
            raise MappingError(f"{prefix}: malformed message")
        obj = dict(item)
        if isinstance(obj.get("tool_calls"), list):
            obj["tool_calls"] = [c for c in obj["tool_calls"] if isinstance(c, Mapping) and c]
        out.append(chat_message(obj, default_role))
    return out


def _objects(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _payload(item: Mapping[str, Any]) -> Mapping[str, Any]:
    # Mastra's stream chunks wrap tool calls and results as {type, payload: {...}}.
    inner = item.get("payload")
    return inner if isinstance(inner, Mapping) else item


def _looks_like_messages(items: Sequence[Any]) -> bool:
    return bool(items) and all(isinstance(i, Mapping) and ("role" in i or "parts" in i) for i in items)


def _structure(obj: Any, role: Role) -> list[ParsedMessage]:
    if isinstance(obj, str):
        return [ParsedMessage(role=role, parts=(TextPart(text=obj),))] if obj else []
    if isinstance(obj, list):
        if _looks_like_messages(obj):
            return [chat_message(m, role) for m in obj]
        if all(isinstance(i, str) for i in obj):
            return [m for i in obj for m in _structure(i, role)]
    elif isinstance(obj, Mapping):
        if isinstance(obj.get("messages"), list):
            return _structure(obj["messages"], role)
        if "role" in obj or "parts" in obj:
            return [chat_message(obj, role)]
        if isinstance(obj.get("choices"), list):  # an OpenAI chat completion response body
            return [
                chat_message(c["message"], "assistant")
                for c in obj["choices"]
                if isinstance(c, Mapping) and isinstance(c.get("message"), Mapping)
            ]
        if isinstance(obj.get("text"), str) or "toolCalls" in obj:  # Mastra / AI SDK generate() result
            parts: list[Part] = []
            results: dict[str, Mapping[str, Any]] = {}
            for r in _objects(obj.get("toolResults")):
                results[_str(_payload(r).get("toolCallId"))] = _payload(r)
            for call in _objects(obj.get("toolCalls")):
                payload = _payload(call)
                call_id = _str(payload.get("toolCallId"))
                res = results.get(call_id) if call_id else None
                inv = ToolInvocation(
                    state="result" if res is not None else "call",
                    tool_call_id=call_id,
                    tool_name=_str(payload.get("toolName")),
                    args=_args(payload.get("args", payload.get("input"))),
                    result=None if res is None else res.get("result", res.get("output")),
                )
                parts.append(ToolInvocationPart(tool_invocation=inv))
            if obj.get("text"):
                parts.append(TextPart(text=obj["text"]))
            return [ParsedMessage(role=role, parts=tuple(parts))] if parts else []
        for key in _INPUT_TEXT_KEYS:
            if isinstance(obj.get(key), str):
                return _structure(obj[key], role)
    # Anything else is still content a judge can read.
    return _structure(json.dumps(obj, ensure_ascii=False, default=str), role) if obj not in (None, {}, []) else []


def free_form(value: Any, role: Role, *, mime_type: str | None = None) -> list[ParsedMessage]:
    """A value of unknown shape: text, a JSON document, or an already structured value."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        looks_json = value.lstrip()[:1] in ("{", "[")
        if mime_type == names.MIME_JSON or (mime_type is None and looks_json):
            with contextlib.suppress(ValueError, RecursionError):
                value = json.loads(value)
    return _structure(value, role)


def event_messages(
    events: Iterable[tuple[str, Mapping[str, Any]]],
) -> tuple[list[ParsedMessage], list[ParsedMessage]]:
    """Message content carried by span events: (input messages, output choices).

    Three forms: the deprecated per-message events (``gen_ai.user.message`` … ``gen_ai.choice``) with their
    fields as attributes; the same events with the whole message as one JSON attribute
    ``gen_ai.event.content`` (Azure AI Inference, Azure AI Agents, Semantic Kernel); and the 1.26–1.27 events
    ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` whose ``gen_ai.prompt`` / ``gen_ai.completion``
    attribute holds the whole list of messages as JSON.
    """
    inputs: list[ParsedMessage] = []
    outputs: list[ParsedMessage] = []
    for name, raw in events:
        whole = names.CONTENT_EVENTS.get(name)
        if whole is not None:
            if whole in raw:
                role: Role = "assistant" if name == names.EVENT_CONTENT_COMPLETION else "user"
                parsed = free_form(raw[whole], role)
                (outputs if role == "assistant" else inputs).extend(parsed)
            continue
        default = names.MESSAGE_EVENTS.get(name)
        if default is None:
            continue
        attrs = _with_event_content(raw, name)
        role = _role(attrs.get(names.EVENT_ATTR_ROLE), default)  # type: ignore[arg-type]
        if name == names.EVENT_CHOICE:
            body = attrs.get(names.EVENT_ATTR_MESSAGE)
            body = parse_json_text(body, what="gen_ai.choice message") if isinstance(body, str) else body
            if isinstance(body, Mapping):
                calls = attrs.get(names.EVENT_ATTR_TOOL_CALLS)
                if calls is not None and names.EVENT_ATTR_TOOL_CALLS not in body:
                    # OpenLLMetry's log events put a choice's tool calls beside its message, not in it.
                    body = {**body, names.EVENT_ATTR_TOOL_CALLS: calls}
                outputs.append(chat_message(body, "assistant"))
                continue
            if body is not None:
                raise MappingError("gen_ai.choice message is not an object")
        obj: dict[str, Any] = {"role": role}
        content = attrs.get(names.EVENT_ATTR_CONTENT)
        if content is not None:
            obj["content"] = content
        if names.EVENT_ATTR_TOOL_CALLS in attrs:
            obj["tool_calls"] = attrs[names.EVENT_ATTR_TOOL_CALLS]
        if role == "tool":
            # Without an id (OpenLLMetry's log events), the result answers the oldest call still open.
            obj["tool_call_id"] = attrs.get(names.EVENT_ATTR_ID) or ""
        (outputs if name == names.EVENT_CHOICE else inputs).append(chat_message(obj, role))
    return inputs, outputs


def _with_event_content(attrs: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """An event's fields, with those of a ``gen_ai.event.content`` JSON object laid over its attributes."""
    raw = attrs.get(names.EVENT_ATTR_EVENT_CONTENT)
    if raw is None:
        return attrs
    body = parse_json_text(raw, what=f"{name} {names.EVENT_ATTR_EVENT_CONTENT}") if isinstance(raw, str) else raw
    if not isinstance(body, Mapping):
        raise MappingError(f"{name} {names.EVENT_ATTR_EVENT_CONTENT} is not a JSON object")
    return {**attrs, **body}


def merge_tool_results(messages: Sequence[ParsedMessage]) -> list[ParsedMessage]:
    """Attach tool results to the calls they answer, as Mastra's message list does.

    A result whose id matches an earlier call turns that call into ``state='result'`` (a result without an id:
    the oldest call still open); a tool message left without parts is dropped. Unmatched results stay where they
    were.
    """
    kept: list[list[Part]] = []
    calls: dict[str, tuple[int, int]] = {}  # open calls, in the order they were made
    for message in messages:
        keep: list[Part] = []
        kept.append(keep)
        for part in message.parts:
            inv = part.tool_invocation if isinstance(part, ToolInvocationPart) else None
            if inv is not None and inv.state == "call" and inv.tool_call_id:
                calls[inv.tool_call_id] = (len(kept) - 1, len(keep))
            elif (
                inv is not None
                and inv.state == "result"
                and (inv.tool_call_id in calls or (not inv.tool_call_id and calls))
            ):
                # A result without an id answers the oldest open call: tool results follow their calls in order.
                ci, pi = calls.pop(inv.tool_call_id or next(iter(calls)))
                call = kept[ci][pi]
                if isinstance(call, ToolInvocationPart):
                    merged = call.tool_invocation.model_copy(update={"state": "result", "result": inv.result})
                    kept[ci][pi] = ToolInvocationPart(tool_invocation=merged)
                    continue
            keep.append(part)
    return [
        ParsedMessage(role=m.role, parts=tuple(parts))
        for m, parts in zip(messages, kept, strict=True)
        if parts or m.role != "tool"
    ]
