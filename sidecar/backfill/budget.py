"""The configuration a backfill runs with: the chosen scorers, and judges limited to a share of what the live
service is configured to use, so that a backfill never takes the live service's judge budget by surprise.

Each judge's ``max_concurrency``, ``rpm`` and ``tpm`` become ``share`` of the configured ones (at least 1), and
its spend cap ``share`` of the configured cap (none when the judge has none); ``--judge-concurrency`` and
``--spend-cap`` set them outright. At the spend cap a backfill's runs wait for the hour's window to free budget
(``on_spend_cap: hold``) whatever the live policy says: shedding would skip traces and commit past them, leaving
the window with holes that the same command cannot fill. Nothing here enters a score id (the scorer's
fingerprint does not read a judge's limits), so a backfilled score keeps the id the live one has.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.runtime.stages import facts_of
from sidecar.runtime.startup import EXIT_INVALID, StartupFailure
from sidecar.settings import JudgeSettings, Settings

__all__ = ["DEFAULT_JUDGE_SHARE", "JudgeBudget", "backfill_settings"]

# A quarter of each judge's limits: the live service keeps three quarters of its provider quota while a backfill
# runs beside it.
DEFAULT_JUDGE_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class JudgeBudget:
    share: float = DEFAULT_JUDGE_SHARE
    concurrency: int | None = None  # judge calls in flight per judge (overrides the share)
    spend_cap_usd_per_hour: float | None = None  # per judge (overrides the share of the configured cap)

    def limit(self, judge: JudgeSettings) -> JudgeSettings:
        cap = self.spend_cap_usd_per_hour
        if cap is None and judge.spend_cap_usd_per_hour is not None:
            cap = judge.spend_cap_usd_per_hour * self.share
        return judge.model_copy(
            update={
                "max_concurrency": self.concurrency or _part(judge.max_concurrency, self.share),
                "rpm": None if judge.rpm is None else _part(judge.rpm, self.share),
                "tpm": None if judge.tpm is None else _part(judge.tpm, self.share),
                "spend_cap_usd_per_hour": cap,
                "on_spend_cap": "hold",
            }
        )


def _part(limit: int, share: float) -> int:
    return max(1, math.floor(limit * share))


def backfill_settings(settings: Settings, scorer_ids: Sequence[str], budget: JudgeBudget, *, config: str) -> Settings:
    """``settings`` with only the chosen scorers (all when none are named) and the judges within ``budget``.
    Raises :class:`StartupFailure` (exit 2) for a scorer id the configuration does not hold."""
    known = [s.id for s in settings.scorers]
    for scorer_id in scorer_ids:
        if scorer_id not in known:
            close = difflib.get_close_matches(scorer_id, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise StartupFailure(
                f"--scorer {scorer_id}: no scorer has that id in {config}; {hint}its scorers: {', '.join(known)}",
                EXIT_INVALID,
            )
    chosen = tuple(s for s in settings.scorers if not scorer_ids or s.id in scorer_ids)
    # A conversation spans far more than a window's traces, and its turns go through the live internal topic:
    # session scorers score live traffic only (docs/sessions.md).
    conversations = [s.id for s in chosen if not facts_of(s.targets.scope).backfills]
    if conversations and scorer_ids:
        raise StartupFailure(
            f"--scorer {conversations[0]}: a scope: session scorer scores live conversations only; a backfill "
            "scores spans and traces",
            EXIT_INVALID,
        )
    chosen = tuple(s for s in chosen if facts_of(s.targets.scope).backfills)
    if not chosen:
        raise StartupFailure(f"no scorer of {config} can backfill: its scorers are all scope: session", EXIT_INVALID)
    runtime = settings.runtime.model_copy(update={"workers": 1})  # a backfill is one process
    return settings.model_copy(
        update={
            "scorers": chosen,
            "sessions": None,
            # The live service's feedback stage joins the backfilled scores: it reads them from the score topic.
            "feedback": None,
            "judges": {name: budget.limit(judge) for name, judge in settings.judges.items()},
            "runtime": runtime,
        }
    )
