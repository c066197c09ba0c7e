"""Retrieved context for the RAG scorers: one lookup, shared by every kind that judges against context.

Mastra's RAG scorers take their context from ``options.context`` (or a ``contextExtractor`` function),
else from the results of the tool calls in the run's output. A sidecar also scores runs whose retrieved
documents arrive another way (an ``eval`` dataset's ``context`` field, or trace assembly), so the lookup
here tries, in order:

1. a ``context_extractor(input, output)`` function (Python factories only: a YAML file cannot hold one);
2. the kind's ``options.context`` (the same documents for every run);
3. ``request_context["context"]``: a list of strings (``eval`` datasets and trace assembly put the run's
   retrieved documents there);
4. the results of the tool calls in the run's output (Mastra's default): each ``state="result"`` tool
   invocation of the assistant messages, its result as JSON (``JSON.stringify``).

The first source that is present wins, even when it is empty: ``request_context["context"] == []`` says
"retrieval returned nothing", which each kind treats as Mastra treats an empty context. When no source is
present at all, :func:`find_context` returns ``None`` and the kind says the run is not scorable
(:data:`NO_CONTEXT_REASON`): a run without context is not a 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator

from sidecar.scoring.agent import AgentMessage
from sidecar.scoring.steps import ScorerRun
from sidecar.scoring.types import to_json_value

__all__ = [
    "NO_CONTEXT_REASON",
    "REQUEST_CONTEXT_KEY",
    "ContextExtractor",
    "ContextSource",
    "NonEmptyContext",
    "RetrievedContext",
    "context_from_request_context",
    "find_context",
    "js_json",
    "tool_result_context",
]

# The request_context key that carries a run's retrieved documents.
REQUEST_CONTEXT_KEY = "context"

NO_CONTEXT_REASON = (
    "no retrieved context: set the kind's options.context, pass request_context['context'] "
    "(an eval dataset's context field), or score runs whose output has tool results"
)

ContextSource = Literal["extractor", "options", "request_context", "tool_results"]
# Mastra's contextExtractor: (run input, run output) -> the context pieces.
ContextExtractor = Callable[[Any, Any], Sequence[str]]


def _non_empty(pieces: tuple[str, ...]) -> tuple[str, ...]:
    if not pieces:
        raise ValueError("context cannot be empty if provided (leave it out to read each run's context)")
    return pieces


# ``options.context`` of the kinds that rank or attribute context pieces (Mastra rejects an empty array).
NonEmptyContext = Annotated[tuple[str, ...], AfterValidator(_non_empty)]


@dataclass(frozen=True, slots=True)
class RetrievedContext:
    """The context pieces of one run, in retrieval order, and where they came from."""

    pieces: tuple[str, ...]
    source: ContextSource


def _js_value(value: Any) -> Any:
    # JSON.stringify prints an integral number without ".0"; Python's json does not.
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, dict):
        return {str(k): _js_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_js_value(v) for v in value]
    return value


def js_json(value: Any) -> str:
    """``JSON.stringify(value)``: compact, non-ASCII kept, integral numbers without a fraction."""
    return json.dumps(_js_value(to_json_value(value)), separators=(",", ":"), ensure_ascii=False, default=str)


def _pieces(value: Sequence[Any]) -> tuple[str, ...]:
    return tuple(piece if isinstance(piece, str) else js_json(piece) for piece in value)


def context_from_request_context(request_context: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """``request_context["context"]`` as pieces; ``None`` when the key is absent or null.

    A list of strings is the contract; a single string counts as one piece, and a non-string element
    as its JSON (what a tool result would give). Any other value is a ``ValueError``: the run fails with
    that message rather than being judged against a misread context.
    """
    if request_context is None:
        return None
    value = request_context.get(REQUEST_CONTEXT_KEY)
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return _pieces(value)
    raise ValueError(f"request_context[{REQUEST_CONTEXT_KEY!r}] must be a list of strings, got {type(value).__name__}")


def _tool_results_of(message: Any) -> list[Any] | None:
    """The results of one message's tool invocations, or ``None`` when it is not an assistant message."""
    if isinstance(message, AgentMessage):
        if message.role != "assistant":
            return None
        return [inv.result for inv in message.tool_invocations if inv.state == "result"]
    if not isinstance(message, Mapping) or message.get("role") != "assistant":
        return None
    content = message.get("content")
    if not isinstance(content, Mapping):
        return []
    # Mastra's stored messages list the invocations under content.toolInvocations; ours (and the AI SDK's
    # UI messages) under content.parts as "tool-invocation" parts.
    invocations = content.get("toolInvocations")
    if not isinstance(invocations, list):
        parts = content.get("parts")
        invocations = [
            p.get("toolInvocation")
            for p in (parts if isinstance(parts, list) else [])
            if isinstance(p, Mapping) and p.get("type") == "tool-invocation"
        ]
    return [inv.get("result") for inv in invocations if isinstance(inv, Mapping) and inv.get("state") == "result"]


def tool_result_context(output: Any) -> tuple[str, ...] | None:
    """The tool results in a run's output as JSON pieces; ``None`` when it has none.

    Only a list of messages has tool calls (Mastra: ``if (!Array.isArray(output)) return []``). Mastra reads
    the first assistant message, which holds a whole turn; trace mapping may split a turn over several
    assistant messages, so every assistant message is read, in order.
    """
    if isinstance(output, list | tuple):
        messages: Sequence[Any] = output
    else:
        return None
    results: list[Any] = []
    for message in messages:
        found = _tool_results_of(message if isinstance(message, AgentMessage) else to_json_value(message))
        if found:
            results.extend(found)
    return tuple(js_json(result) for result in results) or None


def find_context(
    run: ScorerRun,
    *,
    options_context: Sequence[str] | None = None,
    extractor: ContextExtractor | None = None,
) -> RetrievedContext | None:
    """The run's context from the first source present (see the module docstring), else ``None``."""
    if extractor is not None:
        return RetrievedContext(_pieces(list(extractor(run.input, run.output))), "extractor")
    if options_context is not None:
        return RetrievedContext(tuple(options_context), "options")
    from_request = context_from_request_context(run.request_context)
    if from_request is not None:
        return RetrievedContext(from_request, "request_context")
    from_tools = tool_result_context(run.output)
    if from_tools is not None:
        return RetrievedContext(from_tools, "tool_results")
    return None
