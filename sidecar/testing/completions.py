"""The chat.completion response body both judge stand-ins send (OpenAI's shape, which litellm also reads)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

__all__ = ["chat_completion"]


def chat_completion(
    content: str | None,
    *,
    usage: Mapping[str, Any] | None,
    completion_id: str,
    model: str = "judge",
    finish_reason: str | None = "stop",
) -> dict[str, Any]:
    """One assistant choice with ``content``; ``usage`` is left out when ``None``."""
    payload: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
    }
    if usage is not None:
        payload["usage"] = dict(usage)
    return payload
