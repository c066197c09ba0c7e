"""``scoring-sidecar corrections``: the disagreements of a window between a judge written in YAML and the people who
labelled its scores, written as that judge's ``examples_file`` (JSONL of input, output, expected verdict, reason) for
a person to review and commit (docs/feedback.md). Nothing is rewritten by itself: the scorer's score ids change once,
when the reviewed file is committed and the configuration points at it.

1. The pairs topic (``feedback.pairs_topic``) over ``--from`` … ``--to`` (the broker's time index, as a backfill
   plans its window): the scorer's pairs where judge and person disagree (``--all``: every pair), each once.
2. Their runs: the traces topic over the window their scores were made in, less ``--lookback`` (a trace is scored
   minutes after its spans), only the records keyed by their traces' ids decoded; runs rebuilt by the scorer's stage
   as the service built them (``offline_runs``), matched by subject.
3. One example row per disagreement whose run was found (``sidecar.corrections.examples``); the others are counted
   (their traces are past the topic's retention or the lookback).

Read with no consumer group: nothing is joined or committed. Exit 0 (written, even none), 2 (a configuration,
option, topic or window that cannot be used), 4 (the broker unreachable).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from aiokafka import AIOKafkaConsumer

from sidecar.app.assembly import assemble
from sidecar.app.serve import ingest_for
from sidecar.backfill.plan import plan_window
from sidecar.backfill.window import TimeSpec, Window, WindowError, utc_text
from sidecar.core import ScorerRunRequest
from sidecar.corrections.examples import Unconvertible, example_row
from sidecar.runtime.clients import start_assigned_consumer
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.sources import read_ranges
from sidecar.runtime.stages import facts_of, offline_records, offline_runs
from sidecar.runtime.startup import StartupFailure
from sidecar.scorers.custom.llm_judge import LlmJudgeOptions
from sidecar.settings import Settings, SettingsError, load_settings

__all__ = ["CorrectionsOptions", "Found", "collect", "main"]

_MARGIN_MS = 60_000  # past the last score: a record written just after it still belongs to its trace


class CorrectionsError(ValueError):
    """An option or configuration that cannot be used: the message is the operator's whole line (exit 2)."""


@dataclass(frozen=True, slots=True)
class CorrectionsOptions:
    config: Path
    scorer: str
    start: str
    end: str | None = None
    output: Path | None = None
    lookback_s: float = 3600.0
    every_pair: bool = False


@dataclass(frozen=True)
class Found:
    rows: list[dict[str, Any]]
    pairs: int  # the scorer's pairs in the window (each once)
    chosen: int  # of those, the disagreements (or every pair)
    without_run: int  # whose run the traces topic no longer holds (retention, lookback)
    unconvertible: list[str]  # person's verdicts the judge's output type cannot express


def _chosen(settings: Settings, scorer_id: str) -> tuple[LlmJudgeOptions, str]:
    ids = [s.id for s in settings.scorers]
    if scorer_id not in ids:
        close = difflib.get_close_matches(scorer_id, ids, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise CorrectionsError(f"no scorer {scorer_id!r} in the configuration ({hint}scorers: {', '.join(ids)})")
    scorer = next(s for s in settings.scorers if s.id == scorer_id)
    if scorer.kind != "llm-judge":
        raise CorrectionsError(
            f"corrections become few-shot examples of a judge written in YAML (kind llm-judge); {scorer_id!r} is "
            f"kind {scorer.kind!r}: its disagreements are on the pairs topic as they are"
        )
    if facts_of(scorer.targets.scope).unit == "conversation":
        raise CorrectionsError(
            f"{scorer_id!r} scores conversations: their turns are not one run of the traces topic; read its "
            "disagreements on the pairs topic"
        )
    if settings.feedback is None:
        raise CorrectionsError("corrections read the pairs topic of the feedback block: the configuration has none")
    pairs = settings.feedback.limits(settings.exporters.kafka_scores.topic).pairs
    return LlmJudgeOptions.model_validate(scorer.options), pairs


async def collect(
    settings: Settings, configured: ConfiguredScorer, options: LlmJudgeOptions, pairs_topic: str, window: Window,
    *, lookback_s: float, every_pair: bool,
) -> Found:  # fmt: skip
    """The window's disagreements of ``configured`` as example rows, with what could not be made one."""
    bootstrap = settings.kafka.bootstrap_servers_str
    # One reader per topic: a consumer assigned partitions of one topic keeps the metadata of that topic only.
    async with _reader(settings) as consumer:
        pairs = await _pairs(consumer, pairs_topic, window, configured.scorer.id, bootstrap)
    chosen = [pair for pair in pairs if every_pair or not pair.get("agreed")]
    runs: dict[str, ScorerRunRequest] = {}
    if chosen:
        async with _reader(settings) as consumer:
            runs = await _runs(consumer, settings, configured, chosen, window, lookback_s)
    rows: list[dict[str, Any]] = []
    unconvertible: list[str] = []
    for pair in chosen:
        request = runs.get(f"{pair['traceId']}:{pair['spanId']}")
        if request is None:
            continue
        try:
            rows.append(example_row(pair, request, options))
        except Unconvertible as exc:
            unconvertible.append(f"pair {pair.get('pairId')}: {exc}")
    without_run = sum(1 for pair in chosen if f"{pair['traceId']}:{pair['spanId']}" not in runs)
    return Found(rows, len(pairs), len(chosen), without_run, unconvertible)


@contextlib.asynccontextmanager
async def _reader(settings: Settings) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer with no group (nothing joined, nothing committed)."""
    kafka = settings.kafka
    consumer = await start_assigned_consumer(
        kafka.bootstrap_servers_str,
        {"client_id": f"{kafka.client_id}-corrections", **kafka.security.client_options()},
        timeout_s=kafka.startup_timeout_s,
        purpose="corrections",
    )
    try:
        yield consumer
    finally:
        await consumer.stop()


async def _pairs(
    consumer: AIOKafkaConsumer, topic: str, window: Window, scorer_id: str, bootstrap: str
) -> list[dict[str, Any]]:
    plan = await plan_window(consumer, [topic], window, bootstrap=bootstrap)
    found: dict[str, dict[str, Any]] = {}

    def each(_: Any, record: Any) -> None:
        try:
            pair = json.loads(record.value)
        except (TypeError, ValueError):
            return
        if isinstance(pair, dict) and pair.get("scorerId") == scorer_id and "pairId" in pair:
            found.setdefault(str(pair["pairId"]), pair)  # a pair written twice (a redelivery) is one pair

    await read_ranges(consumer, {p.partition: (p.start, p.end) for p in plan.partitions}, each)
    return sorted(found.values(), key=lambda pair: str(pair.get("pairedAt")))


async def _runs(
    consumer: AIOKafkaConsumer,
    settings: Settings,
    configured: ConfiguredScorer,
    pairs: list[dict[str, Any]],
    window: Window,
    lookback_s: float,
) -> dict[str, ScorerRunRequest]:
    """The runs of ``pairs``' subjects, rebuilt from the traces topic around when they were scored."""
    kafka = settings.kafka
    scored = [_ms(pair.get("scoredAt")) or window.end.unix_ms for pair in pairs]
    start = max(0, min(scored) - int(lookback_s * 1000))
    end = min(window.now_ms, max(scored) + _MARGIN_MS)
    around = Window(TimeSpec(utc_text(start), start, False), TimeSpec(utc_text(end), end, False), window.now_ms)
    plan = await plan_window(consumer, kafka.topics, around, bootstrap=kafka.bootstrap_servers_str)
    wanted = {str(pair["traceId"]).encode() for pair in pairs}
    values: list[tuple[bytes, str]] = []

    def each(tp: Any, record: Any) -> None:
        # The Collector keys a trace's records by its id: only those are decoded (a record keyed otherwise, too).
        key = record.key
        if record.value is not None and (key is None or len(key) != 32 or key in wanted):
            values.append((record.value, f"{tp.topic}/{tp.partition}@{record.offset}"))

    await read_ranges(consumer, {p.partition: (p.start, p.end) for p in plan.partitions}, each)
    ingest = ingest_for(settings, [configured])
    every = replace(configured, selection=configured.selection.model_copy(update={"sample_rate": 1.0}))
    read = offline_records(values, ingest)
    sessions = settings.sessions.limits() if settings.sessions is not None else None
    return {
        run.request.subject: run.request
        for run in offline_runs([every], read.records, ingest=ingest, sessions=sessions)
    }


def _ms(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def main(options: CorrectionsOptions, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        settings = load_settings(options.config)
        judge_options, pairs_topic = _chosen(settings, options.scorer)
        window = Window.parse(options.start, options.end)
        if options.lookback_s < 0:
            raise CorrectionsError("--lookback must be >= 0")
    except SettingsError as exc:
        print(f"config INVALID: {options.config}", file=err)
        for problem in exc.problems:
            print(f"  - {problem}", file=err)
        return 2
    except (CorrectionsError, WindowError) as exc:
        print(f"corrections: {exc}", file=err)
        return 2
    try:
        found = asyncio.run(_run(settings, options, judge_options, pairs_topic, window))
    except StartupFailure as exc:
        print(f"corrections: {exc}", file=err)
        return exc.exit_code
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in found.rows)
    if options.output is None:
        out.write(lines)
    else:
        options.output.write_text(lines, encoding="utf-8")
    what = "pairs" if options.every_pair else "disagreements"
    print(
        f"corrections: {options.scorer}, {window.describe()}: {found.pairs} pairs, {found.chosen} {what}, "
        f"{len(found.rows)} written" + (f" to {options.output}" if options.output else ""),
        file=err,
    )
    if found.without_run:
        print(
            f"corrections: {found.without_run} {what} left out: their traces are no longer on "
            f"{', '.join(settings.kafka.topics)} (retention) or were written more than --lookback before their score",
            file=err,
        )
    for line in found.unconvertible[:5]:
        print(f"corrections: left out: {line}", file=err)
    if found.rows:
        print(
            "corrections: review each row (keep the ones that are right), then set the scorer's "
            "options.examples_file to the file: its score ids change once, with that commit",
            file=err,
        )
    return 0


async def _run(
    settings: Settings, options: CorrectionsOptions, judge_options: LlmJudgeOptions, pairs_topic: str, window: Window
) -> Found:
    assembly = assemble(settings)  # no sinks, no judge call: the scorer as the service builds it
    try:
        configured = next(c for c in assembly.scorers if c.scorer.id == options.scorer)
        return await collect(
            settings, configured, judge_options, pairs_topic, window,
            lookback_s=options.lookback_s, every_pair=options.every_pair,
        )  # fmt: skip
    finally:
        await assembly.aclose()
