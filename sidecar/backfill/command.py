"""``scoring-sidecar backfill``: score a past window of the traces topic with chosen scorers, through the live
service's pipeline (the same assembly, gates, sinks and score ids as ``run``), then stop.

1. **Plan**: the window's offsets per partition from the broker's time index (:mod:`sidecar.backfill.plan`),
   refused with one line for a topic that does not exist or a window past retention.
2. **Estimate**: the ``validate --traffic`` estimator on the window's records (:mod:`sidecar.backfill.estimate`),
   then a confirmation unless ``--yes``.
3. **Score**: a :class:`~sidecar.runtime.service.ScoringService` on the window's partitions
   (:class:`~sidecar.runtime.sources.AssignedPartitions`) under the backfill's own consumer group
   (:func:`~sidecar.backfill.window.backfill_group_id`), which commits as ``run`` commits; it stops by itself at
   the window's end, after scoring what it still buffers, flushing and committing. Ctrl-C stops it the same way
   earlier; the same command again continues from the commit.
4. **Summary**: what was scored, the judge calls, tokens and spend against the estimate, and whether every
   partition is committed to the window's end (exit 0) or not (exit 1: run the same command again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from aiokafka import AIOKafkaConsumer, TopicPartition
from tqdm.contrib.logging import logging_redirect_tqdm

from exporters.http_server import MetricsServer
from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import Assembly, assemble
from sidecar.app.judge_keys import judges_without_key
from sidecar.app.serve import ingest_for, service_for
from sidecar.backfill.budget import JudgeBudget, backfill_settings
from sidecar.backfill.estimate import estimate_window, measure_calls, render_estimate
from sidecar.backfill.metrics import mode_labelled
from sidecar.backfill.plan import WindowPlan, plan_window
from sidecar.backfill.progress import WindowProgress
from sidecar.backfill.sample import read_sample
from sidecar.backfill.tally import BackfillTally
from sidecar.backfill.window import Window, WindowError, backfill_group_id
from sidecar.runtime.clients import start_assigned_consumer
from sidecar.runtime.service import ScoringService
from sidecar.runtime.signals import stop_on_signals
from sidecar.runtime.sources import AssignedPartitions, PartitionRange
from sidecar.runtime.startup import EXIT_INVALID, StartupFailure, listen_failure
from sidecar.settings import Settings

__all__ = ["SCORE_SOURCE", "BackfillOptions", "run_backfill", "start_consumer"]

log = logging.getLogger(__name__)

SCORE_SOURCE = "backfill"  # the score records' scoreSource; their ids are the live ones
_MEASURE_TIMEOUT_S = 120.0

Confirm = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class BackfillOptions:
    config: str  # the file, for messages
    start: str
    end: str | None
    scorers: tuple[str, ...] = ()
    yes: bool = False
    budget: JudgeBudget = field(default_factory=JudgeBudget)
    sample_records: int = 200  # records read to count runs per record
    sample_runs: int = 5  # runs per judged scorer scored to measure the tokens per call (0: assume call_tokens)
    call_tokens: tuple[int, int] = (1500, 300)
    metrics_port: int | None = None
    progress_bar: bool = False  # a bar (a terminal), else a line every 30 s


async def run_backfill(
    settings: Settings, options: BackfillOptions, *, confirm: Confirm, out: TextIO, err: TextIO
) -> int:
    """0: the window is scored and committed to its end; 1: stopped earlier (or not confirmed); raises
    :class:`StartupFailure` for the expected failures (2: options, topic, retention; 4: the broker)."""
    try:
        window = Window.parse(options.start, options.end)
    except WindowError as exc:
        raise StartupFailure(str(exc), EXIT_INVALID) from None
    chosen = backfill_settings(settings, options.scorers, options.budget, config=options.config)
    for problem in judges_without_key(chosen):
        log.warning("%s: its calls will be refused (401) and the backfill will wait on it", problem)
    tally = BackfillTally()
    metrics = SidecarMetrics()
    assembly = assemble(chosen, metrics=metrics, observers=(tally,), sinks=True, score_source=SCORE_SOURCE)
    try:
        return await _backfill(chosen, options, window, assembly, tally, confirm=confirm, out=out, err=err)
    finally:
        await assembly.aclose()


@dataclass(frozen=True, slots=True)
class _Prepared:
    plan: WindowPlan
    group: str
    left: int  # records of the window not done yet
    estimated_calls: float


async def _backfill(
    settings: Settings,
    options: BackfillOptions,
    window: Window,
    assembly: Assembly,
    tally: BackfillTally,
    *,
    confirm: Confirm,
    out: TextIO,
    err: TextIO,
) -> int:
    prepared = await _prepare(settings, options, window, assembly, tally, out=out)
    if prepared is None:
        return 0
    scorer_ids = ", ".join(c.scorer.id for c in assembly.scorers)
    if not options.yes and not confirm(f"score {prepared.left} records with {scorer_ids}? [y/N] "):
        print("backfill not started", file=out)
        return 1
    measured = tally.judge  # what the estimate's measurement spent, kept apart from the backfill's own
    started = time.monotonic()
    finished = await _score(settings, options, prepared.plan, prepared.group, assembly, tally, out=out, err=err)
    spent = tally.judge - measured
    runs = tally.runs
    print(
        f"backfill {'done' if finished else 'stopped'} in {time.monotonic() - started:.0f} s: {runs['scored']} runs "
        f"scored, {runs['failed']} failed, {runs['not_scorable']} not scorable, {runs['shed']} shed; "
        f"{spent.calls} judge calls (estimated {prepared.estimated_calls:.0f}), {spent.input_tokens} input + "
        f"{spent.output_tokens} output tokens, about {spent.usd:.4f} USD",
        file=out,
    )
    if not finished:
        print(
            f"the window is not finished: run the same command again to continue from consumer group {prepared.group}",
            file=out,
        )
        return 1
    return 0


async def _prepare(
    settings: Settings,
    options: BackfillOptions,
    window: Window,
    assembly: Assembly,
    tally: BackfillTally,
    *,
    out: TextIO,
) -> _Prepared | None:
    """The plan and the estimate, printed; None when nothing is left to score."""
    kafka = settings.kafka
    group = backfill_group_id(
        kafka.group_id, kafka.topics, window, [(c.scorer.id, c.scorer.fingerprint) for c in assembly.scorers]
    )
    ingest = ingest_for(settings, assembly.scorers)
    planner = await start_consumer(settings, group_id=None)
    try:
        plan = await plan_window(planner, kafka.topics, window, bootstrap=kafka.bootstrap_servers_str)
        left = _left(plan, await _committed(settings, group, plan))
        scorer_ids = ", ".join(c.scorer.id for c in assembly.scorers)
        print(f"backfill of {', '.join(kafka.topics)} from {window.describe()} with {scorer_ids}", file=out)
        print(f"consumer group {group}", file=out)
        for line in plan.describe():
            print(line, file=out)
        if left < plan.records:
            print(f"  resuming: {plan.records - left} records were done by an earlier run, {left} are left", file=out)
        if left == 0:
            done = "the window holds no records" if plan.records == 0 else "every record of the window is done"
            print(f"nothing to score: {done}", file=out)
            return None
        sample = await read_sample(planner, plan, ingest, assembly.scorers, max_records=options.sample_records)
    finally:
        await planner.stop()
    sizes = (
        await measure_calls(
            assembly.scorers, sample, tally, runs_per_scorer=options.sample_runs, timeout_s=_MEASURE_TIMEOUT_S
        )
        if options.sample_runs > 0
        else {}
    )
    scorers = {c.scorer.id: c.scorer for c in assembly.scorers}
    rows = estimate_window(settings, scorers, sample, left, sizes, assumed_tokens=options.call_tokens)
    for line in render_estimate(rows, sample, sizes, records=left, assumed_tokens=options.call_tokens):
        print(line, file=out)
    used = {s.judge for s in settings.scorers if s.judge is not None}
    for name, judge in settings.judges.items():
        if name not in used:
            continue
        cap = judge.spend_cap_usd_per_hour
        capped = f", spend cap {cap:g} USD/hour (then it waits)" if cap else ""
        print(f"  judge {name}: at most {judge.max_concurrency} calls in flight{capped}", file=out)
    out.flush()
    return _Prepared(plan, group, left, sum(r.calls for r in rows))


async def _score(
    settings: Settings,
    options: BackfillOptions,
    plan: WindowPlan,
    group: str,
    assembly: Assembly,
    tally: BackfillTally,
    *,
    out: TextIO,
    err: TextIO,
) -> bool:
    """Run the service over the window until it ends by itself or is stopped; whether every partition is
    committed to the window's end."""
    ranges = plan.ranges()

    async def resolve(consumer: AIOKafkaConsumer) -> dict[TopicPartition, PartitionRange]:
        return ranges

    source = AssignedPartitions(resolve, description=f"the window {plan.window.describe()} of {', '.join(plan.topics)}")
    service = service_for(settings, assembly, group_id=group, source=source)
    stop = stop_on_signals()
    server = await _metrics_server(settings, options, assembly, service, out)
    ended = asyncio.Event()
    progress = WindowProgress(plan, source, service.done_offsets, tally, out=err, bar=options.progress_bar)
    reporting = asyncio.create_task(progress.run(ended), name="backfill progress")
    try:
        with logging_redirect_tqdm() if options.progress_bar else contextlib.nullcontext():
            await service.run(stop)
            ended.set()
            await asyncio.wait({reporting}, timeout=2.0)
    finally:
        reporting.cancel()
        if server is not None:
            await server.stop()
    committed = await _committed(settings, group, plan)
    return all(committed.get(p.partition, p.start) >= p.end for p in plan.partitions if p.records)


async def _metrics_server(
    settings: Settings, options: BackfillOptions, assembly: Assembly, service: ScoringService, out: TextIO
) -> MetricsServer | None:
    if options.metrics_port is None or assembly.metrics is None:
        return None
    host = settings.exporters.prometheus.host
    server = MetricsServer(
        mode_labelled(assembly.metrics.registry), host=host, port=options.metrics_port, readiness=service.readiness
    )
    try:
        await server.start()
    except OSError as exc:
        advice = "pass backfill --metrics-port N (0: a free port), or leave it out: the backfill serves no metrics"
        raise listen_failure(host, options.metrics_port, exc, advice=advice) from exc
    service.metrics_url = f"{server.url}/metrics"
    print(f'metrics (mode="backfill") on {server.url}/metrics', file=out)
    return server


def _left(plan: WindowPlan, committed: dict[TopicPartition, int]) -> int:
    return sum(p.end - min(max(committed.get(p.partition, p.start), p.start), p.end) for p in plan.partitions)


async def start_consumer(settings: Settings, *, group_id: str | None, command: str = "backfill") -> AIOKafkaConsumer:
    """A consumer of the configured cluster (``group_id`` None: none joined, nothing committed); raises
    :class:`StartupFailure` (exit 4) with one line when the broker cannot be reached or refuses ``command``."""
    kafka = settings.kafka
    return await start_assigned_consumer(
        kafka.bootstrap_servers_str,
        kafka.consumer_options(),
        timeout_s=kafka.startup_timeout_s,
        purpose=f"the {command}",
        group_id=group_id,
    )


async def _committed(settings: Settings, group: str, plan: WindowPlan) -> dict[TopicPartition, int]:
    """What the backfill's group committed per partition (absent: nothing yet)."""
    consumer = await start_consumer(settings, group_id=group)
    try:
        found = {p.partition: await consumer.committed(p.partition) for p in plan.partitions}
    finally:
        await consumer.stop()
    return {tp: offset for tp, offset in found.items() if offset is not None}
