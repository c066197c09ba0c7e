"""``sessions``: conversations (``scope: session``, docs/sessions.md): where a turn's conversation id is read, the
internal topic, when a window closes and how much of them may wait."""

from __future__ import annotations

from pydantic import Field, ValidationError, model_validator

from sidecar.runtime.sessions import SessionLimits, TurnCaps
from sidecar.settings.base import _Frozen
from sidecar.settings.errors import _problem

__all__ = ["SessionCapsSettings", "SessionsSettings"]

# The engine declares its defaults (sidecar.runtime.sessions.limits); the settings only add the bounds.
_SESSIONS = SessionLimits()
_CAPS = TurnCaps()


class SessionCapsSettings(_Frozen):
    """The most each field of a turn keeps (characters; a cut is flagged ``truncated`` on the turn)."""

    text: int = Field(default=_CAPS.text, gt=0)  # the user's request, the answer
    tool_args: int = Field(default=_CAPS.tool_args, gt=0)  # a tool call's arguments (JSON text)
    tool_result: int = Field(default=_CAPS.tool_result, gt=0)  # a tool call's result
    system: int = Field(default=_CAPS.system, gt=0)  # the system instructions
    tool_calls: int = Field(default=_CAPS.tool_calls, ge=0)  # per turn


class SessionsSettings(_Frozen):
    """Conversations: turns published to ``topic`` (created by the operator: cleanup.policy=compact,delete), held
    by conversation by the consumer group ``<kafka.group_id>-sessions`` until no turn came for ``idle_s``."""

    # Span attributes naming the conversation, first present wins: on the turn's agent span, else any span.
    id_attributes: tuple[str, ...] = Field(default=_SESSIONS.id_attributes, min_length=1)
    # The internal topic of turns (compacted, created by the operator: docs/sessions.md), keyed by conversation.
    topic: str = Field(default=_SESSIONS.topic, min_length=1)
    # A conversation is scored once no turn came for this long (then again if it goes on: a new window).
    idle_s: float = Field(default=_SESSIONS.idle_s, gt=0, le=7 * 86400)
    # A conversation still going after this long is scored now, its window cut (reason max_duration).
    max_duration_s: float = Field(default=_SESSIONS.max_duration_s, gt=0, le=7 * 86400)
    max_turns: int = Field(default=_SESSIONS.max_turns, ge=1)  # turns in one window; past it, scored now
    max_session_bytes: int = Field(default=_SESSIONS.max_session_bytes, gt=0)  # one window's turns; past it, now
    # Per process (runtime.workers share it): past it, the conversation with the oldest last turn is scored now.
    max_bytes: int = Field(default=_SESSIONS.max_bytes, gt=0)
    caps: SessionCapsSettings = SessionCapsSettings()

    @model_validator(mode="after")
    def _bounds_agree(self) -> SessionsSettings:
        problems = []
        if self.max_duration_s < self.idle_s:
            problems.append(_problem(("max_duration_s",), "must be at least idle_s"))
        if self.max_bytes < self.max_session_bytes:
            problems.append(_problem(("max_bytes",), "must be at least max_session_bytes"))
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def limits(self) -> SessionLimits:
        caps = self.caps
        return SessionLimits(
            topic=self.topic,
            id_attributes=self.id_attributes,
            idle_s=self.idle_s,
            max_duration_s=self.max_duration_s,
            max_turns=self.max_turns,
            max_session_bytes=self.max_session_bytes,
            max_bytes=self.max_bytes,
            caps=TurnCaps(
                text=caps.text,
                tool_args=caps.tool_args,
                tool_result=caps.tool_result,
                system=caps.system,
                tool_calls=caps.tool_calls,
            ),
        )
