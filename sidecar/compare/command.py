"""``scoring-sidecar compare``: the version comparison of one agent and scorer over a window of the score topic, for a
release review or a post-mortem (docs/versions.md).

The score records of the window are fed, in the order of their runs' ends, to the same comparison the live service
keeps (``sidecar.versions``), with the configuration's ``versions`` block and every configured scorer's direction and
scale: over the window a live process saw, it prints the verdict its gauges showed. It reads all the scores (every
replica's), so it tests at ``versions.alpha`` itself, not at the replicas' share of it. Only the live service's
scores are read unless ``--include-backfill`` (a backfill's scores of past traffic arrive late, in a burst).

Exit 0 with the comparison printed; 2 for invalid options, an unknown scorer, a missing topic, a window past
retention or one holding more than ``--max-records`` records; 4 when the broker cannot be reached.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from exporters.prometheus import normalise_score
from sidecar.app.scorer_factory import build_scorers, facts_for
from sidecar.backfill.command import start_consumer
from sidecar.backfill.plan import plan_window
from sidecar.backfill.window import TimeSpec, Window, WindowError
from sidecar.compare.report import render_json, render_text, summarise_versions
from sidecar.compare.scores import WRITE_SLACK_MS, ScoreRow, ScoresRead, read_scores
from sidecar.runtime.startup import EXIT_INVALID, StartupFailure
from sidecar.settings import Settings
from sidecar.versions.comparison import Observation, VersionComparisons

__all__ = ["DEFAULT_MAX_RECORDS", "CompareOptions", "run_compare"]

log = logging.getLogger(__name__)

# Records of the score topic one comparison reads at most: the scores it keeps take about 250 bytes each.
DEFAULT_MAX_RECORDS = 1_000_000


@dataclass(frozen=True, slots=True)
class CompareOptions:
    agent: str
    scorer: str
    start: str
    end: str | None = None
    topic: str | None = None  # default: exporters.kafka_scores.topic
    max_records: int = DEFAULT_MAX_RECORDS
    include_backfill: bool = False
    json: bool = False


async def run_compare(settings: Settings, options: CompareOptions, *, out: TextIO) -> int:
    try:
        window = Window.parse(options.start, options.end)
    except WindowError as exc:
        raise StartupFailure(str(exc), EXIT_INVALID) from None
    scorers = {s.id: s for s in settings.scorers}
    if options.scorer not in scorers:
        raise StartupFailure(
            f"--scorer {options.scorer}: no such scorer in the configuration (scorers: {', '.join(scorers)})",
            EXIT_INVALID,
        )
    built = build_scorers(settings)
    directions = {i: (facts_for(s, built[i]).direction == "higher", s.scale) for i, s in scorers.items()}
    topic = options.topic or settings.exporters.kafka_scores.topic
    sources = {"live", "backfill"} if options.include_backfill else {"live"}
    read = await _read(
        settings, topic, window, options.max_records, lambda r: r.scorer in scorers and r.source in sources
    )
    # Every configured scorer's scores of every agent, as the live process saw them: a version's release is its
    # first run of any scorer, and quiet versions are forgotten on the time of every agent's runs.
    comparisons = VersionComparisons(settings.versions.model_copy(update={"replicas": 1}).comparison())
    chosen: list[ScoreRow] = []
    chosen_scores: list[float] = []
    unversioned = 0
    seen: set[str] = set()
    for row in read.rows:
        known = directions[row.scorer]  # read only the configured scorers' scores (of the sources asked for)
        if row.score_id in seen:
            continue
        seen.add(row.score_id)  # at-least-once: a redelivered run's score is the same score, read once
        higher, scale = known
        score = normalise_score(row.score, scale)
        if score is None:
            continue
        mine = row.agent == options.agent and row.scorer == options.scorer
        if row.version is None:
            unversioned += mine
            continue
        comparisons.observe(Observation(row.agent, row.scorer, row.version, score, row.time_ms, higher))
        if mine:
            chosen.append(row)
            chosen_scores.append(score)
    found = [c for c in comparisons.comparisons() if c.agent == options.agent and c.scorer == options.scorer]
    comparison = found[0] if found else None
    versions = summarise_versions(chosen, chosen_scores)
    higher = directions[options.scorer][0]
    alpha, min_effect = settings.versions.alpha, settings.versions.min_effect
    if options.json:
        body = render_json(
            agent=options.agent,
            scorer=options.scorer,
            higher_is_better=higher,
            start_ms=window.start.unix_ms,
            end_ms=window.end.unix_ms,
            versions=versions,
            comparison=comparison,
            alpha=alpha,
            min_effect=min_effect,
        )
        print(json.dumps(body, indent=2, allow_nan=False), file=out)
        return 0
    unreadable = f" ({read.unreadable} not score records)" if read.unreadable else ""
    print(f"read {read.records} records of {topic}{unreadable}", file=out)
    for line in render_text(
        agent=options.agent,
        scorer=options.scorer,
        higher_is_better=higher,
        window=window.describe(),
        versions=versions,
        comparison=comparison,
        alpha=alpha,
        min_effect=min_effect,
        unversioned=unversioned,
    ):
        print(line, file=out)
    return 0


async def _read(
    settings: Settings, topic: str, window: Window, max_records: int, keep: Callable[[ScoreRow], bool]
) -> ScoresRead:
    # A score is written a little after its run ended: the records of runs that ended before --to may be written
    # after it. The plan reads that much further (never past now); the scores' own times choose.
    end_ms = window.now_ms if window.open_ended else min(window.end.unix_ms + WRITE_SLACK_MS, window.now_ms)
    planned = Window(window.start, TimeSpec(window.end.text, end_ms, window.end.relative), window.now_ms)
    consumer = await start_consumer(settings, group_id=None, command="compare")
    try:
        plan = await plan_window(
            consumer,
            [topic],
            planned,
            bootstrap=settings.kafka.bootstrap_servers_str,
            setting="exporters.kafka_scores.topic (or --topic)",
            verb="compare",
        )
        if plan.records > max_records:
            raise StartupFailure(
                f"the window holds {plan.records} records of {topic}, more than --max-records {max_records}: "
                "narrow --from and --to, or raise --max-records",
                EXIT_INVALID,
            )
        read = await read_scores(consumer, plan, start_ms=window.start.unix_ms, end_ms=window.end.unix_ms, keep=keep)
    finally:
        await consumer.stop()
    if read.unreadable:
        log.warning("%d records of %s are not score records: left out", read.unreadable, topic)
    return read
