"""The OTLP sink itself: the SDK providers and exporters, submit (with backpressure), flush and close."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from opentelemetry import trace
from opentelemetry._logs import Logger as APILogger
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from exporters.otlp.mapping import (
    EVENT_EVALUATION_RESULT,
    INSTRUMENTATION_SCOPE,
    JUDGE_SPAN_NAME,
    RUN_SPAN_NAME,
    SERVICE_NAME,
    SERVICE_VERSION,
    SIDECAR_INTERNAL,
    _error_type,
    _executions,
    _ScoreSpanIds,
    evaluation_attributes,
    judge_span_attributes,
    run_span_attributes,
    scored_span_context,
)
from exporters.otlp.queues import T, _ExportQueue, _QueueLogProcessor, _QueueSpanProcessor
from sidecar import __version__
from sidecar.core import ScoredRun, names

__all__ = ["OtlpProtocol", "OtlpTraceSink"]

# The package's logger: records are named exporters.otlp whichever of its modules logs.
log = logging.getLogger("exporters.otlp")

OtlpProtocol = Literal["grpc", "http/protobuf"]


def _http_base(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    for suffix in ("/v1/traces", "/v1/logs"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


class OtlpTraceSink:
    """A :class:`~sidecar.core.Sink` sending scorer-run spans (and evaluation log events) over OTLP.

    ``endpoint``: for ``grpc`` the receiver address (``http://host:4317`` is plaintext, ``https://`` TLS);
    for ``http/protobuf`` the base URL (``http://host:4318``; ``/v1/traces`` and ``/v1/logs`` are appended,
    a URL already ending in ``/v1/traces`` is accepted). ``headers`` go with every export (authentication:
    they are never logged). ``timeout_s`` bounds one export including the exporter's own retries.

    Uses its own ``TracerProvider`` and ``LoggerProvider`` (never the global ones) with the resource
    ``service.name=<service_name>``, so the sidecar's own telemetry is never mixed with these spans.
    """

    name = "otlp"

    def __init__(
        self,
        endpoint: str,
        protocol: OtlpProtocol = "grpc",
        headers: Mapping[str, str] | None = None,
        service_name: str = names.SIDECAR_SERVICE_NAME,
        timeout_s: float = 10,
        *,
        evaluation_logs: bool = True,
        compression: Literal["none", "gzip"] = "gzip",
        max_batch: int = 512,
        schedule_delay_s: float = 0.2,
        max_queued: int = 20_000,
    ) -> None:
        if protocol not in ("grpc", "http/protobuf"):
            raise ValueError(f"unsupported OTLP protocol {protocol!r} (grpc or http/protobuf)")
        self.endpoint = endpoint
        self.protocol: OtlpProtocol = protocol
        self._headers = dict(headers or {})
        self.service_name = service_name
        self.timeout_s = timeout_s
        self.evaluation_logs = evaluation_logs
        self._compression = compression
        self._max_batch = max_batch
        self._schedule_delay_s = schedule_delay_s
        self._max_queued = max_queued
        self._tracer_provider: TracerProvider | None = None
        self._span_ids = _ScoreSpanIds()
        self._room = asyncio.Event()
        self._logger_provider: LoggerProvider | None = None
        self._span_exporter: SpanExporter | None = None
        self._log_exporter: LogRecordExporter | None = None
        self._queues: list[_ExportQueue[ReadableSpan] | _ExportQueue[ReadableLogRecord]] = []
        self._tracer: trace.Tracer | None = None
        self._event_logger: APILogger | None = None
        self.submitted = 0
        self.skipped = 0  # runs whose target ids are invalid (nothing to attach to)

    def __repr__(self) -> str:  # no headers: they may hold credentials
        return f"OtlpTraceSink(endpoint={self.endpoint!r}, protocol={self.protocol!r})"

    # -- construction of the SDK pieces --

    def _resource(self) -> Resource:
        # Resource.create reads OTEL_RESOURCE_ATTRIBUTES/OTEL_SERVICE_NAME; the service name is forced back:
        # it is half of the loop guard.
        return Resource.create({SERVICE_VERSION: __version__}).merge(Resource({SERVICE_NAME: self.service_name}))

    def _make_exporters(self) -> tuple[SpanExporter, LogRecordExporter | None]:
        gzip = self._compression == "gzip"
        if self.protocol == "grpc":
            from grpc import Compression as GrpcCompression  # type: ignore[import-untyped]
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

            grpc_headers = {k.lower(): v for k, v in self._headers.items()}  # gRPC metadata keys are lowercase
            grpc_compression = GrpcCompression.Gzip if gzip else GrpcCompression.NoCompression
            spans: SpanExporter = GrpcSpanExporter(
                endpoint=self.endpoint, headers=grpc_headers, timeout=self.timeout_s, compression=grpc_compression
            )
            logs: LogRecordExporter | None = None
            if self.evaluation_logs:
                logs = GrpcLogExporter(
                    endpoint=self.endpoint, headers=grpc_headers, timeout=self.timeout_s, compression=grpc_compression
                )
            return spans, logs

        from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        base = _http_base(self.endpoint)
        http_compression = HttpCompression.Gzip if gzip else HttpCompression.NoCompression
        spans = HttpSpanExporter(
            endpoint=f"{base}/v1/traces", headers=self._headers, timeout=self.timeout_s, compression=http_compression
        )
        logs = None
        if self.evaluation_logs:
            logs = HttpLogExporter(
                endpoint=f"{base}/v1/logs", headers=self._headers, timeout=self.timeout_s, compression=http_compression
            )
        return spans, logs

    def _new_queue(self, name: str, export: Callable[[Sequence[T]], bool]) -> _ExportQueue[T]:
        return _ExportQueue(
            name,
            export,
            max_batch=self._max_batch,
            schedule_delay_s=self._schedule_delay_s,
            max_queued=self._max_queued,
        )

    async def start(self) -> None:
        if self._tracer_provider is not None:
            return
        resource = self._resource()
        span_exporter, log_exporter = self._make_exporters()

        def export_spans(batch: Sequence[ReadableSpan]) -> bool:
            return span_exporter.export(batch) == SpanExportResult.SUCCESS

        span_queue = self._new_queue("spans", export_spans)
        tracer_provider = TracerProvider(
            resource=resource, sampler=ALWAYS_ON, shutdown_on_exit=False, id_generator=self._span_ids
        )
        tracer_provider.add_span_processor(_QueueSpanProcessor(span_queue))
        self._queues = [span_queue]
        if log_exporter is not None:

            def export_logs(batch: Sequence[ReadableLogRecord]) -> bool:
                return log_exporter.export(batch) == LogRecordExportResult.SUCCESS

            log_queue = self._new_queue("logs", export_logs)
            logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
            logger_provider.add_log_record_processor(_QueueLogProcessor(log_queue))
            self._logger_provider = logger_provider
            self._event_logger = logger_provider.get_logger(INSTRUMENTATION_SCOPE, __version__)
            self._queues.append(log_queue)
        loop = asyncio.get_running_loop()
        room = self._room

        def on_room() -> None:
            loop.call_soon_threadsafe(room.set)

        for queue in self._queues:
            queue.on_room = on_room
            queue.start()
        self._span_exporter, self._log_exporter = span_exporter, log_exporter
        self._tracer_provider = tracer_provider
        self._tracer = tracer_provider.get_tracer(INSTRUMENTATION_SCOPE, __version__)

    # -- the Sink interface --

    async def submit(self, run: ScoredRun) -> None:
        """Record the run's spans and event; they are exported in the background. Never raises for the
        receiver; waits while the queues are full (the receiver is slow or down), which keeps the run in
        flight so that the runtime pauses its consumer instead of spans being dropped."""
        if self._tracer is None:
            raise RuntimeError("OtlpTraceSink is not started")
        scored = scored_span_context(run)
        if scored is None:
            self.skipped += 1
            log.error("scorer run %s has invalid target ids; no span exported", run.score_id)
            return
        await self._wait_for_room(1 + len(_executions(run)))
        if self._tracer is None:  # closed while waiting
            raise RuntimeError("OtlpTraceSink is closed")
        self.submitted += 1
        self._emit_spans(self._tracer, run, scored)
        if self._event_logger is not None:
            self._emit_log_event(self._event_logger, run, scored)

    async def _wait_for_room(self, spans: int) -> None:
        def fits() -> bool:  # the span queue takes the run's spans, the log queue (if any) one event
            return all(queue.has_room(spans if i == 0 else 1) for i, queue in enumerate(self._queues))

        while self._queues and not fits():
            self._room.clear()
            if fits():
                return  # an export made room between the check and the clear
            await self._room.wait()

    def _emit_spans(self, tracer: trace.Tracer, run: ScoredRun, scored: SpanContext) -> None:
        self._span_ids.seed(run.score_id)
        try:
            self._emit_seeded_spans(tracer, run, scored)
        finally:
            self._span_ids.seed(None)

    def _emit_seeded_spans(self, tracer: trace.Tracer, run: ScoredRun, scored: SpanContext) -> None:
        start = run.started_unix_nano
        end = max(run.finished_unix_nano, start)
        parent = trace.set_span_in_context(NonRecordingSpan(scored))
        span = tracer.start_span(
            RUN_SPAN_NAME.format(scorer_id=run.scorer_id),
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=run_span_attributes(run),
            start_time=start,
        )
        try:
            run_context = trace.set_span_in_context(span)
            cursor = start
            for step, execution in _executions(run):
                child_end = cursor + max(execution.duration_ms, 0) * 1_000_000
                child = tracer.start_span(
                    JUDGE_SPAN_NAME.format(model=execution.judge_model_id),
                    context=run_context,
                    kind=SpanKind.CLIENT,
                    attributes=judge_span_attributes(step, execution),
                    start_time=cursor,
                )
                if execution.status == "failed":
                    child.set_status(Status(StatusCode.ERROR, execution.error.name))
                child.end(end_time=child_end)
                cursor = child_end
            span.add_event(EVENT_EVALUATION_RESULT, attributes=evaluation_attributes(run), timestamp=end)
            if run.outcome == "failed":
                step_name = run.error.failed_step if run.error is not None else "unknown step"
                span.set_status(Status(StatusCode.ERROR, f"{step_name}: {_error_type(run)}"))
        finally:
            span.end(end_time=end)

    def _emit_log_event(self, logger: APILogger, run: ScoredRun, scored: SpanContext) -> None:
        attributes = {SIDECAR_INTERNAL: True, **evaluation_attributes(run)}
        logger.emit(
            timestamp=max(run.finished_unix_nano, run.started_unix_nano),
            observed_timestamp=time.time_ns(),
            context=trace.set_span_in_context(NonRecordingSpan(scored)),
            severity_number=SeverityNumber.ERROR if run.outcome == "failed" else SeverityNumber.INFO,
            attributes=attributes,
            event_name=EVENT_EVALUATION_RESULT,
        )

    async def flush(self, timeout_s: float) -> bool:
        """``True`` when every span and event submitted so far is exported; ``False`` when an export of
        any of them failed (they are kept and sent again by the next flush), on a timeout (still being
        exported), or when some were dropped since the last flush (queue full)."""
        if not self._queues:
            return True
        return await asyncio.to_thread(self._flush_sync, timeout_s)

    def _flush_sync(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        # Start every queue's flush first (they export in parallel), then wait for each: every queue is
        # flushed (its failures sent again) even when another one failed.
        targets = [(queue, queue.begin_flush()) for queue in self._queues]
        results = [queue.finish_flush(target, deadline - time.monotonic()) for queue, target in targets]
        return all(results)

    @property
    def outstanding(self) -> int:
        """Spans and log records submitted and not yet exported (queued, in flight or failed)."""
        return sum(queue.outstanding for queue in self._queues)

    @property
    def dropped(self) -> int:
        return sum(queue.dropped for queue in self._queues)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Export what is queued (one attempt, within ``timeout_s``) and shut down. Call ``flush`` first to
        know whether everything went out: what fails here is abandoned."""
        if self._tracer_provider is None:
            return
        await asyncio.to_thread(self._close_sync, timeout_s)

    def _close_sync(self, timeout_s: float) -> None:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        stopped = all([queue.stop_sync(deadline - time.monotonic()) for queue in self._queues])
        # Shutting the exporters down aborts their retry back-off, which lets a late worker finish.
        for exporter in (self._span_exporter, self._log_exporter):
            if exporter is not None:
                exporter.shutdown()
        if not stopped:
            log.warning("OTLP export workers still busy after %.1fs; abandoned", timeout_s)
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
        if self._logger_provider is not None:
            self._logger_provider.shutdown()
        self._tracer_provider = None
        self._logger_provider = None
        self._tracer = None
        self._event_logger = None
        self._span_exporter = None
        self._log_exporter = None
        self._queues = []
        self._room.set()  # submitters waiting for room: the sink is closed
