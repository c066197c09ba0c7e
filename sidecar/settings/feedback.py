"""``feedback``: human verdicts joined to the sidecar's own scores (docs/feedback.md): where they come from, how a
verdict is compared, what the gauges describe and the alert's floor, and how much may wait."""

from __future__ import annotations

from pydantic import Field

from sidecar.runtime.feedback import FeedbackLimits
from sidecar.settings.base import _Frozen

__all__ = ["FeedbackSettings"]

# The engine declares its defaults (sidecar.runtime.feedback.limits); the settings only add the bounds.
_FEEDBACK = FeedbackLimits()


class FeedbackSettings(_Frozen):
    """Feedback records read from ``topic`` by the consumer group ``<kafka.group_id>-feedback`` with the score
    records of ``exporters.kafka_scores.topic``, co-partitioned; pairs written to ``pairs_topic``."""

    topic: str = Field(default=_FEEDBACK.topic, min_length=1)  # feedback records, keyed by trace id
    # Feedback name → scorer id, for names that are not a scorer's id.
    names: dict[str, str] = Field(default_factory=dict)
    agree_within: float = Field(default=_FEEDBACK.agree_within, ge=0.0, le=1.0)  # numbers agree this close (0–1)
    window: int = Field(default=_FEEDBACK.window, ge=1, le=100_000)  # the last pairs per scorer the gauges describe
    # A feedback waits this long for its score (and a score for its feedback); then counted unmatched.
    hold_s: float = Field(default=_FEEDBACK.hold_s, gt=0, le=90 * 86400)
    # Feedback and scores held, per process (runtime.workers share it): past it the oldest go first.
    max_held: int = Field(default=_FEEDBACK.max_held, ge=1, le=10_000_000)
    # A feedback record past this is a dead letter (invalid_feedback).
    max_record_bytes: int = Field(default=_FEEDBACK.max_record_bytes, gt=0, le=1024 * 1024)
    max_comment_chars: int = Field(default=_FEEDBACK.max_comment_chars, ge=1, le=100_000)  # a longer one is cut
    # None: <topic>.join_state (compacted) and <exporters.kafka_scores.topic>.feedback_pairs.
    state_topic: str | None = Field(default=None, min_length=1)
    pairs_topic: str | None = Field(default=None, min_length=1)  # each pair's record (judge's and person's verdicts)
    # JudgeDisagreesWithHumans fires when a scorer's agreement is under it (20 pairs or more in the window).
    min_agreement: float = Field(default=_FEEDBACK.min_agreement, ge=0.0, le=1.0)
    min_agreement_by_scorer: dict[str, float] = Field(default_factory=dict)  # the floor of one scorer, by its id

    def limits(self, scores_topic: str) -> FeedbackLimits:
        return FeedbackLimits(
            topic=self.topic,
            scores_topic=scores_topic,
            names=dict(self.names),
            agree_within=self.agree_within,
            window=self.window,
            hold_s=self.hold_s,
            max_held=self.max_held,
            max_record_bytes=self.max_record_bytes,
            max_comment_chars=self.max_comment_chars,
            state_topic=self.state_topic,
            pairs_topic=self.pairs_topic,
            min_agreement=self.min_agreement,
            min_agreement_by_scorer=dict(self.min_agreement_by_scorer),
        )
