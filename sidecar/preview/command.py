"""``scoring-sidecar preview``: try one scorer on real runs before rolling it out (the authoring loop of a judge
written in YAML).

It reads the newest runs (from the configured topic, without joining the consumer group or committing, from a
file of OTLP records, or from an ``eval`` dataset), renders the scorer's prompt for each, calls its judge
through the configured client (or the stand-in), and prints per run the scored span, the prompt, the judge's
answer, the score, label and reason, tokens and cost; then the distribution. Nothing is exported and nothing is
committed: there are no sinks here, and the consumer has no group.
"""

from __future__ import annotations

import asyncio
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from sidecar.app.assembly import assemble
from sidecar.app.judge_keys import judges_without_key
from sidecar.app.scorer_factory import build_scorers
from sidecar.eval.command import stand_in_settings
from sidecar.eval.dataset import EvalError
from sidecar.preview.report import JudgeStep, PreviewOutcome, render_distribution, render_outcome, steps_of
from sidecar.preview.runs import (
    PreviewRun,
    PreviewSourceError,
    RecordsRead,
    runs_from_dataset,
    runs_from_file,
    runs_from_topic,
)
from sidecar.redaction.redactor import PresidioRedactor
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.stages import facts_of
from sidecar.settings import EvalSettings, SettingsError, load_eval_settings

__all__ = ["PreviewOptions", "main", "parse_source", "preview"]

Source = Literal["topic", "file", "dataset"]
# Judge calls in flight at once: a preview is a handful of runs, not a load test.
_CONCURRENCY = 4


@dataclass(frozen=True)
class PreviewOptions:
    config: Path
    scorer: str
    source: Source = "topic"
    path: Path | None = None  # the file or the dataset
    n: int = 5
    show_prompt_only: bool = False
    stand_in: bool = False
    max_chars: int = 300  # each quoted piece of traced content in the printed prompt


class PreviewError(ValueError):
    """An option, a scorer id or a source that cannot be used: exit status 2."""


async def preview(settings: EvalSettings, options: PreviewOptions, out: TextIO) -> int:
    """Preview ``options.scorer`` of ``settings``; 0: runs shown, 1: no run found."""
    timeout_s = settings.runtime.run_timeout_s
    assembly = assemble(settings, max_hold_s=timeout_s)
    try:
        configured = next(c for c in assembly.scorers if c.scorer.id == options.scorer)
        read = await _read(settings, configured, options)
        print(_header(settings, configured, options, read), file=out)
        if not read.runs:
            print(_nothing_read(configured, options, read), file=out)
            return 1
        limit = asyncio.Semaphore(_CONCURRENCY)

        async def one(run: PreviewRun) -> PreviewOutcome:
            async with limit:
                return await _outcome(configured, run, options.show_prompt_only, timeout_s)

        outcomes = await asyncio.gather(*(one(run) for run in read.runs))
    finally:
        await assembly.aclose()
    for index, outcome in enumerate(outcomes, 1):
        print(render_outcome(index, len(outcomes), outcome, limit=options.max_chars), file=out)
    print("", file=out)
    print(render_distribution(outcomes, scale=configured.scale), file=out)
    print("nothing exported, nothing committed", file=out)
    return 0


async def _read(settings: EvalSettings, configured: ConfiguredScorer, options: PreviewOptions) -> RecordsRead:
    keep = configured.facts.resource_attributes
    if options.source == "topic":
        return await runs_from_topic(settings, configured, options.n, keep)
    assert options.path is not None
    if options.source == "file":
        return runs_from_file(options.path, settings, configured, options.n, keep)
    return runs_from_dataset(options.path, options.n, configured)


def _nothing_read(configured: ConfiguredScorer, options: PreviewOptions, read: RecordsRead) -> str:
    scorer = configured.scorer.id
    if options.source != "dataset":
        return f"no run to preview: {read.records} records read, none selected by {scorer}"
    wanted = (
        "conversations (items with turns)"
        if facts_of(configured).conversation_items
        else "one-turn items (input, output)"
    )
    return f"no run to preview: {read.records} items read, none for {scorer}, which scores {wanted}"


def _header(settings: EvalSettings, configured: ConfiguredScorer, options: PreviewOptions, read: RecordsRead) -> str:
    scorer = configured.scorer
    where = {
        "topic": f"the newest records of {', '.join(settings.kafka.topics) if settings.kafka else '-'}",
        "file": str(options.path),
        "dataset": str(options.path),
    }[options.source]
    judge = configured.judge_model or "no judge"
    lines = [
        f"preview of {scorer.id} ({configured.kind}, {configured.scope} scope, judge {judge}, better "
        f"{configured.facts.direction}): {len(read.runs)} runs from {where} ({read.records} read"
        + (f", {read.undecodable} not OTLP" if read.undecodable else "")
        + ")"
    ]
    redactor = scorer.redactor
    if isinstance(redactor, PresidioRedactor):  # the prompts below are what the judge reads: say why they differ
        lines.append(
            f"personal data redacted before the judge reads it (judges.{redactor.judge}.redact, "
            f"{redactor.policy.operator}): {', '.join(redactor.entities)}"
        )
    system = scorer.judge.instructions if scorer.judge is not None and scorer.has_judge_steps else None
    if system:
        lines.append("judge instructions (system message):")
        lines.extend(f"     │ {line}" for line in system.splitlines())
    return "\n".join(lines)


async def _outcome(
    configured: ConfiguredScorer, run: PreviewRun, show_prompt_only: bool, timeout_s: float
) -> PreviewOutcome:
    scorer = configured.scorer
    request = run.request
    target = request.target
    span_attributes = dict(target.span_attributes) or None
    resource_attributes = dict(target.resource_attributes) or None
    if show_prompt_only:
        try:
            shown = await scorer.first_prompt(
                input=request.input,
                output=request.output,
                request_context=run.request_context,
                ground_truth=run.ground_truth,
                span_attributes=span_attributes,
                resource_attributes=resource_attributes,
            )
        except Exception as exc:  # a template failing on this run's values: shown, not a crash
            return PreviewOutcome(run, "failed", problem=f"{type(exc).__name__}: {exc}")
        if shown is None:
            return PreviewOutcome(run, "rendered", problem="this scorer calls no judge before its score")
        if shown.prompt is None:
            return PreviewOutcome(run, "not_scorable", problem=shown.not_scorable)
        return PreviewOutcome(run, "rendered", steps=(JudgeStep(shown.step, shown.prompt, None),))
    attempt = await attempt_scorer(
        scorer, request, timeout_s=timeout_s, ground_truth=run.ground_truth, request_context=run.request_context
    )
    result = attempt.result
    steps = steps_of(result)
    if attempt.outcome == "scored" and result is not None:
        return PreviewOutcome(run, "scored", steps, result.score, result.label, result.reason)
    if attempt.outcome == "not_scorable" and result is not None and result.not_scorable is not None:
        return PreviewOutcome(run, "not_scorable", steps, problem=result.not_scorable.reason)
    error = attempt.error
    cause = error.__cause__ if error is not None else None
    problem = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
    return PreviewOutcome(run, "failed", steps, problem=problem)


def _check(settings: EvalSettings, options: PreviewOptions) -> None:
    ids = [s.id for s in settings.scorers]
    if options.scorer not in ids:
        close = difflib.get_close_matches(options.scorer, ids, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PreviewError(f"no scorer {options.scorer!r} in {options.config} ({hint}scorers: {', '.join(ids)})")
    if options.n <= 0 or options.max_chars <= 0:
        raise PreviewError("-n and --max-chars must be > 0")
    if options.source == "topic" and settings.kafka is None:
        raise PreviewError("--from-topic needs a kafka section in the configuration (or use --file, --dataset)")
    if options.source != "topic" and (options.path is None or not options.path.is_file()):
        raise PreviewError(f"--{options.source}: no such file: {options.path}")


async def _with_stand_in(settings: EvalSettings, options: PreviewOptions, out: TextIO) -> int:
    from sidecar.embedded.heuristic_judge import heuristic_reply
    from sidecar.testing.judge_server import JudgeServer

    server = await JudgeServer(heuristic_reply, record=False).start()
    try:
        return await preview(stand_in_settings(settings, server.url), options, out)
    finally:
        await server.stop()


def main(options: PreviewOptions, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The ``preview`` command. 0: runs shown; 1: no run found; 2: invalid configuration, option or source."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        settings = load_eval_settings(options.config)
        build_scorers(settings)  # every problem with its key and line, before reading anything
        _check(settings, options)
    except SettingsError as exc:
        print(f"config INVALID: {options.config}", file=err)
        for problem in exc.problems:
            print(f"  - {problem}", file=err)
        return 2
    except PreviewError as exc:
        print(f"preview: {exc}", file=err)
        return 2
    calls_judges = not options.show_prompt_only and not options.stand_in
    missing = judges_without_key(settings) if calls_judges else []
    if missing:
        for line in missing:
            print(f"preview: {line}", file=err)
        print(
            "preview: set the key, add --show-prompt-only to render the prompts without calling a judge, or "
            "--stand-in-judge for the local stand-in (a keyword heuristic, not a language model)",
            file=err,
        )
        return 2
    try:
        if options.stand_in and not options.show_prompt_only:
            from sidecar.embedded.heuristic_judge import STAND_IN_NOTICE

            print(STAND_IN_NOTICE.replace("pass --judge-model and an API key", "drop --stand-in-judge"), file=err)
            return asyncio.run(_with_stand_in(settings, options, out))
        return asyncio.run(preview(settings, options, out))
    except (PreviewSourceError, EvalError) as exc:
        print(f"preview: {exc}", file=err)
        return 2


def parse_source(file: str | None, dataset: str | None) -> tuple[Source, Path | None]:
    if file is not None:
        return "file", Path(file)
    if dataset is not None:
        return "dataset", Path(dataset)
    return "topic", None
