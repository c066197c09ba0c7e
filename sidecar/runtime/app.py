"""``scoring-sidecar run``: build the service from settings, serve metrics, stop cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from exporters.base import Sink
from exporters.http_server import MetricsServer
from exporters.kafka_scores import KafkaScoreSink
from exporters.otlp import OtlpTraceSink
from exporters.prometheus import PrometheusSink, SidecarMetrics
from sidecar.runtime.judge_gate import GateConfig, JudgeGate, install_gates
from sidecar.runtime.scorer_factory import build_scorers
from sidecar.runtime.service import ConfiguredScorer, RuntimeLimits, ScoringService
from sidecar.runtime.settings import Settings
from sidecar.runtime.signals import DEFAULT_STOP_SIGNALS, stop_on_signals
from sidecar.scoring.judge.client import close_judge_clients

__all__ = ["run_service", "serve"]

log = logging.getLogger(__name__)


def tune_gc() -> None:
    """Long-running asyncio services allocate many short-lived objects per request: collect the young
    generation less often, and move what start-up built out of the collector's way."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


def _gate_config(settings: Settings, name: str) -> GateConfig:
    judge = settings.judges[name]
    return GateConfig(
        max_concurrency=judge.max_concurrency,
        rpm=judge.rpm,
        tpm=judge.tpm,
        spend_cap_usd=judge.spend_cap_usd_per_hour,
        spend_window_s=3600.0,
        on_spend_cap=judge.on_spend_cap,
        failure_threshold=judge.circuit_breaker.failure_threshold,
        reset_after_s=judge.circuit_breaker.reset_after_s,
    )


async def run_service(
    settings: Settings,
    stop: asyncio.Event,
    *,
    metrics: SidecarMetrics | None = None,
    metrics_socket: str | None = None,
) -> None:
    """Run until ``stop`` is set; returns after draining, flushing and committing.

    ``metrics_socket``: serve ``/metrics``, ``/healthz`` and ``/readyz`` on this Unix socket instead of the
    configured host and port (a worker process, read by its supervisor).
    """
    metrics = metrics or SidecarMetrics()
    judge_models = settings.judge_models()
    label_of = {name: model.litellm_model for name, model in judge_models.items()}
    for name in judge_models:
        metrics.register_judge(label_of[name])
    gates = install_gates(
        {name: (model, _gate_config(settings, name)) for name, model in judge_models.items()},
        observers=(metrics,),
        on_state_change=metrics.set_judge_state,
        on_spend=metrics.set_judge_spend,
        on_hold=metrics.observe_judge_hold,
    )
    for gate in gates.values():
        metrics.track_judge_holds(gate.name, gate.held_runs, gate.oldest_hold_s)
    scorers = build_scorers(settings)
    configured = [
        ConfiguredScorer(
            scorer=scorers[s.id],
            selection=s.selection(),
            scale=s.scale,
            judge_model=label_of.get(s.judge) if s.judge else None,
        )
        for s in settings.scorers
    ]
    sinks: list[Sink] = [PrometheusSink(metrics)]
    exporters = settings.exporters
    kafka = settings.kafka
    if exporters.kafka_scores.enabled:
        sinks.append(
            KafkaScoreSink(
                kafka.bootstrap_servers_str,
                topic=exporters.kafka_scores.topic,
                producer_options=kafka.security.client_options(),
                enable_idempotence=kafka.enable_idempotence,
                max_pending=exporters.kafka_scores.max_pending_records,
            )
        )
    if exporters.otlp.is_enabled and exporters.otlp.endpoint:
        sinks.append(
            OtlpTraceSink(
                exporters.otlp.endpoint,
                protocol=exporters.otlp.protocol,
                headers=exporters.otlp.header_values(),
                timeout_s=exporters.otlp.timeout_s,
                evaluation_logs=exporters.otlp.evaluation_logs,
            )
        )
    runtime = settings.runtime
    service = ScoringService(
        bootstrap_servers=kafka.bootstrap_servers_str,
        group_id=kafka.group_id,
        ingest=kafka.ingest_config(kafka.topics[0]),
        topics=kafka.topics,
        scorers=configured,
        sinks=sinks,
        metrics=metrics,
        limits=RuntimeLimits(
            max_in_flight_runs=runtime.max_in_flight_runs,
            max_buffered_bytes=runtime.max_buffered_bytes,
            commit_interval_s=runtime.commit_interval_s,
            shutdown_timeout_s=runtime.shutdown_timeout_s,
            revoke_timeout_s=runtime.revoke_timeout_s,
            run_timeout_s=runtime.run_timeout_s,
            max_poll_records=kafka.max_poll_records,
        ),
        consumer_options=kafka.consumer_options(),
        producer_options=kafka.producer_options(),
        readiness_checks=(functools.partial(_judges_holding, list(gates.values())),),
    )
    _resume_judges_on(signal.SIGUSR1, list(gates.values()))
    server: MetricsServer | None = None
    if metrics_socket is not None:
        server = await MetricsServer(metrics.registry, unix_path=metrics_socket, readiness=service.readiness).start()
    elif exporters.prometheus.enabled:
        server = MetricsServer(
            metrics.registry,
            host=exporters.prometheus.host,
            port=exporters.prometheus.port,
            readiness=service.readiness,
        )
        await server.start()
        log.info("metrics on http://%s:%d/metrics", exporters.prometheus.host, server.port)
    tune_gc()
    try:
        await service.run(stop)
    finally:
        if server is not None:
            await server.stop()
        await close_judge_clients()


def _judges_holding(gates: list[JudgeGate]) -> str | None:
    """The readiness problem while a judge holds runs: records after them cannot be committed."""
    holding = [f"judge {g.name} {g.state.replace('_', '-')}, {g.held} runs held" for g in gates if g.held]
    return "; ".join(holding) or None


def _resume_judges_on(signum: signal.Signals, gates: list[JudgeGate]) -> None:
    """An operator's way to lift a pause (401/402/403/404) without waiting for the re-check call."""

    def resume() -> None:
        log.info("%s: resuming every judge", signum.name)
        for gate in gates:
            gate.resume()

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signum, resume)


def _stop_when_parent_exits(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """A worker's stdin is a pipe its supervisor never writes: end of file means the supervisor is gone
    (even killed with SIGKILL), and the worker stops as on SIGTERM instead of living on as an orphan."""
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            log.warning("the supervisor is gone: stopping")
            stop.set()

    loop.add_reader(fd, readable)


def serve(
    settings: Settings,
    *,
    signals: Sequence[signal.Signals] = DEFAULT_STOP_SIGNALS,
    metrics_socket: str | None = None,
    stop_with_parent: bool = False,
) -> int:
    """Blocking entry point: SIGTERM/SIGINT stop fetching, drain, flush, commit, exit 0.

    A worker process (``metrics_socket`` set by its supervisor) also stops when its supervisor exits.
    """

    async def main() -> None:
        stop = stop_on_signals(signals)
        if stop_with_parent:
            _stop_when_parent_exits(asyncio.get_running_loop(), stop)
        log.info(
            "scoring-sidecar starting: topics=%s group=%s scorers=%s",
            ",".join(settings.kafka.topics),
            settings.kafka.group_id,
            ",".join(s.id for s in settings.scorers),
        )
        await run_service(settings, stop, metrics_socket=metrics_socket)
        log.info("scoring-sidecar stopped cleanly")

    asyncio.run(main())
    return 0
