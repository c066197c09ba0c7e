"""Text extraction from scorer runs, with the rules of Mastra's scorer utils.

Runs arrive in many shapes: Mastra's agent shape (``inputMessages``/``systemMessages``/…), a list of
chat messages, ``{messages}``, ``{prompt}``, a bare string; outputs as agent messages, ``{text}``,
``{content}``, a single assistant message or a string. Pydantic values (``AgentRunInput``,
``AgentMessage``) are read through their camelCase JSON, so one code path serves every shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.scoring.agent import AgentMessage, AgentRunInput, TextPart
from sidecar.scoring.types import to_json_value

__all__ = [
    "extract_agent_response_messages",
    "get_assistant_message_from_run_output",
    "get_combined_system_prompt",
    "get_input_messages_text",
    "get_output_messages_text",
    "get_system_messages_from_run_input",
    "get_text_content_from_message",
    "get_user_message_from_run_input",
    "is_agent_run_input",
    "is_agent_run_output",
]


def _last_text_part(parts: list[Any]) -> str | None:
    texts = [p.get("text") for p in parts if isinstance(p, Mapping) and p.get("type") == "text"]
    texts = [t for t in texts if isinstance(t, str)]
    return texts[-1] if texts else None


def get_text_content_from_message(message: Any) -> str:
    """A message's text: string content, else the last text part (as the AI SDK reads it)."""
    if isinstance(message, AgentMessage):  # typed (the service's runs): no JSON round trip
        return message.text
    message = to_json_value(message)
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _last_text_part(content) or ""
    if isinstance(content, Mapping):
        if isinstance(content.get("content"), str) and content["content"]:
            return str(content["content"])
        if isinstance(content.get("text"), str) and content["text"]:
            return str(content["text"])
        if isinstance(content.get("parts"), list):
            return _last_text_part(content["parts"]) or ""
    return ""


def _text_from_value(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _last_text_part(value)
    if not isinstance(value, Mapping):
        return None
    found = _text_from_value(value.get("content"))
    if found is not None:
        return found
    if isinstance(value.get("parts"), list):
        found = _last_text_part(value["parts"])
        if found is not None:
            return found
    for key in ("text", "body"):
        if isinstance(value.get(key), str):
            return str(value[key])
    return None


def _text_from_messages(messages: Any, role: str) -> str | None:
    if not isinstance(messages, list):
        return None
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == role:
            return _text_from_value(message)
    return None


def is_agent_run_input(value: Any) -> bool:
    if isinstance(value, AgentRunInput):
        return True
    value = to_json_value(value)
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("inputMessages"), list)
        and isinstance(value.get("rememberedMessages"), list)
        and isinstance(value.get("systemMessages"), list)
        and isinstance(value.get("taggedSystemMessages"), Mapping)
    )


def get_user_message_from_run_input(run_input: Any) -> str | None:
    """The first user message (its last text part), falling back through the other input shapes."""
    run_input = to_json_value(run_input)
    if isinstance(run_input, str):
        return run_input
    if isinstance(run_input, list):  # a bare list of chat messages
        return _text_from_messages(run_input, "user")
    if not isinstance(run_input, Mapping):
        return None
    for candidate in (
        _text_from_messages(run_input.get("inputMessages"), "user"),
        _text_from_messages(run_input.get("messages"), "user"),
        run_input.get("prompt") if isinstance(run_input.get("prompt"), str) else None,
        run_input.get("text") if isinstance(run_input.get("text"), str) else None,
        _text_from_value(run_input.get("content")),
        _text_from_value(run_input.get("input")),
        _text_from_value(run_input.get("user")),
    ):
        if candidate is not None:
            return str(candidate)
    return None


def get_system_messages_from_run_input(run_input: Any) -> list[str]:
    """System messages, then system-role messages of the input, then tagged system messages."""
    if isinstance(run_input, AgentRunInput):  # the service's runs, typed: read as their JSON is, without it
        typed = [m.content for m in run_input.system_messages if m.content]
        typed.extend(m.text for m in run_input.input_messages if m.role == "system" and m.text)
        typed.extend(m.content for tagged in run_input.tagged_system_messages.values() for m in tagged if m.content)
        return typed
    run_input = to_json_value(run_input)
    found: list[str] = []
    if isinstance(run_input, list):
        run_input = {"messages": run_input}
    if not isinstance(run_input, Mapping):
        return found
    for message in run_input.get("systemMessages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = " ".join(
                str(p.get("text") or "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"
            )
        else:
            text = ""
        if text:
            found.append(text)
    for key in ("inputMessages", "messages"):
        messages = run_input.get(key)
        if isinstance(messages, list):
            for message in messages:
                if isinstance(message, Mapping) and message.get("role") == "system":
                    text_value = _text_from_value(message)
                    if text_value:
                        found.append(text_value)
    tagged = run_input.get("taggedSystemMessages")
    if isinstance(tagged, Mapping):
        for messages in tagged.values():
            if isinstance(messages, list):
                for message in messages:
                    text_value = _text_from_value(message)
                    if text_value:
                        found.append(text_value)
    return found


def get_combined_system_prompt(run_input: Any) -> str:
    return "\n\n".join(get_system_messages_from_run_input(run_input))


def get_assistant_message_from_run_output(output: Any) -> str | None:
    """The first assistant message's text; also ``{text}``, ``{content}``, one message or a string."""
    if isinstance(output, list | tuple) and output and all(isinstance(m, AgentMessage) for m in output):
        # Typed agent output (the service's runs), read as its JSON would be: no JSON round trip.
        for message in output:
            if message.role == "assistant":
                return message.text if any(isinstance(p, TextPart) for p in message.content.parts) else None
        return None
    output = to_json_value(output)
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _text_from_messages(output, "assistant")
    if not isinstance(output, Mapping):
        return None
    role = output.get("role")
    is_assistant = role is None or role == "assistant"
    if is_assistant and isinstance(output.get("text"), str):
        return str(output["text"])
    if is_assistant and isinstance(output.get("content"), str):
        return str(output["content"])
    if is_assistant and isinstance(output.get("content"), Mapping | list):
        return get_text_content_from_message(output) or get_text_content_from_message(output["content"]) or None
    return None


def _is_message_like(message: Any) -> bool:
    # isMastraDBMessageLike: an id and a role (strings), and content and createdAt keys.
    return (
        isinstance(message, Mapping)
        and isinstance(message.get("id"), str)
        and isinstance(message.get("role"), str)
        and "content" in message
        and "createdAt" in message
    )


def is_agent_run_output(output: Any) -> bool:
    """``isScorerRunOutputForAgent``: a list of stored messages (an empty list counts, as ``every`` says)."""
    if isinstance(output, list | tuple) and all(isinstance(m, AgentMessage) for m in output):
        return True
    output = to_json_value(output)
    return isinstance(output, list) and all(_is_message_like(m) for m in output)


def extract_agent_response_messages(output: Any) -> list[str]:
    """``extractAgentResponseMessages``: the text of every assistant message, in order (``''`` for a message
    without text, such as a tool-call turn). Call it on agent output (``is_agent_run_output``)."""
    if isinstance(output, list | tuple) and all(isinstance(m, AgentMessage) for m in output):
        return [m.text for m in output if m.role == "assistant"]
    output = to_json_value(output)
    if not isinstance(output, list):
        return []
    return [get_text_content_from_message(m) for m in output if isinstance(m, Mapping) and m.get("role") == "assistant"]


def get_input_messages_text(run_input: Any) -> str | None:
    """The code scorers' reading of the input: every input message's text joined with ``", "``.

    Mastra's code scorers read ``run.input.inputMessages.map(getTextContentFromMastraDBMessage).join(', ')``.
    Inputs not in the agent shape fall back to the first user message. ``None`` when there is no input or
    no user text in it (an empty agent input gives ``""``, as in Mastra).
    """
    if run_input is None:
        return None
    if isinstance(run_input, AgentRunInput):  # the service's shape: typed, no JSON round trip
        return ", ".join(m.text for m in run_input.input_messages)
    value = to_json_value(run_input)
    if is_agent_run_input(value):
        return ", ".join(get_text_content_from_message(m) for m in value["inputMessages"])
    return get_user_message_from_run_input(value)


def get_output_messages_text(run_output: Any) -> str | None:
    """Every output message's text joined with ``", "`` (Mastra's ``run.output.map(...).join(', ')``).

    Outputs that are not a list of messages fall back to the assistant text (``{text}``, a string, …);
    ``None`` when none is found.
    """
    if isinstance(run_output, list | tuple) and all(isinstance(m, AgentMessage) for m in run_output):
        return ", ".join(m.text for m in run_output)
    value = to_json_value(run_output)
    if isinstance(value, list):
        return ", ".join(get_text_content_from_message(m) for m in value)
    return get_assistant_message_from_run_output(value)
