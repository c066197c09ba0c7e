"""The variables of a judge written in YAML (``kind: llm-judge``): their names, what each holds, where a run can
fill it, and its text for one run.

The names are fixed so that a configuration stays portable across agents, conventions and releases. Each
variable reads as plain text by default (a list of tool calls is one call per line, not a Python repr); the
list variables can also be iterated in the template, one quoted item at a time. What a live run can fill
depends on its scope: retrieved documents come from retriever spans under an agent span (``scope: trace``),
a ground truth only from an ``eval`` dataset. At ``scope: session`` a run is a whole conversation: its
``conversation`` variable holds the turns in order, and the variables that read one turn are refused there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sidecar.core.runs import Scope
from sidecar.scorers.context import context_from_request_context
from sidecar.scorers.conversation.transcript import conversation_of, render_turn
from sidecar.scorers.registry import Need
from sidecar.scorers.text import (
    get_assistant_message_from_run_output,
    get_combined_system_prompt,
    get_user_message_from_run_input,
)
from sidecar.scorers.tools import ToolCall, tool_invocations
from sidecar.scoring.agent import AgentMessage, AgentRunInput, TextPart, ToolInvocationPart
from sidecar.scoring.steps import ScorerRun
from sidecar.scoring.types import to_json_value

__all__ = [
    "ATTRIBUTE_NAMESPACES",
    "VARIABLES",
    "AttributeNamespace",
    "RunText",
    "Variable",
    "attribute_text",
    "empty_text",
    "joined",
    "needs_of",
    "run_text",
    "variables_table",
]

# What a variable's text is for one run: one text, or the items of a list (documents, calls, messages).
RunText = str | tuple[str, ...]
AttributeNamespace = Literal["span", "resource"]
ATTRIBUTE_NAMESPACES: tuple[AttributeNamespace, ...] = ("span", "resource")


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    holds: str  # what it holds, for the docs and for "did you mean"
    needs: tuple[Need, ...]  # the parts of a run it reads (a score says which parts the run lacked)
    empty: str  # what the judge reads when the run has none
    # Where a live run fills it: the scopes, and why not elsewhere. ``eval`` datasets fill every variable
    # but the attributes (an item is not a span).
    live_scopes: frozenset[Scope]
    unfilled_because: str = ""
    item: str | None = None  # list variables: the quote tag of one item when the template iterates
    # Why it makes no sense at a scope it is not filled at, when that says more than unfilled_because (scope
    # session, where a run is a whole conversation).
    unfilled_at: Mapping[Scope, str] = field(default_factory=dict)
    # Its text quotes the traced content inside it piece by piece (a conversation's turns: the roles and turn
    # numbers stay outside the quotes), so the template prints it as it is instead of quoting it whole.
    quoted_inside: bool = False


# Why no run fills ``span.attributes[...]`` / ``resource.attributes[...]`` at a scope.
ATTRIBUTES_UNFILLED_AT: Mapping[Scope, str] = {"session": "a conversation's turns keep no span or resource attributes"}

_ONE_TURN = "at scope session a run is a whole conversation, and this reads one turn: use {{ conversation }}"


_BOTH: frozenset[Scope] = frozenset({"span", "trace"})
VARIABLES: Mapping[str, Variable] = {
    v.name: v
    for v in (
        Variable(
            "input",
            "the user's request (the current turn's user messages)",
            ("input",),
            "(no request)",
            _BOTH,
            unfilled_at={"session": _ONE_TURN},
        ),
        Variable("output", "the agent's answer", ("output",), "(no answer)", _BOTH, unfilled_at={"session": _ONE_TURN}),
        Variable(
            "system",
            "the agent's system instructions",
            ("system",),
            "(no system instructions)",
            frozenset({"span", "trace", "session"}),
        ),
        Variable(
            "messages",
            "the conversation so far: earlier turns and the current request, one message per line",
            ("input",),
            "(no messages)",
            _BOTH,
            item="message",
            unfilled_at={"session": _ONE_TURN},
        ),
        Variable(
            "tool_calls",
            "the agent's tool calls, one per line: name(arguments) → result",
            ("tool_calls",),
            "(no tool calls)",
            _BOTH,
            item="tool_call",
            unfilled_at={"session": _ONE_TURN + " (each turn holds its tool calls)"},
        ),
        Variable(
            "context",
            "the retrieved documents, numbered",
            ("context",),
            "(no retrieved documents)",
            frozenset({"trace"}),
            "retrieved documents come from the retriever spans under an agent span: set targets.scope: trace "
            "(eval datasets fill it from their context field)",
            item="document",
            unfilled_at={"session": "a conversation's turns do not keep their retrieved documents (docs/sessions.md)"},
        ),
        Variable(
            "ground_truth",
            "the expected answer (eval datasets)",
            ("ground_truth",),
            "(no ground truth)",
            frozenset(),
            "a live trace carries no expected answer: only eval datasets fill it (score it with `eval`)",
        ),
        Variable(
            "conversation",
            "the whole conversation (scope session): the turns in order, numbered, each with the user's message, "
            "the agent's tool calls with their arguments and results, and its answer",
            ("input", "output"),
            "(no conversation)",
            frozenset({"session"}),
            "a conversation is the turns of a session: set targets.scope: session (eval conversation datasets "
            "fill it; docs/sessions.md)",
            item="turn",
            quoted_inside=True,
        ),
    )
}
_ATTRIBUTE_EMPTY = "(not set)"


def run_text(name: str, run: ScorerRun) -> RunText:
    """The text of variable ``name`` for ``run`` ("" or () when the run has none)."""
    return _READERS[name](run)


def attribute_text(value: Any) -> str:
    """An attribute value as text: a string as it is, ``true``/``false``, a number, a list or map as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    return _json(value)


def empty_text(name: str) -> str:
    return VARIABLES[name].empty if name in VARIABLES else _ATTRIBUTE_EMPTY


# -- readers ---------------------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else str(value)


def _json_default(value: Any) -> Any:
    converted = to_json_value(value)
    return str(value) if converted is value else converted


# One encoder for every run (json.dumps builds one per call when given options). Tool arguments and results are
# plain JSON already: models (rare) are converted only where met.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "), default=_json_default)


def _json(value: Any) -> str:
    return _ENCODER.encode(value)


def _text_or_json(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _json(value)


def _input(run: ScorerRun) -> str:
    value = run.input
    if isinstance(value, AgentRunInput):
        texts = [m.text for m in value.input_messages if m.role == "user" and m.text]
        return "\n\n".join(texts)
    found = get_user_message_from_run_input(value)
    return found if found is not None else _text_or_json(value)


def _output(run: ScorerRun) -> str:
    value = run.output
    if isinstance(value, list | tuple) and all(isinstance(m, AgentMessage) for m in value):
        return "\n\n".join(m.text for m in value if m.role == "assistant" and m.text)
    found = get_assistant_message_from_run_output(value)
    return found if found is not None else _text_or_json(value)


def _system(run: ScorerRun) -> str:
    return get_combined_system_prompt(run.input)


def _message_line(message: AgentMessage) -> str:
    pieces: list[str] = []
    for part in message.content.parts:
        if isinstance(part, TextPart) and part.text:
            pieces.append(part.text)
        elif isinstance(part, ToolInvocationPart):
            call = part.tool_invocation
            pieces.append(f"[called {call.tool_name}({_text_or_json(call.args)})]")
    return f"{message.role}: {' '.join(pieces)}"


def _messages(run: ScorerRun) -> tuple[str, ...]:
    value = run.input
    if isinstance(value, AgentRunInput):
        return tuple(_message_line(m) for m in (*value.remembered_messages, *value.input_messages))
    request = _input(run)
    return (f"user: {request}",) if request else ()


def _call_line(call: ToolCall) -> str:
    head = f"{call.name}({_text_or_json(call.arguments)})"
    if call.error is not None:
        return f"{head} → error: {call.error}"
    if call.state != "result":
        return f"{head} → (no result)"
    return f"{head} → {_text_or_json(call.result)}"


def _tool_calls(run: ScorerRun) -> tuple[str, ...]:
    return tuple(_call_line(call) for call in tool_invocations(run.input, run.output))


def _conversation(run: ScorerRun) -> tuple[str, ...]:
    return tuple(render_turn(turn) for turn in conversation_of(run.input, run.output).turns)


def _context(run: ScorerRun) -> tuple[str, ...]:
    return tuple(context_from_request_context(run.request_context) or ())


def _ground_truth(run: ScorerRun) -> str:
    return _text_or_json(run.ground_truth)


_READERS: dict[str, Callable[[ScorerRun], RunText]] = {
    "input": _input,
    "output": _output,
    "system": _system,
    "messages": _messages,
    "tool_calls": _tool_calls,
    "context": _context,
    "ground_truth": _ground_truth,
    "conversation": _conversation,
}


def joined(name: str, items: Sequence[str]) -> str:
    """A list variable printed whole: documents numbered and apart, calls and messages one per line."""
    if name == "context":
        return "\n\n".join(f"[{i}] {doc}" for i, doc in enumerate(items, 1))
    if name == "conversation":
        return "\n\n".join(f"Turn {i} of {len(items)}\n{turn}" for i, turn in enumerate(items, 1))
    return "\n".join(items)


def needs_of(names: Iterable[str]) -> frozenset[Need]:
    return frozenset(need for name in names if name in VARIABLES for need in VARIABLES[name].needs)


def variables_table() -> str:
    """The variables as a Markdown table (docs/custom-judges.md holds it; a test keeps the two equal)."""
    rows = [
        "| variable | what it holds | scope: span | scope: trace | scope: session | eval datasets |",
        "|---|---|---|---|---|---|",
    ]
    for variable in VARIABLES.values():
        cells = " | ".join("yes" if scope in variable.live_scopes else "no" for scope in ("span", "trace", "session"))
        rows.append(f"| `{variable.name}` | {variable.holds} | {cells} | yes |")
    for namespace, holds in (
        ("span", "an attribute of the scored span (the agent span at scope trace), by key"),
        ("resource", "an attribute of the scored span's resource (`service.version`, …), by key"),
    ):
        rows.append(f"| `{namespace}.attributes['KEY']` | {holds} | yes | yes | no | no (not set) |")
    return "\n".join(rows)
