"""One selected span → one :class:`ScorerRunRequest` in Mastra's agent run shape.

Sources are tried in a fixed order per field (see ``docs/ingest.md``); the first one present wins,
so a span written by two instrumentations at once is read once, from its richest convention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.conventions.attributes import MappingError, parse_json_text
from sidecar.conventions.messages import (
    ParsedMessage,
    Role,
    event_messages,
    flattened_messages,
    free_form,
    genai_messages,
    genai_system_instructions,
    merge_tool_results,
    openinference_messages,
)
from sidecar.conventions.selection import SpanKind
from sidecar.core import names
from sidecar.core.runs import ResourceValue, ScorerRunRequest, SpanTarget
from sidecar.core.timestamps import iso_millis
from sidecar.scoring.agent import AgentMessage, AgentRunInput, MessageContent, SystemMessage, TextPart

__all__ = ["SpanView", "map_span", "usage_of"]

Events = tuple[tuple[str, Mapping[str, Any]], ...]


@dataclass(frozen=True, slots=True)
class SpanView:
    """The decoded parts of a selected span that mapping reads (ids in lowercase hex)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind
    start_time_unix_nano: int
    end_time_unix_nano: int
    sampled: bool
    service_name: str | None
    attributes: Mapping[str, Any]
    events: Events = ()
    resource_attributes: tuple[tuple[str, ResourceValue], ...] = ()
    # The span attributes the run keeps (``SpanTarget.span_attributes``), by key.
    kept_attributes: tuple[tuple[str, Any], ...] = ()
    version: str | None = None  # the agent's version (conventions.versions), when one is read


def _has_prefix(attributes: Mapping[str, Any], prefix: str) -> bool:
    return any(k.startswith(prefix) for k in attributes)


def _mastra_key(attributes: Mapping[str, Any], suffix: str) -> str | None:
    span_type = attributes.get(names.MASTRA_SPAN_TYPE)
    if isinstance(span_type, str):
        key = f"{names.MASTRA_PREFIX}{span_type.lower()}{suffix}"
        return key if key in attributes else None
    return next((k for k in attributes if k.startswith(names.MASTRA_PREFIX) and k.endswith(suffix)), None)


def _messages(view: SpanView, events: list[ParsedMessage], *, output: bool) -> tuple[list[ParsedMessage], str]:
    a = view.attributes
    role: Role = "assistant" if output else "user"
    genai = names.GEN_AI_OUTPUT_MESSAGES if output else names.GEN_AI_INPUT_MESSAGES
    if genai in a:
        return genai_messages(a[genai], what=genai), "genai"
    mastra = _mastra_key(a, names.MASTRA_OUTPUT_SUFFIX if output else names.MASTRA_INPUT_SUFFIX)
    if mastra is not None:
        return free_form(a[mastra], role), "mastra"
    oi = names.LLM_OUTPUT_MESSAGES if output else names.LLM_INPUT_MESSAGES
    if _has_prefix(a, oi + "."):
        return openinference_messages(a, oi), "openinference"
    legacy = names.GEN_AI_COMPLETION if output else names.GEN_AI_PROMPT
    if _has_prefix(a, legacy + "."):
        return flattened_messages(a, legacy, role), "genai_legacy"
    if legacy in a:
        return free_form(a[legacy], role), "genai_legacy"
    if events:
        return events, "genai_events"
    value = names.OUTPUT_VALUE if output else names.INPUT_VALUE
    if value in a:
        mime = a.get(names.OUTPUT_MIME_TYPE if output else names.INPUT_MIME_TYPE)
        return free_form(a[value], role, mime_type=mime if isinstance(mime, str) else None), "openinference"
    traceloop = names.TRACELOOP_ENTITY_OUTPUT if output else names.TRACELOOP_ENTITY_INPUT
    if traceloop in a:  # OpenLLMetry's workflow and agent spans: the decorated function's arguments and result
        return free_form(_entity(a[traceloop]), role), "openllmetry"
    old_mastra = names.MASTRA_LEGACY_OUTPUT if output else names.MASTRA_LEGACY_INPUT
    if names.MASTRA_SPAN_TYPE in a and old_mastra in a:
        return free_form(a[old_mastra], role), "mastra"
    return [], ""


def _entity(value: Any) -> Any:
    """OpenLLMetry's ``traceloop.entity.input``: ``{"args": [...], "kwargs": {...}}`` of the decorated function, as
    JSON; one string among them is the request itself."""
    try:
        data = parse_json_text(value, what=names.TRACELOOP_ENTITY_INPUT)
    except MappingError:
        return value  # free-form: text that is not JSON is read as text
    if isinstance(data, Mapping) and set(data) <= {"args", "kwargs"}:
        args = data.get("args")
        kwargs = data.get("kwargs")
        values = [*(args if isinstance(args, list) else []), *(kwargs.values() if isinstance(kwargs, Mapping) else [])]
        texts = [v for v in values if isinstance(v, str) and v]
        if len(texts) == 1:
            return texts[0]
    return value


def _first(attributes: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None and value != "":
            return value
    return None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _iso(unix_nano: int) -> str:
    return iso_millis(unix_nano) if unix_nano > 0 else ""


def _agent_message(message: ParsedMessage, message_id: str, created_at: str) -> AgentMessage:
    return AgentMessage(
        id=message_id, role=message.role, created_at=created_at, content=MessageContent(parts=message.parts)
    )


def _text_of(message: ParsedMessage) -> str:
    return "\n\n".join(p.text for p in message.parts if isinstance(p, TextPart) and p.text)


def agent_name_of(attributes: Mapping[str, Any]) -> str | None:
    """The name agent filters match: gen_ai.agent.name, OpenInference agent.name, else the agent id."""
    return _opt_str(_first(attributes, names.GEN_AI_AGENT_NAME, names.OI_AGENT_NAME, names.GEN_AI_AGENT_ID))


def _one_message_per_turn(messages: list[ParsedMessage]) -> list[ParsedMessage]:
    """Consecutive assistant messages of one turn (a tool call, then the answer) as one message whose parts
    keep their order: the shape Mastra stores, where the answer's text is the assistant message's text."""
    merged: list[ParsedMessage] = []
    for message in messages:
        if merged and message.role == "assistant" and merged[-1].role == "assistant":
            merged[-1] = ParsedMessage(role="assistant", parts=(*merged[-1].parts, *message.parts))
        else:
            merged.append(message)
    return merged


def usage_of(attributes: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """A span's own (input, output) token counts, in any convention that reports them."""
    a = attributes
    return (
        _opt_int(
            _first(a, names.GEN_AI_USAGE_INPUT_TOKENS, names.GEN_AI_USAGE_PROMPT_TOKENS, names.LLM_TOKEN_COUNT_PROMPT)
        ),
        _opt_int(
            _first(
                a,
                names.GEN_AI_USAGE_OUTPUT_TOKENS,
                names.GEN_AI_USAGE_COMPLETION_TOKENS,
                names.LLM_TOKEN_COUNT_COMPLETION,
            )
        ),
    )


def map_span(view: SpanView) -> ScorerRunRequest | None:
    """The scorer run for a span, or ``None`` when the span carries no content at all.

    Raises :class:`~sidecar.conventions.attributes.MappingError` (a ``ValueError``) when content is
    present but malformed.
    """
    a = view.attributes
    event_in, event_out = event_messages(view.events) if view.events else ([], [])
    inputs, in_convention = _messages(view, event_in, output=False)
    outputs, out_convention = _messages(view, event_out, output=True)

    system: list[str] = []
    if names.GEN_AI_SYSTEM_INSTRUCTIONS in a:
        system.extend(genai_system_instructions(a[names.GEN_AI_SYSTEM_INSTRUCTIONS]))
    conversation: list[ParsedMessage] = []
    for message in merge_tool_results(inputs):
        if message.role == "system":
            text = _text_of(message)
            if text:
                system.append(text)
        elif message.parts:  # images-only or sparse-index messages leave nothing a judge can read
            conversation.append(message)
    answers = _one_message_per_turn([m for m in merge_tool_results(outputs) if m.role != "system" and m.parts])
    if not conversation and not answers and not system:
        return None

    # The current turn starts at the last user message; everything before it is history the agent
    # was given (memory), which Mastra calls remembered messages.
    last_user = max((i for i, m in enumerate(conversation) if m.role == "user"), default=0)
    started = _iso(view.start_time_unix_nano)
    ended = _iso(view.end_time_unix_nano)
    tokens_in, tokens_out = usage_of(a)
    history = [_agent_message(m, f"{view.span_id}-in-{i}", started) for i, m in enumerate(conversation)]
    run_input = AgentRunInput(
        input_messages=tuple(history[last_user:]),
        remembered_messages=tuple(history[:last_user]),
        system_messages=tuple(SystemMessage(content=t) for t in dict.fromkeys(system)),
    )
    output = tuple(_agent_message(m, f"{view.span_id}-out-{i}", ended) for i, m in enumerate(answers))
    target = SpanTarget(
        trace_id=view.trace_id,
        span_id=view.span_id,
        parent_span_id=view.parent_span_id,
        span_name=view.name,
        kind=view.kind,
        convention=in_convention or out_convention or "genai",
        agent_name=_opt_str(_first(a, names.GEN_AI_AGENT_NAME, names.OI_AGENT_NAME)),
        agent_id=_opt_str(_first(a, names.GEN_AI_AGENT_ID, names.MASTRA_LEGACY_AGENT_ID)),
        version=view.version,
        service_name=view.service_name,
        resource_attributes=view.resource_attributes,
        span_attributes=view.kept_attributes,
        model=_opt_str(_first(a, names.GEN_AI_REQUEST_MODEL, names.GEN_AI_RESPONSE_MODEL, names.LLM_MODEL_NAME)),
        provider=_opt_str(
            _first(a, names.GEN_AI_PROVIDER_NAME, names.GEN_AI_SYSTEM, names.LLM_PROVIDER, names.LLM_SYSTEM)
        ),
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        end_time_unix_nano=view.end_time_unix_nano,
        sampled=view.sampled,
    )
    return ScorerRunRequest(target=target, input=run_input, output=output)
