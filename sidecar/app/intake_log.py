"""The periodic intake line of ``run``: what came in and what became of it since the last line.

A newcomer whose configuration scores nothing sees nothing in the metrics they have not set up yet; this
INFO line says it in the log (``runtime.intake_log_interval_s``, 60 s by default, only when something
happened), from the same observer events the Prometheus metrics count:

    intake in the last 60 s: 120 records, 480 spans; runs: prompt-alignment scored 118 failed 2 filtered 360;
    spans set aside: filtered 360; dead letters: none

with ``; limits hit: runs_per_record 3`` and ``; dead letters refused: decode_error 1`` added when a bound on traced
input was hit or the broker refused a dead letter (docs/limits.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

from sidecar.core.observers import IngestSkipReason, LimitName, ServiceObserver, SkipOutcome
from sidecar.core.scored import ScoredRun
from sidecar.scoring.judge.errors import ShedReason

__all__ = ["IntakeTally", "log_intake"]

log = logging.getLogger(__name__)


class IntakeTally(ServiceObserver):
    """Counts intake events between two lines; ``take`` renders and resets them."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.records = 0
        self.spans = 0
        self.runs: Counter[tuple[str, str]] = Counter()  # (scorer, outcome or skip)
        self.set_aside: Counter[str] = Counter()
        self.dead_letters: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.limits: Counter[str] = Counter()

    def record_consumed(self, topic: str, spans_seen: int) -> None:
        self.records += 1
        self.spans += spans_seen

    def spans_skipped(self, reason: IngestSkipReason, n: int) -> None:
        self.set_aside[reason] += n

    def dead_lettered(self, reason: str, n: int = 1) -> None:
        self.dead_letters[reason] += n

    def dead_letter_refused(self, reason: str, n: int = 1) -> None:
        self.refused[reason] += n

    def limit_hit(self, limit: LimitName, n: int = 1) -> None:
        self.limits[limit] += n

    def runs_skipped(
        self,
        scorer: str,
        agent: str,
        outcome: SkipOutcome,
        n: int,
        *,
        judge: str = "",
        shed_reason: ShedReason = "spend_cap",
    ) -> None:
        self.runs[(scorer or "any scorer", outcome)] += n

    def run_finished(self, run: ScoredRun) -> None:
        self.runs[(run.scorer_id, run.outcome)] += 1

    def take(self, period_s: float) -> str | None:
        """The line for the period just ended (None when nothing happened), and a fresh count."""
        if not (self.records or self.runs or self.dead_letters or self.refused or self.limits):
            return None
        by_scorer: dict[str, list[str]] = {}
        for (scorer, outcome), n in self.runs.items():
            by_scorer.setdefault(scorer, []).append(f"{outcome} {n}")
        runs = ", ".join(f"{scorer} {' '.join(parts)}" for scorer, parts in by_scorer.items()) or "none"
        set_aside = ", ".join(f"{reason} {n}" for reason, n in self.set_aside.most_common()) or "none"
        dead = ", ".join(f"{reason} {n}" for reason, n in self.dead_letters.most_common()) or "none"
        line = (
            f"intake in the last {period_s:g} s: {self.records} records, {self.spans} spans; runs: {runs}; "
            f"spans set aside: {set_aside}; dead letters: {dead}"
        )
        if self.refused:
            line += "; dead letters refused: " + ", ".join(f"{r} {n}" for r, n in self.refused.most_common())
        if self.limits:
            line += "; limits hit: " + ", ".join(f"{limit} {n}" for limit, n in self.limits.most_common())
        finished = any(outcome in ("scored", "failed", "not_scorable") for _, outcome in self.runs)
        if not finished and (self.set_aside or self.runs):
            # The case this line exists for: traffic arrives and nothing is scored.
            line += (
                "; nothing scored: see why above (filtered: no span matched scorers[].targets; sampled_out: "
                "scorers[].sampling; no_content: spans without input/output; internal: the sidecar's own spans)"
            )
        self._reset()
        return line


async def log_intake(tally: IntakeTally, every_s: float, stop: asyncio.Event) -> None:
    """Log the tally every ``every_s`` until ``stop``; then wait to be cancelled (the service has drained,
    flushed and committed by then) and log what the last, shorter period counted, the drain included: the
    runs of the last seconds before a stop are in the log too."""
    period_started = time.monotonic()
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            if stop.is_set():
                break
            line = tally.take(every_s)
            if line is not None:
                log.info("%s", line)
            period_started = time.monotonic()
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        line = tally.take(round(time.monotonic() - period_started, 1))
        if line is not None:
            log.info("%s", line)
        raise
