"""The chat.completion response body both judge stand-ins send (OpenAI's shape, which litellm also reads)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ToolCallReply", "chat_completion"]


@dataclass(frozen=True)
class ToolCallReply:
    """A tool call the scripted model asks for: its id, the tool's name, the arguments as a JSON string."""

    id: str
    name: str
    arguments: str = "{}"


def chat_completion(
    content: str | None,
    *,
    usage: Mapping[str, Any] | None,
    completion_id: str,
    model: str = "judge",
    finish_reason: str | None = "stop",
    tool_calls: Sequence[ToolCallReply] = (),
) -> dict[str, Any]:
    """One assistant choice with ``content`` (and ``tool_calls``, as a model that calls tools answers); ``usage``
    is left out when ``None``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in tool_calls
        ]
    payload: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        payload["usage"] = dict(usage)
    return payload
