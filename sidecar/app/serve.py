"""``scoring-sidecar run``: the service assembled from settings, its metrics served, a clean stop on SIGTERM
within ``runtime.shutdown_timeout_s`` (kept by a watchdog thread, ``sidecar.app.lifecycle``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

from exporters import session_turns, topic_publisher
from exporters.http_server import MetricsServer
from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import Assembly, assemble
from sidecar.app.intake_log import IntakeTally, log_intake
from sidecar.app.lifecycle import StopWatchdog
from sidecar.core.observers import ServiceObserver
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.agent_labels import AgentLabels
from sidecar.runtime.canary import CanaryPlan, JudgeCanary
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.engine import Engine
from sidecar.runtime.service import ScoringService
from sidecar.runtime.signals import DEFAULT_STOP_SIGNALS, stop_on_signals
from sidecar.runtime.sources import RecordSource
from sidecar.runtime.stages import build_stages, facts_of
from sidecar.runtime.startup import listen_failure
from sidecar.runtime.stopping import cancel_and_wait
from sidecar.settings import Settings

__all__ = ["ingest_for", "kept_resource_attributes", "kept_span_attributes", "run_service", "serve", "service_for"]

log = logging.getLogger(__name__)


def tune_gc() -> None:
    """Long-running asyncio services allocate many short-lived objects per request: collect the young
    generation less often, and move what start-up built out of the collector's way."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


async def run_service(
    settings: Settings,
    stop: asyncio.Event,
    *,
    metrics: SidecarMetrics | None = None,
    metrics_socket: str | None = None,
    observers: Sequence[ServiceObserver] = (),
    watchdog: StopWatchdog | None = None,
) -> None:
    """Run until ``stop`` is set; returns after draining, flushing, committing and leaving the group, within
    ``runtime.shutdown_timeout_s`` of the stop.

    ``metrics_socket``: serve ``/metrics``, ``/healthz`` and ``/readyz`` on this Unix socket instead of the
    configured host and port (a worker process, read by its supervisor). ``observers`` listen to the
    service beside the metrics (the demo's summary). ``watchdog``: told what the service is doing.
    """
    tally = IntakeTally()
    assembly = assemble(settings, metrics=metrics or SidecarMetrics(), observers=(*observers, tally), sinks=True)
    runtime = settings.runtime
    service = service_for(settings, assembly)
    _resume_judges_on(signal.SIGUSR1, assembly)
    if watchdog is not None:
        watchdog.phase_source = lambda: service.stop_phase
    server: MetricsServer | None = None
    intake: asyncio.Task[None] | None = None
    canaries: asyncio.Task[None] | None = None
    try:
        server = await _metrics_server(settings, assembly, service, metrics_socket)
        if runtime.intake_log_interval_s > 0:
            intake = asyncio.create_task(log_intake(tally, runtime.intake_log_interval_s, stop), name="intake log")
        canary = _canary(settings, assembly)
        if canary is not None:
            canaries = asyncio.create_task(canary.run(stop), name="judge canary")
        tune_gc()
        await service.run(stop)
    finally:
        if watchdog is not None:
            watchdog.phase_source = None
            watchdog.phase = "closing the metrics server and the judge clients"
        if intake is not None:
            intake.cancel()
        if canaries is not None:
            await cancel_and_wait(canaries)
        if server is not None:
            await server.stop()
        await assembly.aclose()


def _canary(settings: Settings, assembly: Assembly) -> JudgeCanary | None:
    """The judge canary of the scorers that configure one (docs/feedback.md), through their bound judges."""
    plans = []
    by_id = {configured.scorer.id: configured for configured in assembly.scorers}
    for scorer in settings.scorers:
        canary = scorer.canary
        if canary is None:
            continue
        plans.append(
            CanaryPlan(by_id[scorer.id], tuple(canary.items()), canary.every_s, canary.agree_within, canary.baseline)
        )
        if assembly.metrics is not None:
            assembly.metrics.set_canary_bounds(scorer.id, canary.min_agreement, canary.max_drift)
    if not plans:
        return None
    return JudgeCanary(plans, assembly.observer, timeout_s=settings.runtime.run_timeout_s)


def ingest_for(settings: Settings, scorers: Sequence[ConfiguredScorer]) -> IngestConfig:
    """What ingest reads and keeps, for the configured scorers and exporters."""
    kafka = settings.kafka
    return kafka.ingest_config(
        kafka.topics[0],
        resource_attributes=kept_resource_attributes(settings, scorers),
        span_attributes=kept_span_attributes(scorers),
        versions=settings.versions.version_attributes(),
    )


def service_for(
    settings: Settings, assembly: Assembly, *, group_id: str | None = None, source: RecordSource | None = None
) -> ScoringService:
    """The service ``settings`` and ``assembly`` describe: ``run``'s (its group subscription), or another command's
    over its own record source and consumer group (``backfill``). The engine and the stages over it are built here
    and handed to the service."""
    kafka = settings.kafka
    runtime = settings.runtime
    ingest = ingest_for(settings, assembly.scorers)
    if source is not None:
        # Another command's own source reads the traces topic only (a backfill's window): no logs topic to join.
        ingest = ingest.model_copy(update={"log_topics": frozenset()})
    engine = Engine.build(
        assembly.sinks,
        observer=assembly.observer,
        limits=runtime.limits(max_poll_records=kafka.max_poll_records, startup_timeout_s=kafka.startup_timeout_s),
        agent_labels=AgentLabels(runtime.max_agent_labels, runtime.agent_labels, observer=assembly.observer),
    )
    dead_letters = DeadLetterPublisher(
        kafka.bootstrap_servers_str,
        ingest.dead_letter_topic,
        encoding=ingest.encoding,
        producer_options=kafka.producer_options(),
        max_request_size=kafka.max_request_size,
        observer=assembly.observer,
    )
    stages = build_stages(
        assembly.scorers,
        engine,
        dead_letters=dead_letters,
        ingest=ingest,
        sessions=settings.sessions.limits() if settings.sessions is not None else None,
        turn_topic=_turn_topic(settings, assembly),
        feedback=settings.feedback.limits(settings.exporters.kafka_scores.topic) if settings.feedback else None,
        feedback_topics=_feedback_topics(settings, assembly),
    )
    return ScoringService(
        engine=engine,
        stages=stages,
        ingest=ingest,
        dead_letters=dead_letters,
        bootstrap_servers=kafka.bootstrap_servers_str,
        group_id=group_id or kafka.group_id,
        topics=(*kafka.topics, *kafka.log_topics),
        publishers=assembly.publishers,
        consumer_options=kafka.consumer_options(),
        producer_options=kafka.producer_options(),
        readiness_checks=(assembly.judges_holding, assembly.exporters_refused),
        key_sampling=kafka.key_sampling,
        source=source,
    )


def _turn_topic(settings: Settings, assembly: Assembly) -> session_turns.SessionTurnPublisher | None:
    """The conversations' internal topic's publisher, when a scorer's stage reads conversations."""
    sessions = settings.sessions
    if sessions is None or not any(facts_of(configured).unit == "conversation" for configured in assembly.scorers):
        return None
    kafka = settings.kafka
    topic = session_turns.SessionTurnPublisher(
        kafka.bootstrap_servers_str, sessions.topic, kafka.producer_options(), observer=assembly.observer
    )
    if assembly.metrics is not None:
        assembly.metrics.register_exporter(
            topic.name, lambda: topic.outstanding, drop_reasons=session_turns.DROP_REASONS
        )
    return topic


def _feedback_topics(
    settings: Settings, assembly: Assembly
) -> tuple[topic_publisher.TopicPublisher, topic_publisher.TopicPublisher] | None:
    """The feedback join's writers: its compacted state topic (partition p keeps lane p) and the pairs' topic."""
    feedback = settings.feedback
    if feedback is None:
        return None
    kafka = settings.kafka
    limits = feedback.limits(settings.exporters.kafka_scores.topic)
    bootstrap, options, observer = kafka.bootstrap_servers_str, kafka.producer_options(), assembly.observer
    state = topic_publisher.TopicPublisher(
        "feedback_state", bootstrap, limits.state, options,
        what="feedback state", partitioner=topic_publisher.PartitionNumber(), observer=observer,
    )  # fmt: skip
    pairs = topic_publisher.TopicPublisher("feedback_pairs", bootstrap, limits.pairs, options, what="feedback pair",
                                           observer=observer)  # fmt: skip
    metrics = assembly.metrics
    if metrics is not None:
        for writer in (state, pairs):
            metrics.register_exporter(writer.name, _pending_of(writer), drop_reasons=topic_publisher.DROP_REASONS)
        for configured in assembly.scorers:
            metrics.set_agreement_floor(configured.scorer.id, limits.floor_of(configured.scorer.id))
    return state, pairs


def _pending_of(writer: topic_publisher.TopicPublisher) -> Callable[[], int]:
    return lambda: writer.outstanding


def kept_resource_attributes(settings: Settings, scorers: Sequence[ConfiguredScorer]) -> frozenset[str]:
    """What ingest keeps of the scored span's resource: what the exporters that are on read of it, each declared
    with its exporter (what OTLP copies, the environment Langfuse and Datadog file a score under), and what the
    configured scorers read (the keys judges written in YAML name)."""
    read = (name for kind, block in settings.exporters.declared() for name in kind.kept_resource_attributes(block))
    return frozenset(read).union(*(configured.facts.resource_attributes for configured in scorers))


def kept_span_attributes(scorers: Sequence[ConfiguredScorer]) -> frozenset[str]:
    """What ingest keeps of the scored span's own attributes: what the configured scorers read (usually none)."""
    return frozenset().union(*(configured.facts.span_attributes for configured in scorers))


async def _metrics_server(
    settings: Settings, assembly: Assembly, service: ScoringService, metrics_socket: str | None
) -> MetricsServer | None:
    assert assembly.metrics is not None
    registry = assembly.metrics.registry
    if metrics_socket is not None:
        return await MetricsServer(registry, unix_path=metrics_socket, readiness=service.readiness).start()
    prometheus = settings.exporters.prometheus
    if not prometheus.enabled:
        return None
    server = MetricsServer(registry, host=prometheus.host, port=prometheus.port, readiness=service.readiness)
    try:
        await server.start()
    except OSError as exc:
        raise listen_failure(prometheus.host, prometheus.port, exc) from exc
    service.metrics_url = f"{server.url}/metrics"
    log.info("metrics on http://%s:%d/metrics", prometheus.host, server.port)
    return server


def _resume_judges_on(signum: signal.Signals, assembly: Assembly) -> None:
    """An operator's way to lift a pause (401/402/403/404) without waiting for the re-check call."""

    def resume() -> None:
        log.info("%s: resuming every judge", signum.name)
        assembly.resume_judges()

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signum, resume)


def _stop_when_parent_exits(loop: asyncio.AbstractEventLoop, watchdog: StopWatchdog) -> None:
    """A worker's stdin is a pipe its supervisor never writes: end of file means the supervisor is gone
    (even killed with SIGKILL), and the worker stops as on SIGTERM instead of living on as an orphan. The
    watchdog's thread notices the same by polling the parent pid, when this loop cannot."""
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
            watchdog.supervisor_gone("its stdin pipe closed")

    loop.add_reader(fd, readable)


async def _arm_when_stopping(stop: asyncio.Event, watchdog: StopWatchdog) -> None:
    await stop.wait()
    watchdog.arm("the stop was asked for")


def serve(
    settings: Settings,
    *,
    signals: Sequence[signal.Signals] = DEFAULT_STOP_SIGNALS,
    metrics_socket: str | None = None,
    supervisor_pid: int | None = None,
) -> int:
    """Blocking entry point: SIGTERM/SIGINT stop fetching, drain, flush, commit, leave the group, exit 0,
    within ``runtime.shutdown_timeout_s``; a stop that overruns it (+ ``STOP_GRACE_S``) is ended by the
    watchdog with ``EXIT_STOP_OVERRUN`` (3).

    A worker process (``supervisor_pid``: its supervisor) also stops when its supervisor exits.
    """
    watchdog = StopWatchdog(settings.runtime.shutdown_timeout_s, parent_pid=supervisor_pid)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = stop_on_signals(signals)
        # Until the judges exist (run_service installs the resume handler), SIGUSR1 must not end the process.
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        watchdog.on_parent_gone = lambda: loop.call_soon_threadsafe(stop.set)
        if supervisor_pid is not None:
            _stop_when_parent_exits(loop, watchdog)
        arming = asyncio.create_task(_arm_when_stopping(stop, watchdog))
        watchdog.start()
        log.info(
            "scoring-sidecar starting: topics=%s group=%s scorers=%s",
            ",".join(settings.kafka.topics),
            settings.kafka.group_id,
            ",".join(s.id for s in settings.scorers),
        )
        try:
            await run_service(settings, stop, metrics_socket=metrics_socket, watchdog=watchdog)
        finally:
            arming.cancel()
            watchdog.arm("the service ended")  # an error too: exiting the interpreter is bounded as well
            watchdog.phase = "exiting (waiting for the interpreter's threads)"
        log.info("scoring-sidecar stopped")

    asyncio.run(main())
    return 0
