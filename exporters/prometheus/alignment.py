"""Whether the scores can be trusted (docs/feedback.md): human feedback joined to the scores, the judge–human
agreement over the last pairs, and the judge canary. The families, and the floors the alerts read beside them
(``JudgeDisagreesWithHumans``, ``JudgeDrift``)."""

from __future__ import annotations

from typing import Final, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge

from exporters.prometheus.labels import PREFIX as P
from sidecar.core.observers import FeedbackOutcome

__all__ = ["FEEDBACK_OUTCOMES", "AlignmentFamilies"]

# Declared by their emitter (sidecar.core.observers), as every fixed label set.
FEEDBACK_OUTCOMES: Final[tuple[str, ...]] = get_args(FeedbackOutcome)


class AlignmentFamilies:
    """Feedback records by outcome, pairs and unmatched feedback per scorer, what waits, the window's agreement,
    kappa and error per scorer; the canary's agreement, mean score and baseline per scorer; the floors."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.records = Counter(
            f"{P}_feedback_records",
            "Feedback records read, by outcome: paired (met its score), held (waits for it), duplicate (met before), "
            "unmatched (older than feedback.hold_s when read), invalid (a dead letter).",
            ["outcome"],
            registry=r,
        )
        for outcome in FEEDBACK_OUTCOMES:
            self.records.labels(outcome=outcome)
        self.pairs = Counter(
            f"{P}_feedback_pairs",
            "Feedback joined to the sidecar's score of the same subject, by whether judge and person agree.",
            ["scorer", "agreed"],
            registry=r,
        )
        self.unmatched = Counter(
            f"{P}_feedback_unmatched",
            "Feedback that expired (feedback.hold_s, or evicted past max_held) without the score of its subject.",
            ["scorer"],
            registry=r,
        )
        self.held = Gauge(
            f"{P}_feedback_held",
            "What the feedback join holds on this process's lanes: feedback waiting for its score, scores held for "
            "feedback.",
            ["kind"],
            registry=r,
        )
        self.agreement = Gauge(
            f"{P}_judge_human_agreement",
            "Share of the last feedback.window pairs (of this process's lanes) where judge and person agree; NaN "
            "without pairs.",
            ["scorer"],
            registry=r,
        )
        self.kappa = Gauge(
            f"{P}_judge_human_kappa",
            "Cohen's kappa of the window's boolean and label pairs; NaN when undefined (no such pair, or one category "
            "throughout).",
            ["scorer"],
            registry=r,
        )
        self.mae = Gauge(
            f"{P}_judge_human_mae",
            "Mean absolute difference (0–1) of the window's number pairs; NaN without them.",
            ["scorer"],
            registry=r,
        )
        self.window_pairs = Gauge(
            f"{P}_judge_human_pairs", "Pairs in the window the agreement describes.", ["scorer"], registry=r
        )
        self.min_agreement = Gauge(
            f"{P}_judge_human_min_agreement",
            "The configured floor of the agreement (feedback.min_agreement): JudgeDisagreesWithHumans reads it.",
            ["scorer"],
            registry=r,
        )
        self.canary_agreement = Gauge(
            f"{P}_canary_agreement",
            "Share of the canary's labelled items the live judge agreed with, in its last round.",
            ["scorer"],
            registry=r,
        )
        self.canary_score = Gauge(
            f"{P}_canary_score", "Mean score (0–1) of the canary's items in its last round.", ["scorer"], registry=r
        )
        self.canary_baseline = Gauge(
            f"{P}_canary_baseline_agreement",
            "The agreement the canary is held to: canary.baseline, else the first round this process measured.",
            ["scorer"],
            registry=r,
        )
        self.canary_min_agreement = Gauge(
            f"{P}_canary_min_agreement", "The configured floor of the canary's agreement.", ["scorer"], registry=r
        )
        self.canary_max_drift = Gauge(
            f"{P}_canary_max_drift",
            "How far the canary's agreement may move from its baseline before JudgeDrift fires.",
            ["scorer"],
            registry=r,
        )
        self.canary_items = Counter(
            f"{P}_canary_items",
            "Canary items scored by the live judge, by outcome: scored, or failed (no score: the judge failed, "
            "refused at its gate or spend cap).",
            ["scorer", "outcome"],
            registry=r,
        )
