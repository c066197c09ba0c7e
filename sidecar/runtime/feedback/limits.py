"""The feedback stage's limits, with their defaults: the one declaration of each (the ``feedback:`` block of the
settings reads its defaults from here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sidecar.scoring.agreement import DEFAULT_AGREE_WITHIN

__all__ = ["FeedbackLimits"]

PAIRS_SUFFIX = ".feedback_pairs"
STATE_SUFFIX = ".join_state"


@dataclass(frozen=True, slots=True)
class FeedbackLimits:
    """Where feedback comes from and goes, how a verdict is compared, and how much is held while it waits."""

    topic: str = "agent_feedback"
    # The score records the join reads: the Kafka score exporter's topic.
    scores_topic: str = "agent_scores"
    # Feedback name → scorer id; a name not listed is a scorer id itself.
    names: Mapping[str, str] = field(default_factory=dict)
    # Numbers agree within this much on the 0–1 scale.
    agree_within: float = DEFAULT_AGREE_WITHIN
    # The last N pairs per scorer the gauges describe.
    window: int = 200
    # Feedback and scores wait this long for their other half, then expire (feedback: counted unmatched).
    hold_s: float = 7 * 86400.0
    # Per process (runtime.workers share it): feedback and scores held; past it, the oldest goes first.
    max_held: int = 100_000
    max_record_bytes: int = 64 * 1024
    max_comment_chars: int = 2000
    # The compacted topic that keeps what waits (restored on assignment), and the pairs' topic.
    state_topic: str | None = None
    pairs_topic: str | None = None
    # The floor of each scorer's agreement the alert reads (JudgeDisagreesWithHumans).
    min_agreement: float = 0.7
    min_agreement_by_scorer: Mapping[str, float] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return self.state_topic or self.topic + STATE_SUFFIX

    @property
    def pairs(self) -> str:
        return self.pairs_topic or self.scores_topic + PAIRS_SUFFIX

    def scorer_for(self, name: str) -> str:
        """The scorer a feedback name is about."""
        return self.names.get(name, name)

    def floor_of(self, scorer_id: str) -> float:
        return self.min_agreement_by_scorer.get(scorer_id, self.min_agreement)
