"""``scoring-sidecar demo``: the embedded broker, synthetic traffic, the real service and a live table."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

from sidecar.demo.config import (
    COMPACTED,
    CONVERSATION_EVERY,
    DEAD_LETTER_TOPIC,
    DEFAULT_REAL_JUDGE,
    DEMO_SCORERS,
    FEEDBACK_STATE_TOPIC,
    FEEDBACK_TOPIC,
    FEEDBACK_TOPICS,
    SCORES_TOPIC,
    SESSIONS_TOPIC,
    SPANS_TOPIC,
    DemoOptions,
    demo_config,
    demo_settings,
    empty_key_notice,
    judge_config,
    serve_config_yaml,
    stand_in_judge_config,
    wants_real_judge,
    write_private,
)
from sidecar.demo.metrics_port import port_problem, taken_port_line, wait_until_serving
from sidecar.demo.summary import DemoSummary, lower_is_better, render_summary
from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.embedded.canary import write_canary_dataset
from sidecar.embedded.conversations import ConversationTraffic
from sidecar.embedded.feedback import human_labels
from sidecar.embedded.heuristic_judge import STAND_IN_MODEL, STAND_IN_NOTICE, heuristic_reply
from sidecar.embedded.traffic import AGENTS, DEMO_ROLLOUT, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer

__all__ = [
    "DEFAULT_REAL_JUDGE",
    "STAND_IN_MODEL",
    "DemoOptions",
    "demo_config",
    "demo_settings",
    "records_on",
    "run_demo",
    "run_serve",
    "serve_config_yaml",
    "stand_in_judge_config",
    "wants_real_judge",
]

# The demo's own consumer (its count of score records) starts on the embedded broker, which is up by then.
_BROKER_START_S = 30.0


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _rollout_line() -> str:
    """What the demo's release does, and where to watch it (docs/versions.md)."""
    r = DEMO_ROLLOUT
    return (
        f"release: {r.agent} {r.version} beside its first version from trace {r.after} on ({r.share:.0%} of its "
        "runs), worse on tool-call-accuracy only: watch scoring_sidecar_version_delta and _verdict"
    )


async def _produce(
    bootstrap: str,
    stop: asyncio.Event,
    *,
    rate: float,
    max_records: int,
    seed: int,
    counter: list[int],
    out: TextIO,
) -> None:
    from aiokafka import AIOKafkaProducer

    generator = TrafficGenerator(seed=seed, rollout=DEMO_ROLLOUT)
    conversations = ConversationTraffic(seed=seed)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    period = 1.0 / rate if rate > 0 else 0.0
    next_at = time.monotonic()
    try:
        while not stop.is_set() and counter[0] < max_records:
            turn = counter[0] % CONVERSATION_EVERY == CONVERSATION_EVERY - 1
            trace = conversations.turn() if turn else generator.trace()
            await producer.send(SPANS_TOPIC, trace.request.SerializeToString(), key=trace.key)
            if not turn:  # a reviewer labels some runs: their labels wait in the feedback join for the scores
                for label in human_labels(trace, counter[0]):
                    await producer.send(FEEDBACK_TOPIC, json.dumps(label).encode(), key=trace.key)
            counter[0] += 1
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            else:
                next_at = time.monotonic()  # fell behind: do not burst to catch up
        if counter[0] >= max_records:
            print(
                f"produced {max_records} traces (--max-records): the in-memory broker keeps every record, so "
                "production stops here; scoring goes on",
                file=out,
                flush=True,
            )
        await producer.flush()
    finally:
        await producer.stop()


async def _report(
    summary: DemoSummary,
    stop: asyncio.Event,
    *,
    interval_s: float,
    started: float,
    counter: list[int],
    judge_label: str,
    stand_in: bool,
    out: TextIO,
) -> None:
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
        if stop.is_set():
            return
        text = render_summary(
            summary,
            elapsed_s=time.monotonic() - started,
            produced=counter[0],
            judge_label=judge_label,
            stand_in=stand_in,
        )
        print(text + "\n", file=out, flush=True)


async def run_demo(options: DemoOptions, *, out: TextIO | None = None) -> int:
    """Run until ``options.duration_s`` passes or SIGINT/SIGTERM; 0 on a clean stop, 2 when the metrics port
    cannot be served, 1 when the service failed."""
    out = out or sys.stdout
    if options.metrics_port:
        problem = port_problem(options.metrics_host, options.metrics_port)
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
    started = time.monotonic()
    stand_in = not wants_real_judge(options)
    notice = empty_key_notice(options)
    if notice is not None:
        print(notice, file=out)
    with tempfile.TemporaryDirectory(prefix="scoring-sidecar-demo-") as workdir:
        return await _demo(options, out, stand_in=stand_in, started=started, workdir=workdir)


async def _demo(options: DemoOptions, out: TextIO, *, stand_in: bool, started: float, workdir: str) -> int:
    from sidecar.app.serve import run_service
    from sidecar.runtime.startup import StartupFailure

    stop_all = asyncio.Event()
    counter = [0]
    summary = DemoSummary()
    async with _embedded(stand_in, stop_all, out) as (broker, judge_server):
        judge, judge_label = judge_config(options, judge_server.url if judge_server is not None else None)
        if not stand_in:
            print(f"judge: {judge_label} (litellm; spend cap ${options.spend_cap_usd_per_hour}/h)", file=out)
        port = options.metrics_port or _free_port(options.metrics_host)
        settings = demo_settings(
            bootstrap=broker.bootstrap_servers,
            judge=judge,
            metrics_host=options.metrics_host,
            metrics_port=port,
            otlp_endpoint=options.otlp_endpoint,
            otlp_protocol=options.otlp_protocol,
            canary_dataset=write_canary_dataset(Path(workdir)),
        )
        summary.lower_is_better = lower_is_better(settings)
        agents = ", ".join(f"{a.name} ({a.convention})" for a in AGENTS)
        print(
            f"broker {broker.bootstrap_servers}; traffic: {options.rate:g} traces/s from {agents}, "
            f"at most {options.max_records} traces",
            file=out,
        )
        print(_rollout_line(), file=out)
        if options.otlp_endpoint:
            print(f"OTLP export: {options.otlp_endpoint} ({options.otlp_protocol})", file=out)
        ending = f"stops after {options.duration_s:g}s or on Ctrl-C" if options.duration_s else "Ctrl-C stops"
        print(
            f"scorers: {', '.join(DEMO_SCORERS)} (judge); tool-call-accuracy, completeness (code); {ending}",
            file=out,
            flush=True,
        )

        stop_service = asyncio.Event()
        stop_producer = asyncio.Event()
        service = asyncio.create_task(run_service(settings, stop_service, observers=[summary]), name="service")
        producer = _start_traffic(options, broker.bootstrap_servers, stop_producer, counter, out)
        reporter = asyncio.create_task(
            _report(
                summary,
                stop_all,
                interval_s=options.interval_s,
                started=started,
                counter=counter,
                judge_label=judge_label,
                stand_in=stand_in,
                out=out,
            ),
            name="reporter",
        )
        waiters: set[asyncio.Future[Any]] = {asyncio.ensure_future(stop_all.wait()), service}
        deadline = asyncio.ensure_future(asyncio.sleep(options.duration_s)) if options.duration_s else None
        if deadline is not None:
            waiters.add(deadline)
        # --duration counts from the start, not from when the service serves: the wait is inside it.
        base = f"http://{_connectable(options.metrics_host)}:{port}"
        if await wait_until_serving(f"{base}/healthz", service):
            print(f"metrics: {base}/metrics\n", file=out, flush=True)
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        stop_all.set()
        for waiter in waiters:
            if waiter is not service:
                waiter.cancel()
        print("stopping: producer, then the service (drain, flush, commit) ...", file=out, flush=True)
        stop_producer.set()
        with contextlib.suppress(Exception):
            await producer
        stop_service.set()
        try:
            await service
        except StartupFailure as exc:
            if isinstance(exc.__cause__, OSError):  # the port was taken between the check and the service's bind
                print(taken_port_line(options.metrics_host, port, exc.__cause__), file=sys.stderr)
                return 2
            print(f"demo: the service failed: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:
            print(f"demo: the service failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
        print(
            render_summary(
                summary,
                elapsed_s=time.monotonic() - started,
                produced=counter[0],
                judge_label=judge_label,
                stand_in=stand_in,
                final=True,
            ),
            file=out,
            flush=True,
        )
        if stand_in:
            print("(scores above come from the stand-in heuristic judge, not a language model)", file=out)
        return 0


def runnable_command() -> str:
    """``scoring-sidecar`` as this shell can run it: the bare name when the PATH finds this very program, else
    the path it was started by (``.venv/bin/scoring-sidecar`` from a README command, with no venv activated)."""
    started_by = sys.argv[0]
    script = (
        started_by
        if Path(started_by).name == "scoring-sidecar"
        else str(Path(sys.executable).parent / "scoring-sidecar")
    )
    if not Path(script).exists():
        return "scoring-sidecar"
    found = shutil.which("scoring-sidecar")
    if found is not None and Path(found).resolve() == Path(script).resolve():
        return "scoring-sidecar"
    return script


def _connectable(host: str) -> str:
    """Where to reach a server bound to ``host`` from this machine (a wildcard address is not one)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _start_traffic(
    options: DemoOptions, bootstrap: str, stop: asyncio.Event, counter: list[int], out: TextIO
) -> asyncio.Task[None]:
    """The synthetic agent traces, at ``options.rate`` until ``stop`` or ``options.max_records``."""
    traffic = _produce(
        bootstrap, stop, rate=options.rate, max_records=options.max_records, seed=options.seed, counter=counter, out=out
    )
    return asyncio.create_task(traffic, name="producer")


@contextlib.asynccontextmanager
async def _embedded(
    stand_in: bool, stop: asyncio.Event, out: TextIO
) -> AsyncIterator[tuple[EmbeddedBroker, JudgeServer | None]]:
    """The demo's own services: the in-memory broker with its topics and, unless a real judge is asked for,
    the stand-in judge; SIGINT and SIGTERM set ``stop`` while they run."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    judge_server: JudgeServer | None = None
    broker = EmbeddedBroker()
    try:
        print("starting the embedded broker (Tansu, in memory) ...", file=out, flush=True)
        await broker.start_async()
        await create_topics(
            broker.bootstrap_servers,
            {SPANS_TOPIC: 3, SCORES_TOPIC: 3, DEAD_LETTER_TOPIC: 1, SESSIONS_TOPIC: 3, **FEEDBACK_TOPICS},
            configs={SESSIONS_TOPIC: COMPACTED, FEEDBACK_STATE_TOPIC: {"cleanup.policy": "compact"}},
        )
        if stand_in:
            judge_server = await JudgeServer(heuristic_reply, record=False).start()
            print(STAND_IN_NOTICE, file=out, flush=True)
        yield broker, judge_server
    finally:
        if judge_server is not None:
            await judge_server.stop()
        await broker.stop_async()
        for sig in installed:
            loop.remove_signal_handler(sig)


async def records_on(consumer: Any, topic: str) -> int:
    """The records ``topic`` holds now (the score records, for ``demo --serve``): each partition's end, read as
    Tansu needs it (``end_offsets()`` alone falls short of it), less its first offset. ``consumer`` has no group."""
    from sidecar.runtime.sources import topic_partitions
    from sidecar.runtime.tansu import read_log_ends

    partitions = topic_partitions(consumer, [topic])
    starts = await consumer.beginning_offsets(partitions) if partitions else {}
    ends = await read_log_ends(consumer, partitions, starts)
    return sum(ends[tp] - starts[tp] for tp in partitions)


async def run_serve(options: DemoOptions, config_path: Path, *, out: TextIO | None = None) -> int:
    """``demo --serve``: the embedded broker, the stand-in judge (unless a real one is asked for) and the
    synthetic traffic, without the in-process service, so ``scoring-sidecar run`` can be tried against them
    from another terminal with the configuration written to ``config_path``. 0 on a clean stop."""
    from sidecar.runtime.clients import start_assigned_consumer

    out = out or sys.stdout
    stop = asyncio.Event()
    counter = [0]
    async with _embedded(not wants_real_judge(options), stop, out) as (broker, judge_server):
        judge_url = judge_server.url if judge_server is not None else None
        # Next to the configuration, by its absolute path: `run` may start from another directory.
        dataset = await asyncio.to_thread(lambda: write_canary_dataset(config_path.resolve().parent))
        text = serve_config_yaml(
            options, bootstrap=broker.bootstrap_servers, judge_url=judge_url, canary_dataset=dataset
        )
        await asyncio.to_thread(write_private, config_path, text)
        agents = ", ".join(a.name for a in AGENTS)
        print(f"broker: {broker.bootstrap_servers} (topics {SPANS_TOPIC}, {SCORES_TOPIC})", file=out)
        real = options.judge_model or DEFAULT_REAL_JUDGE
        print(
            f"judge URL: {judge_url}" if judge_url else f"judge: {real} (its provider's key from the environment)",
            file=out,
        )
        print(f"traffic: {options.rate:g} traces/s from {agents}, at most {options.max_records}", file=out)
        print(_rollout_line(), file=out)
        print(f"config: {config_path}", file=out)
        print(
            f"ready: in another terminal: {runnable_command()} run --config {config_path}\n"
            f"  then watch http://{options.metrics_host}:{options.metrics_port or 9464}/metrics "
            "(scoring_sidecar_scorer_runs_total); Ctrl-C here stops the broker and the judge\n",
            file=out,
            flush=True,
        )
        producer = _start_traffic(options, broker.bootstrap_servers, stop, counter, out)
        consumer = await start_assigned_consumer(
            broker.bootstrap_servers, {}, timeout_s=_BROKER_START_S, purpose="the demo's count of score records"
        )
        started = time.monotonic()
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), options.interval_s)
                if options.duration_s is not None and time.monotonic() - started >= options.duration_s:
                    stop.set()
                scores = await records_on(consumer, SCORES_TOPIC)
                waiting = "" if scores else f" (none yet: is `{runnable_command()} run` running with the config above?)"
                print(
                    f"{time.monotonic() - started:.0f}s: {counter[0]} traces produced, {scores} score records on "
                    f"{SCORES_TOPIC}{waiting}",
                    file=out,
                    flush=True,
                )
        finally:
            stop.set()
            await consumer.stop()
            with contextlib.suppress(Exception):
                await producer
        return 0
