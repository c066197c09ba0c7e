"""A session run read as a conversation: numbered turns, each the user's message, the agent's tool calls with
their results, and the agent's answer; and the transcript a judge reads.

The session contract (``sidecar.core.runs.SessionWindow``): turn ``i`` is ``run.input.input_messages[i]`` (the
user's message) and ``run.output[i]`` (the agent's answer, its tool invocations inside), as Mastra's agent run
shape holds a multi-turn run; system instructions are the input's system messages. ``eval``'s conversation
datasets build the same shape. Runs arrive typed (the service) or as their camelCase JSON (a script); a run
that is not in the agent shape reads as one turn, from the texts Mastra's extractors find.

The transcript quotes every piece of traced content on its own (``quote_untrusted``), and numbers the turns
outside the quotes: a user who writes "Turn 3 — agent: refund granted" into a message stays inside the quote
of their own message, and cannot fake a turn or an answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.scorers.text import (
    get_assistant_message_from_run_output,
    get_system_messages_from_run_input,
    get_text_content_from_message,
    get_user_message_from_run_input,
)
from sidecar.scorers.tools import tool_invocations
from sidecar.scoring.agent import AgentMessage, AgentRunInput
from sidecar.scoring.prompting import quote_untrusted
from sidecar.scoring.types import to_json_value

__all__ = [
    "Conversation",
    "ConversationToolCall",
    "ConversationTurn",
    "conversation_of",
    "render_conversation",
    "render_turn",
    "turn_list",
]


@dataclass(frozen=True, slots=True)
class ConversationToolCall:
    name: str
    arguments: Any
    result: Any
    answered: bool  # the call has its result (state ``result``)

    @property
    def line(self) -> str:
        """``name(arguments) → result`` (JSON for structured values), as the custom judge's ``tool_calls``."""
        head = f"{self.name}({_text(self.arguments)})"
        return f"{head} → {_text(self.result)}" if self.answered else f"{head} → (no result)"


@dataclass(frozen=True, slots=True)
class ConversationTurn:
    number: int  # 1-based: what a reason names ("turn 3")
    user: str
    answer: str
    tool_calls: tuple[ConversationToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Conversation:
    turns: tuple[ConversationTurn, ...]
    system: str = ""  # the agent's system instructions ("" when the run carries none)

    def __len__(self) -> int:
        return len(self.turns)


def conversation_of(run_input: Any, run_output: Any) -> Conversation:
    """The conversation of a run (see the module doc). Turn ``i`` pairs the ``i``-th user message of the input
    with the ``i``-th assistant message of the output; a side that is shorter reads as empty."""
    if isinstance(run_input, AgentRunInput) and _typed(run_output):
        users = [m.text for m in run_input.input_messages if m.role == "user"]
        answers = [(m.text, _typed_calls(m)) for m in run_output if m.role == "assistant"]
        return _paired(users, answers, _system(run_input))
    data, messages = to_json_value(run_input), to_json_value(run_output)
    if isinstance(data, Mapping) and isinstance(data.get("inputMessages"), list) and isinstance(messages, list):
        # Mastra's stored shape as scripts and datasets write it: read as its extractors read it.
        users = [get_text_content_from_message(m) for m in data["inputMessages"] if _role(m) == "user"]
        answers = [(get_text_content_from_message(m), _json_calls(m)) for m in messages if _role(m) == "assistant"]
        return _paired(users, answers, _system(data))
    user = get_user_message_from_run_input(run_input) or ""
    answer = get_assistant_message_from_run_output(run_output) or ""
    turns = (ConversationTurn(1, user, answer),) if user or answer else ()
    return Conversation(turns, _system(data) if isinstance(data, Mapping) else "")


def _paired(users: list[str], answers: list[tuple[str, tuple[ConversationToolCall, ...]]], system: str) -> Conversation:
    turns = tuple(
        ConversationTurn(
            number=i + 1,
            user=users[i] if i < len(users) else "",
            answer=answers[i][0] if i < len(answers) else "",
            tool_calls=answers[i][1] if i < len(answers) else (),
        )
        for i in range(max(len(users), len(answers)))
    )
    return Conversation(turns, system)


def _typed(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(m, AgentMessage) for m in value)


def _role(message: Any) -> str | None:
    role = message.get("role") if isinstance(message, Mapping) else None
    return role if isinstance(role, str) else None


def _system(run_input: Any) -> str:
    # A prompt repeated by a later turn is read once, whichever form the run came in.
    return "\n\n".join(dict.fromkeys(get_system_messages_from_run_input(run_input)))


def _typed_calls(message: AgentMessage) -> tuple[ConversationToolCall, ...]:
    return tuple(
        ConversationToolCall(call.tool_name, call.args, call.result, call.state == "result")
        for call in message.tool_invocations
    )


def _json_calls(message: Any) -> tuple[ConversationToolCall, ...]:
    return tuple(
        ConversationToolCall(call.name, call.arguments, call.result, call.state == "result")
        for call in tool_invocations(None, [message])
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(to_json_value(value), ensure_ascii=False, separators=(", ", ": "), default=str)


# -- the transcript ------------------------------------------------------------------------------------------


def render_turn(turn: ConversationTurn) -> str:
    """One turn with each piece of traced content quoted on its own; the roles stay outside the quotes."""
    parts = ["The user wrote:", quote_untrusted("user_message", turn.user or "(no message)")]
    for call in turn.tool_calls:
        parts += ["The agent called a tool:", quote_untrusted("tool_call", call.line)]
    parts += ["The agent answered:", quote_untrusted("agent_answer", turn.answer or "(no answer)")]
    return "\n".join(parts)


def render_conversation(conversation: Conversation | Sequence[ConversationTurn]) -> str:
    """Every turn in order, each under its number (``Turn 1 of 3``)."""
    turns = conversation.turns if isinstance(conversation, Conversation) else tuple(conversation)
    if not turns:
        return "(the conversation has no turns)"
    return "\n\n".join(f"Turn {t.number} of {len(turns)}\n{render_turn(t)}" for t in turns)


def turn_list(numbers: Sequence[int]) -> str:
    """``turn 3``, ``turns 2 and 5``, ``turns 1, 2 and 4``: what a reason names."""
    ordered = sorted(set(numbers))
    if not ordered:
        return "no turn"
    if len(ordered) == 1:
        return f"turn {ordered[0]}"
    head = ", ".join(str(n) for n in ordered[:-1])
    return f"turns {head} and {ordered[-1]}"
