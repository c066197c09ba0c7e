"""The ``eval`` command: every dataset item scored by every configured scorer, through the same assembly
as the live service (judges with their gates, scorers bound to them), then the table and the exit code."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from pydantic import SecretStr

from exporters.kafka_scores import score_record_head, score_record_json
from sidecar.app.assembly import Assembly, assemble
from sidecar.app.judge_health import JudgeHealth
from sidecar.app.judge_keys import judges_without_key
from sidecar.conventions.session_turns import TurnCaps
from sidecar.core import ScoredRun
from sidecar.core.observers import Observers
from sidecar.eval.agreement import agreement_report, render_agreement
from sidecar.eval.dataset import DatasetError, EvalError, EvalItem, load_dataset
from sidecar.eval.records import RecordFile, ingest_for_records, read_record_file
from sidecar.eval.report import (
    EXIT_BREACHED,
    EvalReport,
    EvalTally,
    ItemResult,
    Progress,
    render_report,
    write_results,
)
from sidecar.eval.thresholds import Threshold, load_thresholds, parse_threshold
from sidecar.ingest import IngestConfig
from sidecar.runtime.attempt import ScorerAttempt, attempt_scorer
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.stages import facts_of
from sidecar.scoring import ScorerRunError
from sidecar.scoring.agreement import DEFAULT_AGREE_WITHIN
from sidecar.settings import EvalSettings, SettingsError, load_eval_settings

__all__ = ["ProgressCallback", "evaluate", "main", "run_eval", "stand_in_settings"]

SCORE_SOURCE = "eval"
ProgressCallback = Callable[[int, int], None]


def _record(run: ScoredRun, item: EvalItem) -> dict[str, Any]:
    record = score_record_json(run)
    if record is None:  # failed or not scorable: the record's identifying fields, the error, what completed
        result = run.result
        record = score_record_head(run, None, None)
        if result is not None:
            dumped = result.model_dump(
                mode="json",
                by_alias=True,
                exclude_none=True,
                exclude={"input", "output", "ground_truth", "request_context", "score", "reason"},
            )
            record["runId"] = dumped.pop("runId", None)
            record.update(dumped)
        if run.error is not None:
            record["error"] = run.error.to_dict()
        record["metadata"] = {"scorerFingerprint": run.scorer_fingerprint}
    record["scoreSource"] = SCORE_SOURCE
    metadata = record.setdefault("metadata", {})
    metadata["evalItem"] = item.index
    if item.id is not None:
        metadata["evalItemId"] = item.id
    record["outcome"] = run.outcome
    return record


class ItemTooLarge(ValueError):
    """A one-turn item larger than the scorer's ``targets.max_input_bytes``: not scored, as a live span that large
    would not be (it is dead-lettered as ``too_large``)."""


async def _score_one(
    configured: ConfiguredScorer, item: EvalItem, observer: Observers, *, timeout_s: float, caps: TurnCaps
) -> ItemResult:
    scorer = configured.scorer
    request = item.request(caps)
    limit = configured.selection.max_input_bytes
    if not item.is_conversation and item.size_bytes > limit:
        now = time.time_ns()
        too_large = ItemTooLarge(
            f"eval item {item.id or item.index} (line {item.line}) is {item.size_bytes} bytes, over "
            f"targets.max_input_bytes ({limit}) of {scorer.id}: not scored, as a live span that large would not be"
        )
        error = ScorerRunError(failed_step="preprocess", completed_steps=(), result=None, cause=too_large)
        attempt = ScorerAttempt("failed", False, None, error, now, now)
    else:
        attempt = await attempt_scorer(
            scorer,
            request,
            timeout_s=timeout_s,
            ground_truth=item.ground_truth,
            request_context=item.run_request_context(),
        )
    run = attempt.to_scored_run(request, scorer, "eval", needs=configured.needs)
    observer.run_finished(run)  # offline, a run refused by a judge's gate is a failure with its reason
    result = attempt.result
    score = result.score if attempt.outcome == "scored" and result is not None else None
    return ItemResult(item=item, scorer_id=scorer.id, outcome=attempt.outcome, score=score, record=_record(run, item))


async def run_eval(
    settings: EvalSettings,
    items: Sequence[EvalItem] | RecordFile,
    *,
    concurrency: int = 8,
    thresholds: Mapping[str, Threshold] | None = None,
    progress: ProgressCallback | None = None,
) -> EvalReport:
    """Score every item with every configured scorer that takes it (bounded concurrency), or every run the scorers'
    stages find in a file of OTLP records; never raises for an item."""
    thresholds = dict(thresholds or {})
    unknown = set(thresholds) - {s.id for s in settings.scorers}
    if unknown:
        known = ", ".join(s.id for s in settings.scorers)
        raise EvalError(f"thresholds for unknown scorer(s) {', '.join(sorted(unknown))} (scorers: {known})")
    timeout_s = settings.runtime.run_timeout_s
    tally = EvalTally({})
    health = JudgeHealth()
    caps = settings.sessions.limits().caps if settings.sessions is not None else TurnCaps()
    # Offline, a judge outage must end the run, not hold it forever: a hold gives up after a run's timeout.
    assembly = assemble(settings, observers=[tally, health], max_hold_s=timeout_s)
    from_records = isinstance(items, RecordFile)
    if isinstance(items, RecordFile):
        items = items.items(settings, assembly.scorers, _ingest(settings, assembly))
    skipped = _without_items(settings, items, from_records=from_records)
    gated = sorted(set(thresholds) & set(skipped))
    if gated:
        await assembly.aclose()
        raise EvalError("; ".join(f"threshold for {scorer}, which {skipped[scorer]}" for scorer in gated))
    if len(skipped) == len(settings.scorers):
        await assembly.aclose()
        raise EvalError("nothing to score: " + "; ".join(f"{scorer} {why}" for scorer, why in skipped.items()))
    tally.expect({s.id: s.scale for s in settings.scorers if s.id not in skipped})
    work = [
        (configured, item)
        for item in items
        for configured in assembly.scorers
        if configured.scorer.id not in skipped and _scores(configured, item)
    ]
    limit = asyncio.Semaphore(max(1, concurrency))
    done = 0
    started = time.monotonic()

    async def one(configured: ConfiguredScorer, item: EvalItem) -> ItemResult:
        nonlocal done
        async with limit:
            outcome = await _score_one(configured, item, assembly.observer, timeout_s=timeout_s, caps=caps)
        done += 1
        if progress is not None:
            progress(done, len(work))
        return outcome

    try:
        results = await asyncio.gather(*(one(configured, item) for configured, item in work))
    finally:
        await assembly.aclose()
    causes = [result.record.get("error", {}).get("cause", {}) for result in results]
    too_large = [f"  {cause['message']}" for cause in causes if cause.get("name") == ItemTooLarge.__name__]
    return EvalReport(
        tallies=tally.tallies,
        results=list(results),
        thresholds=thresholds,
        elapsed_s=time.monotonic() - started,
        items=len(items),
        judge_labels=[judge.label for judge in assembly.judges.values()],
        judge_notes=health.explain(holding=False),
        skipped=[f"{scorer} not run: it {why}" for scorer, why in skipped.items()] + too_large,
    )


def _scores(configured: ConfiguredScorer, item: EvalItem) -> bool:
    """Scope session scorers score conversation items (``turns``); the others score single-turn items. A run found
    in records is for the scorer whose stage found it."""
    if item.scorer_id is not None:
        return item.scorer_id == configured.scorer.id
    return facts_of(configured).conversation_items == item.is_conversation


def _ingest(settings: EvalSettings, assembly: Assembly) -> IngestConfig:
    """What runs found in records keep of their spans and resources: what the scorers read."""
    return ingest_for_records(
        settings,
        resource_attributes=frozenset().union(*(c.facts.resource_attributes for c in assembly.scorers)),
        span_attributes=frozenset().union(*(c.facts.span_attributes for c in assembly.scorers)),
    )


def _without_items(settings: EvalSettings, items: Sequence[EvalItem], *, from_records: bool) -> dict[str, str]:
    """The scorers no item of the dataset (no run in the records) is for, each with why."""
    conversations = sum(1 for item in items if item.is_conversation)
    out: dict[str, str] = {}
    if from_records:
        found = {item.scorer_id for item in items}
        return {s.id: "found no run in the records" for s in settings.scorers if s.id not in found}
    for scorer in settings.scorers:
        takes_conversations = facts_of(scorer.targets.scope).conversation_items
        if takes_conversations and not conversations:
            out[scorer.id] = "scores conversations (scope session) and the dataset has no item with turns"
        elif not takes_conversations and conversations == len(items):
            out[scorer.id] = (
                f"scores one turn (scope {scorer.targets.scope}) and every item of the dataset is a conversation "
                "(turns): score conversations with scope session scorers"
            )
    return out


def stand_in_settings(settings: EvalSettings, url: str) -> EvalSettings:
    """Every judge pointed at the local stand-in judge server (word rules, not a language model)."""
    from sidecar.embedded.heuristic_judge import STAND_IN_MODEL

    judges = {
        name: judge.model_copy(
            update={
                "model": STAND_IN_MODEL,
                "api_base": url,
                "api_key": SecretStr("stand-in"),
                "transport": "http",
                "spend_cap_usd_per_hour": None,
                "rpm": None,
                "tpm": None,
            }
        )
        for name, judge in settings.judges.items()
    }
    return settings.model_copy(update={"judges": judges})


async def evaluate(
    settings: EvalSettings,
    items: Sequence[EvalItem] | RecordFile,
    *,
    concurrency: int,
    thresholds: Mapping[str, Threshold],
    stand_in: bool,
    progress: ProgressCallback | None,
) -> EvalReport:
    """:func:`run_eval`, with the local stand-in judge server around it when ``stand_in``."""
    if not stand_in:
        return await run_eval(settings, items, concurrency=concurrency, thresholds=thresholds, progress=progress)
    from sidecar.embedded.heuristic_judge import heuristic_reply
    from sidecar.testing.judge_server import JudgeServer

    server = await JudgeServer(heuristic_reply, record=False).start()
    try:
        return await run_eval(
            stand_in_settings(settings, server.url),
            items,
            concurrency=concurrency,
            thresholds=thresholds,
            progress=progress,
        )
    finally:
        await server.stop()


def main(
    dataset: Path,
    config: Path,
    *,
    output: Path | None,
    thresholds: Sequence[str],
    thresholds_file: Path | None,
    concurrency: int,
    stand_in: bool,
    progress: bool | None,
    allow_failures: bool = False,
    records: bool = False,
    min_agreement: float | None = None,
    agree_within: float = DEFAULT_AGREE_WITHIN,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The ``eval`` command. 0: every run scored and within thresholds; 1: a threshold breached, or a scorer's
    agreement with the items' expected verdicts under ``min_agreement``; 2: invalid input; 3: runs failed (0 with
    ``allow_failures``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    for value, option in ((min_agreement, "--min-agreement"), (agree_within, "--agree-within")):
        if value is not None and not 0.0 <= value <= 1.0:
            print(f"eval: {option} must be from 0 to 1 (a share), got {value:g}", file=err)
            return 2
    try:
        settings = load_eval_settings(config)
        from sidecar.app.scorer_factory import build_scorers

        build_scorers(settings)  # fail before scoring anything (the assembly builds them again)
    except SettingsError as exc:
        print(f"config INVALID: {config}", file=err)
        for problem in exc.problems:
            print(f"  - {problem}", file=err)
        return 2
    try:
        limits = load_thresholds(thresholds_file) if thresholds_file is not None else {}
        for text in thresholds:
            scorer, threshold = parse_threshold(text)
            limits[scorer] = threshold
        items: Sequence[EvalItem] | RecordFile = read_record_file(dataset) if records else load_dataset(dataset)
        if concurrency <= 0:
            raise EvalError("--concurrency must be > 0")
    except DatasetError as exc:
        count = len(exc.problems)
        print(f"dataset INVALID: {exc.path} ({count} problem{'s' if count != 1 else ''}; nothing scored)", file=err)
        for line in exc.problems:
            print(f"  - {line}", file=err)
        return 2
    except EvalError as exc:
        print(f"eval: {exc}", file=err)
        return 2
    missing = [] if stand_in else judges_without_key(settings)
    if missing:
        for line in missing:
            print(f"eval: {line}", file=err)
        print(
            "eval: set the key, or add --stand-in-judge to score with the local stand-in judge "
            "(word rules, not a language model) and see the pipeline work",
            file=err,
        )
        return 2
    if stand_in:
        from sidecar.embedded.heuristic_judge import STAND_IN_NOTICE

        print(STAND_IN_NOTICE.replace("pass --judge-model and an API key", "drop --stand-in-judge"), file=err)
    reporter: ProgressCallback | None = None if progress is False else Progress(err, tty=progress)
    try:
        report = asyncio.run(
            evaluate(settings, items, concurrency=concurrency, thresholds=limits, stand_in=stand_in, progress=reporter)
        )
    except EvalError as exc:
        print(f"eval: {exc}", file=err)
        return 2
    print(render_report(report, allow_failures=allow_failures), file=out)
    agreement = agreement_report(report, {s.id: s.scale for s in settings.scorers}, agree_within=agree_within)
    if agreement.stats:
        print(render_agreement(agreement, min_agreement), file=out)
    elif min_agreement is not None:
        print("eval: --min-agreement: no scored item carries an expected verdict to agree with", file=err)
        return 2
    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            count = write_results(report, fh)
        print(f"wrote {count} results to {output}", file=out)
    if min_agreement is not None and agreement.below(min_agreement):
        return EXIT_BREACHED
    return report.exit_status(allow_failures=allow_failures)
