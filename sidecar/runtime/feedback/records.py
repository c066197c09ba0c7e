"""What the feedback stage reads: a person's verdict (a record of the feedback topic) and the sidecar's own score (a
record of the score topic, as ``exporters.kafka_scores`` writes it), each checked once where it enters.

A feedback record is one JSON object (docs/feedback.md)::

    {"traceId": "<32 hex>", "spanId": "<16 hex, optional>", "conversationId": "<optional>",
     "name": "<scorer id or mapped name>", "value": 0.8 | true | "compliant", "source": "human",
     "author": "<optional>", "comment": "<optional>", "timestamp": "<RFC 3339, optional>", "id": "<optional>"}

Anything else (not JSON, a field missing or of the wrong type, a record over ``max_record_bytes``) is a
:class:`FeedbackError`, which the stage sets aside as a dead letter. A comment longer than ``max_comment_chars`` is
cut there. A record's id is its own ``id`` when it has one, else a digest of what it says (the comment aside): the
same label sent twice is one label.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from sidecar.core.runs import SCOPES, Scope

__all__ = ["Feedback", "FeedbackError", "ScoreSeen", "parse_feedback", "parse_score"]

_HEX = "0123456789abcdef"
# What the state keeps of a judge's reason (the pairs' record and the corrections show it to a reviewer).
_REASON_CHARS = 2000


class FeedbackError(ValueError):
    """A feedback record that cannot be used, and why (one line, for the dead letter and the log)."""


class _FeedbackFields(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    trace_id: str = Field(min_length=32, max_length=32)
    span_id: str | None = Field(default=None, min_length=16, max_length=16)
    conversation_id: str | None = Field(default=None, min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=128)
    value: bool | float | str
    source: str = Field(default="human", min_length=1, max_length=64)
    author: str | None = Field(default=None, max_length=256)
    comment: str | None = None
    timestamp: datetime | None = None
    id: str | None = Field(default=None, min_length=1, max_length=128)

    @field_validator("trace_id", "span_id")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        lowered = value.lower()
        if any(c not in _HEX for c in lowered) or not lowered.strip("0"):
            raise ValueError("must be lowercase hex, not all zeros")
        return lowered

    @field_validator("value", mode="before")
    @classmethod
    def _verdict(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError("a number must be finite")
            return float(value)
        if isinstance(value, str):
            if not value.strip() or len(value) > 128:
                raise ValueError("a label is 1 to 128 characters")
            return value
        raise ValueError("a number, a boolean or a label")


@dataclass(frozen=True, slots=True)
class Feedback:
    """One person's verdict on one subject."""

    feedback_id: str
    trace_id: str
    span_id: str | None
    conversation_id: str | None
    name: str
    value: bool | float | str
    source: str
    author: str | None
    comment: str | None
    timestamp_ms: int | None

    def to_json(self) -> dict[str, Any]:
        """The fields as the state topic keeps them (and :func:`feedback_of_json` reads them back)."""
        return {
            "id": self.feedback_id,
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "conversationId": self.conversation_id,
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "author": self.author,
            "comment": self.comment,
            "timestampMs": self.timestamp_ms,
        }


def feedback_of_json(data: dict[str, Any]) -> Feedback:
    """A feedback the state topic kept (:meth:`Feedback.to_json`)."""
    return Feedback(
        feedback_id=str(data["id"]),
        trace_id=str(data["traceId"]),
        span_id=data.get("spanId"),
        conversation_id=data.get("conversationId"),
        name=str(data["name"]),
        value=data["value"],
        source=str(data.get("source") or "human"),
        author=data.get("author"),
        comment=data.get("comment"),
        timestamp_ms=data.get("timestampMs"),
    )


def parse_feedback(value: bytes | None, *, max_record_bytes: int, max_comment_chars: int) -> Feedback:
    """A record of the feedback topic, checked (:class:`FeedbackError` says what is wrong with it)."""
    if value is None:
        raise FeedbackError("an empty record (no value)")
    if len(value) > max_record_bytes:
        raise FeedbackError(f"{len(value)} bytes, over feedback.max_record_bytes ({max_record_bytes})")
    try:
        data = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FeedbackError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise FeedbackError("not a JSON object")
    try:
        fields = _FeedbackFields.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "record"
        raise FeedbackError(f"{where}: {first['msg']} ({exc.error_count()} problems)") from None
    comment = fields.comment
    if comment is not None and len(comment) > max_comment_chars:
        comment = comment[: max_comment_chars - 1] + "…"
    timestamp_ms = None
    if fields.timestamp is not None:
        if fields.timestamp.tzinfo is None:
            raise FeedbackError("timestamp: RFC 3339 needs a time zone (Z or +hh:mm)")
        timestamp_ms = int(fields.timestamp.timestamp() * 1000)
    said = {
        "traceId": fields.trace_id,
        "spanId": fields.span_id,
        "conversationId": fields.conversation_id,
        "name": fields.name,
        "value": fields.value,
        "source": fields.source,
        "author": fields.author,
        "timestampMs": timestamp_ms,
    }
    digest = hashlib.sha256(json.dumps(said, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]
    return Feedback(
        feedback_id=fields.id or digest,
        trace_id=fields.trace_id,
        span_id=fields.span_id,
        conversation_id=fields.conversation_id,
        name=fields.name,
        value=fields.value,
        source=fields.source,
        author=fields.author,
        comment=comment,
        timestamp_ms=timestamp_ms,
    )


@dataclass(frozen=True, slots=True)
class ScoreSeen:
    """What the join keeps of one of the sidecar's score records."""

    score_id: str
    scorer_id: str
    fingerprint: str
    score: float
    label: str | None
    reason: str | None
    judge_model: str | None
    trace_id: str
    span_id: str
    scope: Scope
    conversation_id: str | None = None
    turn_trace_ids: tuple[str, ...] = ()
    score_source: str = "live"
    timestamp: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "scoreId": self.score_id,
            "scorerId": self.scorer_id,
            "scorerFingerprint": self.fingerprint,
            "score": self.score,
            "label": self.label,
            "reason": self.reason,
            "judgeModel": self.judge_model,
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "scope": self.scope,
            "conversationId": self.conversation_id,
            "turnTraceIds": list(self.turn_trace_ids),
            "scoreSource": self.score_source,
            "timestamp": self.timestamp,
        }


def score_of_json(data: dict[str, Any]) -> ScoreSeen:
    """A score the state topic kept (:meth:`ScoreSeen.to_json`)."""
    scope = data.get("scope")
    return ScoreSeen(
        score_id=str(data["scoreId"]),
        scorer_id=str(data["scorerId"]),
        fingerprint=str(data.get("scorerFingerprint") or ""),
        score=float(data["score"]),
        label=data.get("label"),
        reason=data.get("reason"),
        judge_model=data.get("judgeModel"),
        trace_id=str(data["traceId"]),
        span_id=str(data["spanId"]),
        scope=scope if scope in SCOPES else "span",
        conversation_id=data.get("conversationId"),
        turn_trace_ids=tuple(data.get("turnTraceIds") or ()),
        score_source=str(data.get("scoreSource") or "live"),
        timestamp=data.get("timestamp"),
    )


def parse_score(value: bytes | None) -> ScoreSeen | None:
    """A record of the score topic (``exporters.kafka_scores``), or ``None`` when it is not one (the topic is the
    sidecar's own: anything else there is skipped and counted by the caller)."""
    if not value:
        return None
    try:
        # pydantic-core's parser (Rust): every score record of the topic passes here.
        data = pydantic_core.from_json(value)
        metadata = data.get("metadata") or {}
        score = data["score"]
        scope = metadata.get("scope", "span")
        if not isinstance(score, int | float) or isinstance(score, bool) or scope not in SCOPES:
            return None
        reason = data.get("reason")
        return ScoreSeen(
            score_id=str(data["scoreId"]),
            scorer_id=str(data["scorerId"]),
            fingerprint=str(metadata.get("scorerFingerprint") or ""),
            score=float(score),
            label=data.get("label") if isinstance(data.get("label"), str) else None,
            reason=reason[:_REASON_CHARS] if isinstance(reason, str) else None,
            judge_model=_judge_model(data.get("judge")),
            trace_id=str(data["traceId"]).lower(),
            span_id=str(data["spanId"]).lower(),
            scope=scope,
            conversation_id=data.get("conversationId"),
            turn_trace_ids=tuple(str(t).lower() for t in data.get("turnTraceIds") or ()),
            score_source=str(data.get("scoreSource") or "live"),
            timestamp=data.get("timestamp"),
        )
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return None


def _judge_model(judge: Any) -> str | None:
    """The model of the record's first judge call, as the metrics' ``judge_model`` label names it:
    ``provider/model`` (``judge.<step>.executions[].judgeProvider`` and ``judgeModelId``)."""
    if not isinstance(judge, dict):
        return None
    for step in judge.values():
        for execution in (step or {}).get("executions", ()) if isinstance(step, dict) else ():
            model = execution.get("judgeModelId") if isinstance(execution, dict) else None
            if isinstance(model, str):
                provider = execution.get("judgeProvider")
                return f"{provider}/{model}" if isinstance(provider, str) and provider else model
    return None
