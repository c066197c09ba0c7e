"""``scoring-sidecar eval DATASET --config FILE``: the offline twin of live scoring (Mastra's ``runEvals``).

Every dataset item is scored by every configured scorer, with the service's judges, judge gates
(concurrency, RPM/TPM, spend cap, circuit breaker) and transport retries. Then a summary table, and a
non-zero exit when a scorer's average falls outside its threshold.

Dataset: JSONL (one object per line) or CSV (a header row), with ``input`` and ``output`` (required),
``ground_truth``, ``request_context`` (an object; in CSV a JSON string), and optionally ``id`` and ``system``
(system instructions). A string ``input`` becomes one user message (plus ``system`` as a system message),
a string ``output`` one assistant message: the agent run shape live scoring gives scorers. Other JSON values
(Mastra's agent shape, message lists) are passed to the scorers as they are.

Configuration: the same YAML as ``scoring-sidecar run``: ``judges`` and ``scorers`` are used; ``kafka`` may be
left out; ``targets`` and ``sampling`` do not apply (every item is scored by every scorer); ``runtime.
run_timeout_s`` bounds each run.

Thresholds (``--threshold ID=MIN`` or ``ID=MIN:MAX``, or ``--thresholds FILE`` mapping an id to ``MIN`` or
``{min, max}``): bounds in [0, 1] on the scorer's average score divided by its ``scale``. Exit codes: 0 all
averages within their thresholds; 1 a threshold breached (a scorer with a threshold and no score at all
breaches it); 2 invalid configuration, dataset or thresholds. Failed items never abort the run.

``--output FILE.jsonl``: one line per (item, scorer), in dataset order: the Kafka score record
(``exporters.kafka_scores.score_record_json``) with ``scoreSource: "eval"``; runs without a score carry the
same identifying fields with ``score: null`` and ``error`` (``ScorerRunError.to_dict()``) or ``notScorable``,
plus the judge record of what completed. Offline items have no trace: ``traceId``/``spanId`` are derived from
sha256(item index, item JSON), so the same dataset gives the same ``scoreId``s run after run.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import SecretStr

from exporters.base import ScoredRun
from exporters.kafka_scores import score_record_head, score_record_json
from sidecar.runs import ScorerRunRequest, SpanTarget
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.settings import Settings, SettingsError, SettingsProblem, load_settings
from sidecar.scoring import Scorer
from sidecar.scoring.agent import AgentRunInput, SystemMessage, assistant_message, user_message
from sidecar.scoring.types import JudgeExecutionSuccess, ScorerRunResult

__all__ = [
    "EvalError",
    "EvalItem",
    "EvalReport",
    "ItemResult",
    "Threshold",
    "load_dataset",
    "load_eval_settings",
    "parse_threshold",
    "render_report",
    "run_eval",
]

SCORE_SOURCE = "eval"
_OFFLINE_KAFKA = "\nkafka: {bootstrap_servers: offline-eval:0}  # added by eval: Kafka is not used offline\n"


class EvalError(ValueError):
    """A dataset, threshold or configuration problem: exit code 2."""


# --------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class EvalItem:
    index: int  # 0-based position in the dataset
    line: int  # 1-based line of the item in the file (CSV: the row's line)
    input: Any
    output: Any
    ground_truth: Any = None
    request_context: dict[str, Any] | None = None
    id: str | None = None
    system: str | None = None

    def canonical(self) -> str:
        body = {
            "input": self.input,
            "output": self.output,
            "ground_truth": self.ground_truth,
            "request_context": self.request_context,
            "system": self.system,
        }
        return json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)

    def target(self) -> SpanTarget:
        digest = hashlib.sha256(f"{self.index}:{self.canonical()}".encode()).hexdigest()
        return SpanTarget(
            trace_id=digest[:32],
            span_id=digest[32:48],
            span_name=f"eval item {self.id or self.index}",
            kind="agent",
            end_time_unix_nano=0,
        )

    def run_input(self) -> Any:
        if isinstance(self.input, str):
            systems = (SystemMessage(content=self.system),) if self.system else ()
            return AgentRunInput(input_messages=(user_message(self.input),), system_messages=systems)
        if isinstance(self.input, Mapping) and "inputMessages" in self.input:
            try:
                return AgentRunInput.model_validate(self.input)
            except ValueError:
                return self.input
        return self.input

    def run_output(self) -> Any:
        if isinstance(self.output, str):
            return (assistant_message(self.output),)
        return self.output


def _item_from(data: Any, index: int, line: int, where: str) -> EvalItem:
    if not isinstance(data, Mapping):
        raise EvalError(f"{where}: an item must be an object with 'input' and 'output'")
    unknown = set(data) - {"input", "output", "ground_truth", "request_context", "id", "system"}
    if unknown:
        raise EvalError(
            f"{where}: unknown field(s) {', '.join(sorted(unknown))} "
            "(allowed: input, output, ground_truth, request_context, id, system)"
        )
    for required in ("input", "output"):
        if data.get(required) in (None, ""):
            raise EvalError(f"{where}: '{required}' is required")
    context = data.get("request_context")
    if context in (None, ""):
        context = None
    elif isinstance(context, str):
        try:
            context = json.loads(context)
        except ValueError:
            raise EvalError(f"{where}: 'request_context' is not valid JSON") from None
    if context is not None and not isinstance(context, dict):
        raise EvalError(f"{where}: 'request_context' must be an object")
    ground_truth = data.get("ground_truth")
    item_id = data.get("id")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise EvalError(f"{where}: 'system' must be a string")
    return EvalItem(
        index=index,
        line=line,
        input=data["input"],
        output=data["output"],
        ground_truth=None if ground_truth == "" else ground_truth,
        request_context=context,
        id=None if item_id in (None, "") else str(item_id),
        system=system or None,
    )


def load_dataset(path: Path) -> list[EvalItem]:
    """Items of a ``.jsonl`` (also ``.json`` lines) or ``.csv`` file. Raises :class:`EvalError`."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise EvalError(f"cannot read {path}: {exc.strerror}") from None
    items: list[EvalItem] = []
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames or not {"input", "output"} <= set(reader.fieldnames):
            raise EvalError(f"{path}: the CSV header must name 'input' and 'output' columns")
        for row in reader:
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            data = {k: v for k, v in row.items() if k}
            items.append(_item_from(data, len(items), reader.line_num, f"{path}:{reader.line_num}"))
    else:
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise EvalError(f"{path}:{number}: not valid JSON ({exc})") from None
            items.append(_item_from(data, len(items), number, f"{path}:{number}"))
    if not items:
        raise EvalError(f"{path}: no items")
    return items


def load_eval_settings(path: Path) -> Settings:
    """The live configuration file; a missing ``kafka`` section is filled in (Kafka is not used offline)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError([SettingsProblem("", None, f"cannot read {path}: {exc.strerror}")], str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None  # load_settings reports the syntax error with its line
    if isinstance(data, dict) and "kafka" not in data:
        text = text.rstrip("\n") + "\n" + _OFFLINE_KAFKA  # appended: line numbers of the file stay right
    try:
        return load_settings(text)
    except SettingsError as exc:
        raise SettingsError(exc.problems, str(path)) from None


@dataclass(frozen=True)
class Threshold:
    min: float | None = None
    max: float | None = None

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def __str__(self) -> str:
        if self.max is None:
            return f">= {self.min:g}"
        if self.min is None:
            return f"<= {self.max:g}"
        return f"{self.min:g}..{self.max:g}"


def _bound(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise EvalError(f"{what}: {value!r} is not a number") from None
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise EvalError(f"{what}: {number:g} is outside [0, 1] (bounds apply to score / scale)")
    return number


def _threshold(value: Any, what: str) -> Threshold:
    if isinstance(value, Mapping):
        unknown = set(value) - {"min", "max"}
        if unknown:
            raise EvalError(f"{what}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (use min, max)")
        low = _bound(value["min"], f"{what}.min") if value.get("min") is not None else None
        high = _bound(value["max"], f"{what}.max") if value.get("max") is not None else None
    else:
        low, high = _bound(value, what), None
    if low is None and high is None:
        raise EvalError(f"{what}: give a min, a max or both")
    if low is not None and high is not None and low > high:
        raise EvalError(f"{what}: min {low:g} is above max {high:g}")
    return Threshold(low, high)


def parse_threshold(text: str) -> tuple[str, Threshold]:
    """``ID=MIN``, ``ID=MIN:MAX``, ``ID=:MAX`` → (scorer id, threshold)."""
    scorer, sep, bounds = text.partition("=")
    if not sep or not scorer.strip():
        raise EvalError(f"--threshold {text!r}: use ID=MIN or ID=MIN:MAX")
    low_text, colon, high_text = bounds.partition(":")
    spec: dict[str, Any] = {"min": low_text.strip() or None}
    if colon:
        spec["max"] = high_text.strip() or None
    return scorer.strip(), _threshold(spec, f"--threshold {scorer.strip()}")


def load_thresholds(path: Path) -> dict[str, Threshold]:
    """A YAML mapping: scorer id → ``MIN`` or ``{min, max}`` (optionally under a top-level ``thresholds`` key)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EvalError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise EvalError(f"{path}: YAML error: {exc}") from None
    if isinstance(data, Mapping) and set(data) == {"thresholds"}:
        data = data["thresholds"]
    if not isinstance(data, Mapping):
        raise EvalError(f"{path}: expected a mapping of scorer id → min or {{min, max}}")
    return {str(k): _threshold(v, f"{path}: {k}") for k, v in data.items()}


# --------------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class ItemResult:
    item: EvalItem
    scorer_id: str
    outcome: str  # scored | failed | not_scorable
    score: float | None
    record: dict[str, Any]
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    shed: bool = False


@dataclass
class ScorerTally:
    scorer_id: str
    scale: float = 1.0
    scored: int = 0
    failed: int = 0
    not_scorable: int = 0
    shed: int = 0
    score_sum: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def average(self) -> float | None:
        return self.score_sum / self.scored if self.scored else None

    @property
    def normalised(self) -> float | None:
        average = self.average
        return None if average is None else min(1.0, max(0.0, average / self.scale))


@dataclass
class EvalReport:
    tallies: dict[str, ScorerTally]
    results: list[ItemResult]
    thresholds: dict[str, Threshold]
    elapsed_s: float
    items: int
    judge_labels: list[str] = field(default_factory=list)

    def breaches(self) -> list[str]:
        return [
            scorer
            for scorer, threshold in self.thresholds.items()
            if scorer in self.tallies and not threshold.holds(self.tallies[scorer].normalised)
        ]

    @property
    def exit_code(self) -> int:
        return 1 if self.breaches() else 0


def _usage(result: ScorerRunResult | None) -> tuple[int, int, float]:
    if result is None or result.judge is None:
        return 0, 0, 0.0
    tokens_in = tokens_out = 0
    cost = 0.0
    for execution in result.judge.executions():
        usage = execution.usage
        if usage is not None:
            tokens_in += usage.input_tokens or 0
            tokens_out += usage.output_tokens or 0
        provider_cost = execution.cost if isinstance(execution, JudgeExecutionSuccess) else None
        if provider_cost is not None and provider_cost.unit.upper() == "USD":
            cost += provider_cost.amount  # what the provider reported beats our estimate
            continue
        estimated = execution.estimated_cost_usd
        if estimated is not None and math.isfinite(estimated):
            cost += estimated
    return tokens_in, tokens_out, cost


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


async def _score_one(scorer: Scorer, item: EvalItem, *, timeout_s: float) -> ItemResult:
    target = item.target()
    run_input, run_output = item.run_input(), item.run_output()
    request = ScorerRunRequest.model_construct(target=target, input=run_input, output=run_output)
    attempt = await attempt_scorer(
        scorer, request, timeout_s=timeout_s, ground_truth=item.ground_truth, request_context=item.request_context
    )
    run = attempt.to_scored_run(request, scorer, "eval")
    result, outcome, shed = attempt.result, attempt.outcome, attempt.shed
    tokens_in, tokens_out, cost = _usage(result)
    score = result.score if outcome == "scored" and result is not None else None
    return ItemResult(
        item=item,
        scorer_id=scorer.id,
        outcome=outcome,
        score=score,
        record=_record(run, item),
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost_usd=cost,
        shed=shed,
    )


ProgressCallback = Callable[[int, int], None]


async def run_eval(
    settings: Settings,
    items: Sequence[EvalItem],
    *,
    concurrency: int = 8,
    thresholds: Mapping[str, Threshold] | None = None,
    progress: ProgressCallback | None = None,
) -> EvalReport:
    """Score every item with every configured scorer (bounded concurrency); never raises for an item."""
    from sidecar.runtime.app import _gate_config
    from sidecar.runtime.judge_gate import install_gates
    from sidecar.runtime.scorer_factory import build_scorers
    from sidecar.scoring.judge.client import close_judge_clients

    thresholds = dict(thresholds or {})
    unknown = set(thresholds) - {s.id for s in settings.scorers}
    if unknown:
        known = ", ".join(s.id for s in settings.scorers)
        raise EvalError(f"thresholds for unknown scorer(s) {', '.join(sorted(unknown))} (scorers: {known})")
    judge_models = settings.judge_models()
    # Offline, a judge outage must end the run, not hold it forever: a hold gives up after a run's timeout.
    hold_s = settings.runtime.run_timeout_s
    install_gates(
        {
            name: (model, _gate_config(settings, name).model_copy(update={"max_hold_s": hold_s}))
            for name, model in judge_models.items()
        }
    )
    scorers = build_scorers(settings)
    tallies = {s.id: ScorerTally(s.id, scale=s.scale) for s in settings.scorers}
    work = [(scorers[s.id], item) for item in items for s in settings.scorers]
    limit = asyncio.Semaphore(max(1, concurrency))
    done = 0
    started = time.monotonic()
    timeout_s = settings.runtime.run_timeout_s

    async def one(scorer: Scorer, item: EvalItem) -> ItemResult:
        nonlocal done
        async with limit:
            outcome = await _score_one(scorer, item, timeout_s=timeout_s)
        done += 1
        if progress is not None:
            progress(done, len(work))
        return outcome

    try:
        results = await asyncio.gather(*(one(scorer, item) for scorer, item in work))
    finally:
        await close_judge_clients()
    for result in results:
        tally = tallies[result.scorer_id]
        if result.outcome == "scored" and result.score is not None:
            tally.scored += 1
            tally.score_sum += result.score
        elif result.outcome == "not_scorable":
            tally.not_scorable += 1
        else:
            tally.failed += 1
            tally.shed += int(result.shed)
        tally.input_tokens += result.input_tokens
        tally.output_tokens += result.output_tokens
        tally.cost_usd += result.cost_usd
    return EvalReport(
        tallies=tallies,
        results=list(results),
        thresholds=thresholds,
        elapsed_s=time.monotonic() - started,
        items=len(items),
        judge_labels=[m.litellm_model for m in judge_models.values()],
    )


def write_results(report: EvalReport, out: TextIO) -> int:
    """One JSON line per (item, scorer), in dataset order then scorer order. Returns the number of lines."""
    for result in report.results:
        out.write(json.dumps(result.record, ensure_ascii=False, allow_nan=False) + "\n")
    return len(report.results)


def render_report(report: EvalReport) -> str:
    lines = [
        f"{report.items} items x {len(report.tallies)} scorers in {report.elapsed_s:.1f}s"
        + (f" (judges: {', '.join(report.judge_labels)})" if report.judge_labels else ""),
        f"{'scorer':<22} {'avg':>6} {'scored':>6} {'failed':>6} {'n/s':>4} {'tokens in':>10} {'tokens out':>10} "
        f"{'est. cost':>10}  threshold",
    ]
    total_in = total_out = 0
    total_cost = 0.0
    breaches = set(report.breaches())
    for scorer, tally in report.tallies.items():
        average = tally.average
        threshold = report.thresholds.get(scorer)
        if threshold is None:
            verdict = "-"
        else:
            shown = "no score" if tally.normalised is None else f"{tally.normalised:.2f}"
            verdict = f"{threshold} {'FAIL (' + shown + ')' if scorer in breaches else 'ok'}"
        lines.append(
            f"{scorer:<22} {'-' if average is None else f'{average:.3f}':>6} {tally.scored:>6} {tally.failed:>6} "
            f"{tally.not_scorable:>4} {tally.input_tokens:>10} {tally.output_tokens:>10} "
            f"{'$' + format(tally.cost_usd, '.4f'):>10}  {verdict}"
        )
        total_in += tally.input_tokens
        total_out += tally.output_tokens
        total_cost += tally.cost_usd
    shed = sum(t.shed for t in report.tallies.values())
    lines.append(
        f"judge tokens {total_in} in / {total_out} out, estimated cost ${total_cost:.4f}"
        + (f"; {shed} runs shed by judge limits (counted as failed)" if shed else "")
    )
    if breaches:
        lines.append(f"THRESHOLD BREACHED: {', '.join(sorted(breaches))}")
    return "\n".join(lines)


class Progress:
    """A progress bar with ETA on a terminal; plain lines (every 10 %) otherwise. Writes to ``out``."""

    def __init__(self, out: TextIO, *, tty: bool | None = None, width: int = 30) -> None:
        self._out = out
        self._tty = out.isatty() if tty is None else tty
        self._width = width
        self._started = time.monotonic()
        self._last_decile = -1

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self._started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("nan")
        eta_text = f"ETA {eta:.0f}s" if math.isfinite(eta) else "ETA ?"
        if self._tty:
            filled = int(self._width * done / total) if total else self._width
            bar = "#" * filled + "." * (self._width - filled)
            end = "\n" if done >= total else ""
            self._out.write(f"\r[{bar}] {done}/{total} runs {elapsed:.0f}s {eta_text} ")
            self._out.write(end)
            self._out.flush()
            return
        decile = (10 * done) // total if total else 10
        if decile > self._last_decile or done == total:
            self._last_decile = decile
            self._out.write(f"progress: {done}/{total} runs ({100 * done // max(total, 1)}%), {eta_text}\n")
            self._out.flush()


def stand_in_settings(settings: Settings, url: str) -> Settings:
    """Every judge pointed at the local stand-in judge server (keyword heuristic, not a language model)."""
    from sidecar.demo import STAND_IN_MODEL

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
    settings: Settings,
    items: Sequence[EvalItem],
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
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The ``eval`` command. 0: within thresholds; 1: a threshold breached; 2: invalid input."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        settings = load_eval_settings(config)
        from sidecar.runtime.scorer_factory import build_scorers

        build_scorers(settings)  # fail before scoring anything
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
        items = load_dataset(dataset)
        if concurrency <= 0:
            raise EvalError("--concurrency must be > 0")
    except EvalError as exc:
        print(f"eval: {exc}", file=err)
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
    print(render_report(report), file=out)
    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            count = write_results(report, fh)
        print(f"wrote {count} results to {output}", file=out)
    return report.exit_code
