"""``scoring-sidecar backfill``: a past window of the traces topic scored with chosen scorers, through the live
service's pipeline, under the score ids the live service gives (docs/backfill.md)."""

from sidecar.backfill.budget import DEFAULT_JUDGE_SHARE, JudgeBudget
from sidecar.backfill.command import SCORE_SOURCE, BackfillOptions, run_backfill

__all__ = ["DEFAULT_JUDGE_SHARE", "SCORE_SOURCE", "BackfillOptions", "JudgeBudget", "run_backfill"]
