"""The OTLP sink itself: the SDK providers and exporters, submit (with backpressure), flush and close.

Resource: the sidecar's own (``service.name=scoring-sidecar``, the loop guard), plus the scored span's
resource attributes named in ``resource_attributes`` (a Phoenix project, a deployment environment), so that
backends which file traces by resource show the scores with their trace whatever arrives first. One SDK
provider pair per distinct copied set (a few: projects and environments), sharing the export queues.

Signals: traces are at-least-once, always. The evaluation log records (``events: log`` or ``both``) are
optional: a receiver that answers it has no logs signal (HTTP 404/405/415/501, gRPC UNIMPLEMENTED: Tempo,
Jaeger, Phoenix, Langfuse) turns them off until restart, with one ERROR line, and commits go on; with
``events: log`` the evaluation then goes out as a span event instead, so it is never exported nowhere. A
receiver that refuses the traces signal itself (HTTP 401/403, or no such signal: a wrong endpoint) keeps every
span, blocks commits and says so (``problem``, shown by ``/readyz``), until it takes them.

Delivery: one :class:`~exporters.delivery.DeliveryQueue` per signal (``exporters.otlp.queues``), exported
on a thread of its own. After a failed export the batch is sent once more and the receiver's answer read
(``exporters.otlp.signals``): a failure that may pass is kept and sent again by the next flush (the SDK
exporter already retried it within ``timeout_s``); a batch the receiver will never take (an HTTP 400, 413
or 422, gRPC ``INVALID_ARGUMENT``) is *rejected*, and the rule of every sink applies (docs/delivery.md): the
batch is split to find the culprit, which is dropped, counted (``rejected``) and set aside on the score
dead-letter topic as OTLP/JSON, so a permanent error no longer stalls commits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry import trace
from opentelemetry._logs import Logger as APILogger
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from exporters.delivery import (
    DeadLetter,
    DeliveryQueue,
    DeliveryRules,
    SetAsideLetter,
    Wording,
    is_checkpointed,
    no_dead_letters,
)
from exporters.otlp.mapping import (
    EVENT_EVALUATION_RESULT,
    INSTRUMENTATION_SCOPE,
    JUDGE_SPAN_NAME,
    RUN_SPAN_NAME,
    SCORE_ID,
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
from exporters.otlp.queues import QueueLogProcessor, QueueSpanProcessor, SignalExport
from exporters.otlp.signals import ReceiverSignals, Signal, SignalAnswer, http_base
from sidecar import __version__
from sidecar.core import ScoredRun, names
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ResourceValue

__all__ = ["DROP_REASONS", "EVENT_FORMS", "EventForm", "OtlpProtocol", "OtlpTraceSink"]

# The package's logger: records are named exporters.otlp whichever of its modules logs.
log = logging.getLogger("exporters.otlp")

OtlpProtocol = Literal["grpc", "http/protobuf"]
# How the gen_ai.evaluation.result event goes out: a span event on the scorer-run span, a log record correlated
# with the scored span, or both.
EventForm = Literal["span", "log", "both"]
EVENT_FORMS: Final[tuple[EventForm, ...]] = ("span", "log", "both")
# What an export of a signal says: None (exported), or the receiver's answer when asked after a failure.
_Exported = SignalAnswer | None
T = TypeVar("T")

DROP_REASONS: Final = ("rejected",)
# Distinct copied resources with providers of their own; the least recently used beyond are closed (their
# spans already queued are exported all the same).
MAX_RESOURCES: Final = 256
# The sidecar's own resource attributes: never copied from the scored span.
_OWN_RESOURCE: Final = frozenset({SERVICE_NAME, SERVICE_VERSION})


# The SDK's exporters log an ERROR line at every failed export. For the optional log records the sink says
# what matters itself (a receiver without logs, once; failures kept for the next flush, per flush), so the
# SDK's lines from the log-export worker thread are left out; those about traces stay.
_LOG_EXPORT_THREAD: Final = "otlp-export-logs"
_SDK_EXPORTER_LOGGERS: Final = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc._log_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
)


class _WithoutLogExportLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.threadName or "").startswith(_LOG_EXPORT_THREAD)


_LOG_EXPORT_FILTER: Final = _WithoutLogExportLines()


def _quiet_sdk_log_exports() -> None:
    for name in _SDK_EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if _LOG_EXPORT_FILTER not in logger.filters:
            logger.addFilter(_LOG_EXPORT_FILTER)


@dataclass(slots=True)
class _Emitters:
    """The SDK providers of one resource, and what the sink emits through them."""

    tracer_provider: TracerProvider
    tracer: trace.Tracer
    logger_provider: LoggerProvider | None
    event_logger: APILogger | None

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        if self.logger_provider is not None:
            self.logger_provider.shutdown()


class OtlpTraceSink:
    """A :class:`~sidecar.core.Sink` sending scorer-run spans (and evaluation log events) over OTLP.

    ``endpoint``: for ``grpc`` the receiver address (``http://host:4317`` is plaintext, ``https://`` TLS);
    for ``http/protobuf`` the base URL (``http://host:4318``; ``/v1/traces`` and ``/v1/logs`` are appended,
    a URL already ending in ``/v1/traces`` is accepted). ``headers`` go with every export (authentication:
    they are never logged). ``timeout_s`` bounds one export including the exporter's own retries.

    Uses its own ``TracerProvider`` and ``LoggerProvider`` (never the global ones) with the resource
    ``service.name=<service_name>``, so the sidecar's own telemetry is never mixed with these spans;
    ``resource_attributes`` names the attributes of the scored span's resource (as ingest kept them in
    ``SpanTarget.resource_attributes``) copied onto it. ``events``: the evaluation event as a span event
    (``span``), an OTLP log record correlated with the scored span (``log``: the receiver must have a logs
    signal; see the module doc), or ``both``.
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
        events: EventForm = "span",
        resource_attributes: Iterable[str] = (),
        compression: Literal["none", "gzip"] = "gzip",
        max_batch: int = 512,
        schedule_delay_s: float = 0.2,
        max_queued: int = 20_000,
        observer: ServiceObserver | None = None,
        set_aside: SetAsideLetter = no_dead_letters,
    ) -> None:
        if protocol not in ("grpc", "http/protobuf"):
            raise ValueError(f"unsupported OTLP protocol {protocol!r} (grpc or http/protobuf)")
        if events not in EVENT_FORMS:
            raise ValueError(f"unsupported evaluation event form {events!r} (span, log or both)")
        self.endpoint = endpoint
        self.protocol: OtlpProtocol = protocol
        self._headers = dict(headers or {})
        self.service_name = service_name
        self.timeout_s = timeout_s
        self.events: EventForm = events
        self.resource_attributes = frozenset(resource_attributes) - _OWN_RESOURCE
        self._compression = compression
        self._max_batch = max_batch
        self._schedule_delay_s = schedule_delay_s
        self._max_queued = max_queued
        self._set_aside = set_aside
        self._observer = observer
        self._span_ids = _ScoreSpanIds()
        self._base_resource: Resource | None = None
        self._emitters: OrderedDict[tuple[tuple[str, ResourceValue], ...], _Emitters] = OrderedDict()
        self._span_exporter: SpanExporter | None = None
        self._log_exporter: LogRecordExporter | None = None
        self._span_queue: DeliveryQueue[ReadableSpan] | None = None
        self._log_queue: DeliveryQueue[ReadableLogRecord] | None = None
        self._queues: list[DeliveryQueue[ReadableSpan] | DeliveryQueue[ReadableLogRecord]] = []
        self._transports: list[SignalExport[Any, _Exported]] = []
        self._started = False
        self._signals = ReceiverSignals(endpoint, protocol, self._headers, timeout_s, self._turn_off)
        self.submitted = 0
        self.skipped = 0  # runs whose target ids are invalid (nothing to attach to)

    def __repr__(self) -> str:  # no headers: they may hold credentials
        return f"OtlpTraceSink(endpoint={self.endpoint!r}, protocol={self.protocol!r})"

    # -- construction of the SDK pieces --

    def _resource(self) -> Resource:
        # Resource.create reads OTEL_RESOURCE_ATTRIBUTES/OTEL_SERVICE_NAME; the service name is forced back:
        # it is half of the loop guard.
        return Resource.create({SERVICE_VERSION: __version__}).merge(Resource({SERVICE_NAME: self.service_name}))

    def _copied(self, run: ScoredRun) -> tuple[tuple[str, ResourceValue], ...]:
        if not self.resource_attributes:
            return ()
        return tuple((k, v) for k, v in run.request.target.resource_attributes if k in self.resource_attributes)

    def _emitters_for(self, copied: tuple[tuple[str, ResourceValue], ...]) -> _Emitters:
        emitters = self._emitters.get(copied)
        if emitters is not None:
            self._emitters.move_to_end(copied)
            return emitters
        assert self._base_resource is not None and self._span_queue is not None
        resource = self._base_resource
        if copied:  # the scored trace's attributes, under the sidecar's own service name and version
            own = {k: v for k, v in resource.attributes.items() if k in _OWN_RESOURCE}
            resource = resource.merge(Resource(dict(copied))).merge(Resource(own))
        tracer_provider = TracerProvider(
            resource=resource, sampler=ALWAYS_ON, shutdown_on_exit=False, id_generator=self._span_ids
        )
        tracer_provider.add_span_processor(QueueSpanProcessor(self._span_queue))
        logger_provider: LoggerProvider | None = None
        event_logger: APILogger | None = None
        if self._log_queue is not None:
            logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
            logger_provider.add_log_record_processor(QueueLogProcessor(self._log_queue))
            event_logger = logger_provider.get_logger(INSTRUMENTATION_SCOPE, __version__)
        emitters = _Emitters(
            tracer_provider,
            tracer_provider.get_tracer(INSTRUMENTATION_SCOPE, __version__),
            logger_provider,
            event_logger,
        )
        self._emitters[copied] = emitters
        while len(self._emitters) > MAX_RESOURCES:
            _, evicted = self._emitters.popitem(last=False)
            evicted.shutdown()
        return emitters

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
            if self.sends_logs:
                logs = GrpcLogExporter(
                    endpoint=self.endpoint, headers=grpc_headers, timeout=self.timeout_s, compression=grpc_compression
                )
            return spans, logs

        from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        base = http_base(self.endpoint)
        http_compression = HttpCompression.Gzip if gzip else HttpCompression.NoCompression
        spans = HttpSpanExporter(
            endpoint=f"{base}/v1/traces", headers=self._headers, timeout=self.timeout_s, compression=http_compression
        )
        logs = None
        if self.sends_logs:
            logs = HttpLogExporter(
                endpoint=f"{base}/v1/logs", headers=self._headers, timeout=self.timeout_s, compression=http_compression
            )
        return spans, logs

    def _new_queue(
        self,
        signal: Signal,
        export: Callable[[Sequence[T]], _Exported],
        describe: Callable[[T], str],
        letter: Callable[[T], DeadLetter],
    ) -> DeliveryQueue[T]:
        transport: SignalExport[T, _Exported] = SignalExport(
            f"otlp-export-{signal}", export, lambda answer: self._signals.judge(signal, answer)
        )
        self._transports.append(transport)

        def set_aside(item: T, reason: str, detail: str) -> None:
            self._set_aside(letter(item), reason, detail)

        return DeliveryQueue(
            self.name,
            transport,
            DeliveryRules(
                batch_size=self._max_batch,
                max_pending=self._max_queued,
                linger_s=self._schedule_delay_s,
                retry_between_flushes=False,  # the SDK exporter retried within timeout_s already
                rejected="drop",
                drop_reasons=DROP_REASONS,
            ),
            wording=Wording("spans" if signal == "traces" else "evaluation log records", "exported"),
            describe=describe,
            log=log,
            observer=self._observer,
            set_aside=set_aside,
            set_aside_checkpointed=is_checkpointed(self._set_aside),
        )

    async def start(self) -> None:
        if self._started:
            return
        self._base_resource = self._resource()
        span_exporter, log_exporter = self._make_exporters()

        def export_spans(batch: Sequence[ReadableSpan]) -> _Exported:
            if span_exporter.export(batch) == SpanExportResult.SUCCESS:
                return None
            return self._signals.probe("traces", encode_spans(batch))

        self._span_queue = self._new_queue("traces", export_spans, _describe_span, _span_letter)
        self._queues = [self._span_queue]
        if log_exporter is not None:

            def export_logs(batch: Sequence[ReadableLogRecord]) -> _Exported:
                if log_exporter.export(batch) == LogRecordExportResult.SUCCESS:
                    return None
                return self._signals.probe("logs", encode_logs(batch))

            self._log_queue = self._new_queue("logs", export_logs, _describe_log, _log_letter)
            self._queues.append(self._log_queue)
            _quiet_sdk_log_exports()
        for queue in self._queues:
            queue.start()
        self._span_exporter, self._log_exporter = span_exporter, log_exporter
        self._started = True
        self._emitters_for(())  # the sidecar's own resource, for runs that copy nothing

    # -- what the receiver says of each signal (exporters.otlp.signals) --

    @property
    def sends_logs(self) -> bool:
        """Whether the evaluation goes out as OTLP log records (``events: log`` or ``both``)."""
        return self.events != "span"

    @property
    def problem(self) -> str | None:
        """Why the receiver will not take the scores' spans as things stand (it refused the traces signal),
        for ``/readyz``; ``None`` otherwise (a receiver that is down is reported by failed flushes)."""
        return self._signals.problem

    @property
    def disabled_signals(self) -> frozenset[str]:
        """Optional signals turned off because the receiver has none (``logs``)."""
        return self._signals.off

    def _turn_off(self, signal: Signal) -> int:
        queue = self._log_queue if signal == "logs" else None
        return queue.discard() if queue is not None else 0

    # -- the Sink interface --

    async def submit(self, run: ScoredRun) -> None:
        """Record the run's spans and event; they are exported in the background. Never raises for the
        receiver; waits while the queues are full (the receiver is slow or down), which keeps the run in
        flight so that the runtime pauses its consumer instead of spans being dropped."""
        if not self._started:
            raise RuntimeError("OtlpTraceSink is not started")
        scored = scored_span_context(run)
        if scored is None:
            self.skipped += 1
            log.error("scorer run %s has invalid target ids; no span exported", run.score_id)
            return
        await self._wait_for_room(1 + len(_executions(run)))
        if not self._started:  # closed while waiting
            raise RuntimeError("OtlpTraceSink is closed")
        self.submitted += 1
        emitters = self._emitters_for(self._copied(run))
        as_log = emitters.event_logger is not None and "logs" not in self._signals.off
        # A span event unless the log record alone was asked for and goes out (a receiver without logs: the
        # event falls back to the span, never nowhere).
        self._emit_spans(emitters.tracer, run, scored, span_event=self.events != "log" or not as_log)
        if as_log and emitters.event_logger is not None:
            self._emit_log_event(emitters.event_logger, run, scored)

    async def _wait_for_room(self, spans: int) -> None:
        """Until the span queue takes the run's spans and the log queue (if any) one record."""
        while True:
            needs = [(queue, spans if i == 0 else 1) for i, queue in enumerate(self._queues)]
            full = [(queue, n) for queue, n in needs if queue.running and not queue.has_room(n)]
            if not full:
                return
            queue, n = full[0]
            await queue.wait_for_room(n)

    def _emit_spans(self, tracer: trace.Tracer, run: ScoredRun, scored: SpanContext, *, span_event: bool) -> None:
        self._span_ids.seed(run.score_id)
        try:
            self._emit_seeded_spans(tracer, run, scored, span_event)
        finally:
            self._span_ids.seed(None)

    def _emit_seeded_spans(self, tracer: trace.Tracer, run: ScoredRun, scored: SpanContext, span_event: bool) -> None:
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
            if span_event:
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
        any of them failed (they are kept and sent again by the next flush) or on a timeout (still being
        exported). Every signal is flushed, in parallel, even when another one fails."""
        if not self._queues:
            return True
        return all(await asyncio.gather(*(queue.flush(timeout_s) for queue in self._queues)))

    @property
    def outstanding(self) -> int:
        """Spans and log records submitted and not yet exported (queued, in flight or failed)."""
        return sum(queue.outstanding for queue in self._queues)

    @property
    def dropped(self) -> int:
        return sum(sum(queue.dropped.values()) for queue in self._queues)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Export what is queued (one attempt, within ``timeout_s``) and shut down. Call ``flush`` first to
        know whether everything went out: what fails here is abandoned."""
        if not self._started:
            return
        self._started = False
        await asyncio.gather(*(queue.close(drain_s=max(timeout_s, 0.0)) for queue in self._queues))
        await asyncio.to_thread(self._shut_down_sdk)
        self._queues = []
        self._transports = []
        self._span_queue = None
        self._log_queue = None

    def _shut_down_sdk(self) -> None:
        # Shutting the exporters down aborts their retry back-off, which lets an abandoned export finish.
        for exporter in (self._span_exporter, self._log_exporter):
            if exporter is not None:
                exporter.shutdown()
        for transport in self._transports:
            transport.shutdown()
        for emitters in self._emitters.values():
            emitters.shutdown()
        self._emitters.clear()
        self._span_exporter = None
        self._log_exporter = None


# -- dead letters: one span or log record, as OTLP/JSON (replayable to /v1/traces, /v1/logs) --------------------


def _score_id_of(attributes: Mapping[str, Any] | None) -> str:
    value = (attributes or {}).get(SCORE_ID)
    return str(value) if value is not None else "unknown"


def _describe_span(span: ReadableSpan) -> str:
    return f"OTLP span {span.name!r} of score {_score_id_of(span.attributes)}"


def _describe_log(record: ReadableLogRecord) -> str:
    return f"OTLP evaluation log record of score {_score_id_of(record.log_record.attributes)}"


def _span_letter(span: ReadableSpan) -> DeadLetter:
    trace_id = format(span.context.trace_id, "032x") if span.context is not None else ""
    payload = json_format.MessageToJson(encode_spans([span]), indent=None).encode()
    return DeadLetter("otlp", _score_id_of(span.attributes), trace_id.encode(), payload)


def _log_letter(record: ReadableLogRecord) -> DeadLetter:
    trace_id = format(record.log_record.trace_id or 0, "032x")
    payload = json_format.MessageToJson(encode_logs([record]), indent=None).encode()
    return DeadLetter("otlp", _score_id_of(record.log_record.attributes), trace_id.encode(), payload)
