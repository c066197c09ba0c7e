"""The model an instrumented app talks to: the scripted judge server answering as a model that calls tools.

The app's requests ask for model ``agent-model``; every other request is the sidecar's judge. The answers follow the
planted markers of ``produce.py``: a request whose last user message holds ``(question:TAG:NAME)`` is answered
``(answer:TAG:NAME)``, after the tools it offers were called one at a time, in order (``get_weather``, then the
``translate`` sub-agent, when offered).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from sidecar.testing.judge_server import Reply, ToolCallReply

__all__ = ["AGENT_MODEL", "agent_model"]

AGENT_MODEL = "agent-model"
_QUESTION = re.compile(r"\(question:([\w.-]+):(\w+)\)")
_ARGUMENTS: Mapping[str, Callable[[str], dict[str, str]]] = {
    "get_weather": lambda tag: {"city": "Paris"},
    "translate": lambda tag: {"input": f"Have a sunny day. (question:{tag}:translator)"},
}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def agent_model(judge: Callable[[dict[str, Any]], Reply]) -> Callable[[dict[str, Any]], Reply]:
    """A responder: the app's requests answered as the scripted model, the judge's by ``judge``."""

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("model") != AGENT_MODEL:
            return judge(body)
        messages = body.get("messages", [])
        users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        found = _QUESTION.search(users[-1]) if users else None
        tag, name = found.groups() if found else ("none", "none")
        offered = [t["function"]["name"] for t in body.get("tools", []) if t.get("function", {}).get("name")]
        called = sum(1 for m in messages if m.get("role") == "tool")
        pending = [tool for tool in offered if tool in _ARGUMENTS][called:]
        if pending:
            tool = pending[0]
            arguments = json.dumps(_ARGUMENTS[tool](tag))
            return Reply.calling(ToolCallReply(f"call_{name}_{tool}", tool, arguments))
        return Reply(content=f"Here is my answer. (answer:{tag}:{name})")

    return respond
