"""Human feedback joined to the sidecar's own scores (docs/feedback.md): a stage of its own.

- ``records``: a feedback record and a score record, read and checked where they enter;
- ``join``: the pure join (both arrival orders, held state per lane, expiry, the windows of pairs);
- ``limits``: the bounds and their defaults.
"""

from sidecar.runtime.feedback.join import Effects, Join, JoinedScorer, PairMade, WindowEntry, pair_id_of
from sidecar.runtime.feedback.limits import FeedbackLimits
from sidecar.runtime.feedback.records import Feedback, FeedbackError, ScoreSeen, parse_feedback, parse_score

__all__ = [
    "Effects",
    "Feedback",
    "FeedbackError",
    "FeedbackLimits",
    "Join",
    "JoinedScorer",
    "PairMade",
    "ScoreSeen",
    "WindowEntry",
    "pair_id_of",
    "parse_feedback",
    "parse_score",
]
