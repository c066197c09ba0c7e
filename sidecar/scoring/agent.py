"""Mastra's agent run shape (``ScorerRunInputForAgent`` / ``ScorerRunOutputForAgent``).

Scorer runs built from traces carry this shape so that every Mastra scorer works unchanged.
Models are immutable; JSON uses Mastra's camelCase names (``model_dump(by_alias=True)``), which is
also what the text-extraction helpers in ``sidecar.scorers.text`` read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "AgentMessage",
    "AgentRunInput",
    "MessageContent",
    "ReasoningPart",
    "SystemMessage",
    "TextPart",
    "ToolInvocation",
    "ToolInvocationPart",
    "assistant_message",
    "user_message",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="forbid")


class TextPart(_Frozen):
    type: Literal["text"] = "text"
    text: str


class ToolInvocation(_Frozen):
    """A tool call (``state='call'``) or a call with its result (``state='result'``)."""

    state: Literal["call", "partial-call", "result"] = "call"
    tool_call_id: str
    tool_name: str
    args: Any = None
    result: Any = None


class ToolInvocationPart(_Frozen):
    type: Literal["tool-invocation"] = "tool-invocation"
    tool_invocation: ToolInvocation


class ReasoningPart(_Frozen):
    type: Literal["reasoning"] = "reasoning"
    reasoning: str


MessagePart = Annotated[TextPart | ToolInvocationPart | ReasoningPart, Field(discriminator="type")]


class MessageContent(_Frozen):
    """``MastraDBMessage.content`` in format 2: ordered parts."""

    format: Literal[2] = 2
    parts: tuple[MessagePart, ...] = ()


class AgentMessage(_Frozen):
    """A ``MastraDBMessage``: one conversation turn with typed parts."""

    id: str
    role: Literal["user", "assistant", "system", "tool"]
    created_at: str = ""
    content: MessageContent = MessageContent()

    @property
    def text(self) -> str:
        """The last text part, as the AI SDK and Mastra's extractors read a message."""
        texts = [p.text for p in self.content.parts if isinstance(p, TextPart)]
        return texts[-1] if texts else ""

    @property
    def tool_invocations(self) -> tuple[ToolInvocation, ...]:
        return tuple(p.tool_invocation for p in self.content.parts if isinstance(p, ToolInvocationPart))


class SystemMessage(_Frozen):
    """A ``CoreSystemMessage``: system instructions as plain text."""

    role: Literal["system"] = "system"
    content: str


class AgentRunInput(_Frozen):
    """``ScorerRunInputForAgent``: what the agent was given."""

    input_messages: tuple[AgentMessage, ...] = ()
    remembered_messages: tuple[AgentMessage, ...] = ()
    system_messages: tuple[SystemMessage, ...] = ()
    tagged_system_messages: dict[str, tuple[SystemMessage, ...]] = Field(default_factory=dict)


def user_message(text: str, *, id: str = "user-0", created_at: str = "") -> AgentMessage:
    return AgentMessage(id=id, role="user", created_at=created_at, content=MessageContent(parts=(TextPart(text=text),)))


def assistant_message(
    text: str = "",
    *,
    tool_invocations: tuple[ToolInvocation, ...] = (),
    id: str = "assistant-0",
    created_at: str = "",
) -> AgentMessage:
    parts: list[TextPart | ToolInvocationPart | ReasoningPart] = [
        ToolInvocationPart(tool_invocation=t) for t in tool_invocations
    ]
    if text:
        parts.append(TextPart(text=text))
    return AgentMessage(id=id, role="assistant", created_at=created_at, content=MessageContent(parts=tuple(parts)))
