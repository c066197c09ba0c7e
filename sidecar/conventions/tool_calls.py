"""One tool call, however many places recorded it: the LLM call's requested tool call, the tool's own span, and the
agent span's messages are one call when they match.

Instrumentations record a call in up to three places, each with what it knows: the LLM call that asked for it (the
call id the model gave, the name, the arguments), the tool's span (the name, the arguments, the result; often no call
id: OpenInference and the OpenTelemetry Agents instrumentation write none), and the agent span's own messages (the
whole turn, calls and results, when the agent span carries its conversation). Two records are the same call when
their call ids are equal, else when their names and arguments are equal, matched in order (the first record of
``get_weather({"city": "Paris"})`` in one place is the first in the other).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from sidecar.scoring.agent import ToolInvocation

__all__ = ["merge_requested", "not_in"]


def _arguments(value: Any) -> Any:
    """Arguments compared as values: a JSON string and the object it encodes are the same arguments."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError, RecursionError):
            return json.loads(value)
    return value


def _same_call(a: ToolInvocation, b: ToolInvocation) -> bool:
    return a.tool_name == b.tool_name and _arguments(a.args) == _arguments(b.args)


class _Unmatched:
    """Records not matched yet, found by call id, else by name and arguments, first in order."""

    def __init__(self, calls: Iterable[ToolInvocation]) -> None:
        self.calls: list[ToolInvocation | None] = list(calls)

    def take(self, call: ToolInvocation) -> int | None:
        """The index of the record ``call`` matches, which is matched from now on (None: no record matches)."""
        if call.tool_call_id:
            for index, candidate in enumerate(self.calls):
                if candidate is not None and candidate.tool_call_id == call.tool_call_id:
                    self.calls[index] = None
                    return index
        for index, candidate in enumerate(self.calls):
            if candidate is not None and _same_call(candidate, call):
                self.calls[index] = None
                return index
        return None


def merge_requested(
    recorded: Sequence[ToolInvocation], requested: Iterable[ToolInvocation], *, span_ids: frozenset[str] = frozenset()
) -> list[ToolInvocation]:
    """The tool spans' calls (``recorded``, in start order) with the calls the LLM calls asked for (``requested``, in
    order) merged in: a requested call that a tool span recorded takes the span's place with the model's call id
    (when the span had none of its own: its id is one of ``span_ids``) and the span's result; one no tool span
    recorded is added after them, as asked."""
    merged = list(recorded)
    unmatched = _Unmatched(recorded)
    for call in requested:
        index = unmatched.take(call)
        if index is None:
            merged.append(call)
            continue
        span_call = merged[index]
        if call.tool_call_id and span_call.tool_call_id in span_ids:
            merged[index] = span_call.model_copy(update={"tool_call_id": call.tool_call_id})
    return merged


def not_in(calls: Sequence[ToolInvocation], known: Iterable[ToolInvocation]) -> list[ToolInvocation]:
    """``calls`` less those ``known`` holds already (the agent span's own messages: its turn's calls and results)."""
    seen = _Unmatched(calls)
    for call in known:
        seen.take(call)
    return [call for call, left in zip(calls, seen.calls, strict=True) if left is not None]
