"""OTLP trace sink (SPEC §4 "Output → OTel"): scorer runs attached to the scored traces as spans.

For every finished run, in the scored trace:

* one span ``scorer run: '<scorer id>'`` (kind INTERNAL) whose parent is the scored span, rebuilt from the
  hex ids as a remote ``SpanContext`` marked SAMPLED (a span that reached us through OTLP was sampled, and
  Python's OTLP encoder leaves ``Span.flags`` empty, so the flag cannot be read from the wire). Its times
  are the run's; it carries the loop-guard marker ``scoring_sidecar.internal=true``, the scorer, score
  and run ids, the outcome, the scored agent, the evaluation name and score and the run's total
  *estimated* judge cost.
* one child span ``chat <judge model>`` (kind CLIENT) per judge execution, in step order, with the GenAI
  client attributes (operation ``chat``, provider, request model, token usage, ``error.type`` and status
  ERROR on a failed execution) and the cost attributes of the open proposal (``gen_ai.usage.cost.*``:
  source ``provider`` when the provider reported the cost, else ``local`` from the price-table estimate).
  The record keeps no start time per execution, only ``duration_ms``: children are laid out one after the
  other from the run's start.
* the ``gen_ai.evaluation.result`` event. The semantic conventions define it as a log-based event that
  SHOULD be parented to the evaluated span, which is not ours: a span event can only belong to a span we
  emit. So it is emitted twice: as an OTLP **log record** (``event_name = gen_ai.evaluation.result``) whose
  trace and span ids are the scored span's (the way pydantic-evals parents its evaluation events), sent to
  the same endpoint (``/v1/logs``, or the gRPC logs service); and as a **span event** on the
  ``scorer run`` span, for backends that show span events but do not join logs to traces. Turn the log
  record off (``evaluation_logs=False``) when the receiving pipeline has no logs pipeline: otherwise every
  log export fails and ``flush`` never confirms.

Event attributes: ``gen_ai.evaluation.name`` (the scorer name), ``gen_ai.evaluation.score.value`` (scored
runs only), ``gen_ai.evaluation.explanation`` (the reason; for a not-scorable run, why), ``error.type``
(failed runs: the cause's name). ``gen_ai.evaluation.score.label`` is left out: Mastra scorers produce a
number without a pass/fail threshold, and the convention wants a low-cardinality, documented label.

Outcomes: *failed* → status ERROR, ``error.type`` = the cause's name, no score (even one recovered before
the failure, SPEC §1); *not_scorable* → status UNSET, ``scoring_sidecar.not_scorable.reason``, no score.

Nothing from the conversation or the judge prompts is exported: no prompts, no raw judge output, no
messages (they can be large and are sensitive), and never an API key.

Delivery (``flush``, at-least-once as the runtime needs it). The SDK's ``BatchSpanProcessor`` drops a
batch whose export failed and its ``force_flush`` does not report export failures, so this module has its
own small processors feeding an export queue per signal, with one worker thread each: the SDK exporters
are synchronous (and retry with backoff within ``timeout_s``), so exports never run on the event loop.
A batch whose export failed is *kept* and exported again by the next ``flush``; ``flush`` returns ``True``
only when everything submitted before it was exported, so a runtime that commits after a ``True`` flush
never commits past a lost span, even if it calls ``flush`` again instead of rewinding. The queues are
bounded (``max_queued`` items per signal): ``submit`` waits for room, which keeps the run in flight so the
runtime pauses its consumer. Only items put past twice the bound (or after close) are dropped, counted,
and fail the next flush. Span ids of a run derive from its (deterministic) score id, so a redelivered run
re-exports the same spans with the same ids.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar

from opentelemetry import trace
from opentelemetry._logs import Logger as APILogger
from opentelemetry._logs import SeverityNumber
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context, attach, detach, set_value
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from sidecar import __version__
from sidecar.core import ScoredRun, names
from sidecar.scoring.types import STEP_NAMES, JudgeExecution, JudgeStepRecord, StepName

__all__ = [
    "OtlpProtocol",
    "OtlpTraceSink",
    "evaluation_attributes",
    "judge_span_attributes",
    "run_span_attributes",
    "scored_span_context",
]

log = logging.getLogger(__name__)

OtlpProtocol = Literal["grpc", "http/protobuf"]

# --- Attribute, event and span names (every name this module writes) -----------------------------------
SERVICE_NAME: Final = names.SERVICE_NAME
SERVICE_VERSION: Final = "service.version"
# Loop guard (on every span and log record we emit): the ingest side never scores these.
SIDECAR_INTERNAL: Final = names.SIDECAR_INTERNAL
# Ours, on the run span (and the evaluation event).
SCORER_ID: Final = "scoring_sidecar.scorer.id"
SCORER_NAME: Final = "scoring_sidecar.scorer.name"
SCORE_ID: Final = "scoring_sidecar.score.id"  # deterministic: same as the Kafka score record's scoreId
RUN_ID: Final = "scoring_sidecar.run.id"
RUN_OUTCOME: Final = "scoring_sidecar.run.outcome"  # scored | failed | not_scorable
RUN_FAILED_STEP: Final = "scoring_sidecar.run.failed_step"
NOT_SCORABLE_STEP: Final = "scoring_sidecar.not_scorable.step"
NOT_SCORABLE_REASON: Final = "scoring_sidecar.not_scorable.reason"
AGENT_NAME: Final = "scoring_sidecar.agent.name"  # the scored agent (not gen_ai.agent.name: we are not it)
JUDGE_EXECUTION_COUNT: Final = "scoring_sidecar.judge.execution_count"
JUDGE_ESTIMATED_COST_USD: Final = "scoring_sidecar.judge.estimated_cost_usd"  # sum over executions
# Ours, on the judge execution spans.
JUDGE_STEP: Final = "scoring_sidecar.judge.step"  # preprocess | analyze | generate_score | generate_reason
JUDGE_ATTEMPT_COUNT: Final = "scoring_sidecar.judge.attempt_count"
JUDGE_MODEL_CALL_COUNT: Final = "scoring_sidecar.judge.model_call_count"
# OTel GenAI semantic conventions (client spans).
GEN_AI_OPERATION_NAME: Final = names.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: Final = names.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: Final = names.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = names.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS: Final = names.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = names.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = names.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
ERROR_TYPE: Final = "error.type"
OP_CHAT: Final = names.OP_CHAT
# Cost attributes of the open GenAI proposal.
GEN_AI_USAGE_COST_AMOUNT: Final = "gen_ai.usage.cost.amount"
GEN_AI_USAGE_COST_CURRENCY: Final = "gen_ai.usage.cost.currency"
GEN_AI_USAGE_COST_SOURCE: Final = "gen_ai.usage.cost.source"
COST_SOURCE_PROVIDER: Final = "provider"
COST_SOURCE_LOCAL: Final = "local"
# OTel GenAI evaluation event.
EVENT_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"  # not written: see the module doc
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
# Span names.
RUN_SPAN_NAME: Final = "scorer run: '{scorer_id}'"
JUDGE_SPAN_NAME: Final = "chat {model}"

INSTRUMENTATION_SCOPE: Final = "scoring_sidecar.exporters.otlp"
MAX_EXPLANATION_CHARS: Final = 4096
_USD: Final = "USD"


# --- What a run becomes ----------------------------------------------------------------------------------


def _clip(text: str, limit: int = MAX_EXPLANATION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def evaluation_attributes(run: ScoredRun) -> dict[str, AttributeValue]:
    """Attributes of the ``gen_ai.evaluation.result`` event (span event and log record)."""
    attrs: dict[str, AttributeValue] = {GEN_AI_EVALUATION_NAME: run.scorer_name}
    result = run.result
    if run.outcome == "scored" and result is not None and result.score is not None and math.isfinite(result.score):
        attrs[GEN_AI_EVALUATION_SCORE_VALUE] = float(result.score)
        if result.reason:
            attrs[GEN_AI_EVALUATION_EXPLANATION] = _clip(result.reason)
    elif run.outcome == "not_scorable" and result is not None and result.not_scorable is not None:
        attrs[GEN_AI_EVALUATION_EXPLANATION] = _clip(result.not_scorable.reason)
    elif run.outcome == "failed":
        attrs[ERROR_TYPE] = _error_type(run)
    attrs[SCORE_ID] = run.score_id
    return attrs


def _error_type(run: ScoredRun) -> str:
    return run.error.cause_name if run.error is not None else "ScorerRunError"


def _executions(run: ScoredRun) -> list[tuple[StepName | None, JudgeExecution]]:
    """The run's judge executions in step order, with the step each belongs to."""
    judge = run.result.judge if run.result is not None else None
    if judge is None:
        return []
    out: list[tuple[StepName | None, JudgeExecution]] = []
    for step in STEP_NAMES:
        record: JudgeStepRecord | None = getattr(judge, step)
        if record is not None:
            out.extend((execution.step or step, execution) for execution in record.executions)
    return out


def run_span_attributes(run: ScoredRun) -> dict[str, AttributeValue]:
    """Attributes of the ``scorer run`` span."""
    target = run.request.target
    attrs: dict[str, AttributeValue] = {
        SIDECAR_INTERNAL: True,
        SCORER_ID: run.scorer_id,
        SCORER_NAME: run.scorer_name,
        SCORE_ID: run.score_id,
        RUN_OUTCOME: run.outcome,
        AGENT_NAME: target.agent_name or run.agent_label,
        GEN_AI_EVALUATION_NAME: run.scorer_name,
    }
    result = run.result
    if result is not None:
        attrs[RUN_ID] = result.run_id
    if run.outcome == "scored" and result is not None and result.score is not None and math.isfinite(result.score):
        attrs[GEN_AI_EVALUATION_SCORE_VALUE] = float(result.score)
    elif run.outcome == "not_scorable" and result is not None and result.not_scorable is not None:
        attrs[NOT_SCORABLE_STEP] = result.not_scorable.step
        attrs[NOT_SCORABLE_REASON] = _clip(result.not_scorable.reason)
    elif run.outcome == "failed":
        attrs[ERROR_TYPE] = _error_type(run)
        if run.error is not None:
            attrs[RUN_FAILED_STEP] = run.error.failed_step
    executions = _executions(run)
    attrs[JUDGE_EXECUTION_COUNT] = len(executions)
    estimates = [e.estimated_cost_usd for _, e in executions if e.estimated_cost_usd is not None]
    if estimates:
        attrs[JUDGE_ESTIMATED_COST_USD] = float(sum(estimates))
    return attrs


def judge_span_attributes(step: StepName | None, execution: JudgeExecution) -> dict[str, AttributeValue]:
    """GenAI client attributes of one judge execution (never its prompt or output)."""
    attrs: dict[str, AttributeValue] = {
        SIDECAR_INTERNAL: True,
        GEN_AI_OPERATION_NAME: OP_CHAT,
        GEN_AI_REQUEST_MODEL: execution.judge_model_id,
        JUDGE_ATTEMPT_COUNT: execution.attempt_count,
        JUDGE_MODEL_CALL_COUNT: execution.model_call_count,
    }
    if execution.judge_provider:
        attrs[GEN_AI_PROVIDER_NAME] = execution.judge_provider
    if step is not None:
        attrs[JUDGE_STEP] = step
    usage = execution.usage
    if usage is not None:
        for name, value in (
            (GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens),
            (GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens),
            (GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cached_input_tokens),
            (GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, usage.cache_creation_input_tokens),
            (GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, usage.reasoning_tokens),
        ):
            if value is not None:
                attrs[name] = int(value)
    provider_cost = execution.cost if execution.status == "success" else None
    if provider_cost is not None:
        attrs[GEN_AI_USAGE_COST_AMOUNT] = float(provider_cost.amount)
        attrs[GEN_AI_USAGE_COST_CURRENCY] = provider_cost.unit.upper()
        attrs[GEN_AI_USAGE_COST_SOURCE] = COST_SOURCE_PROVIDER
    elif execution.estimated_cost_usd is not None:
        attrs[GEN_AI_USAGE_COST_AMOUNT] = float(execution.estimated_cost_usd)
        attrs[GEN_AI_USAGE_COST_CURRENCY] = _USD
        attrs[GEN_AI_USAGE_COST_SOURCE] = COST_SOURCE_LOCAL
    if execution.status == "failed":
        attrs[ERROR_TYPE] = execution.error.name
        if execution.finish_reason:
            attrs[GEN_AI_RESPONSE_FINISH_REASONS] = (execution.finish_reason,)
    return attrs


def scored_span_context(run: ScoredRun) -> SpanContext | None:
    """The scored span as a remote, sampled parent; ``None`` when its ids are not valid."""
    target = run.request.target
    try:
        trace_id, span_id = int(target.trace_id, 16), int(target.span_id, 16)
    except ValueError:
        return None
    context = SpanContext(
        trace_id=trace_id, span_id=span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return context if context.is_valid else None


# --- Export queues: at-least-once flush on top of the SDK's synchronous exporters --------------------------

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Item(Generic[T]):
    seq: int
    value: T


class _ExportQueue(Generic[T]):
    """A bounded FIFO exported in batches by one worker thread, with failures kept for the next flush.

    Every item gets a sequence number. ``flush_sync`` puts failed items back in front, asks for an export
    now, waits until every item numbered up to the last one put before the call is no longer queued or
    being exported, and reports ``True`` only when none of them failed and nothing was dropped since the
    previous flush. Items keep their order: failed items are always older than queued ones.
    """

    def __init__(
        self,
        name: str,
        export: Callable[[Sequence[T]], bool],
        *,
        max_batch: int = 512,
        schedule_delay_s: float = 0.2,
        max_queued: int = 20_000,
    ) -> None:
        self.name = name
        self._export = export
        self._max_batch = max_batch
        self._delay = schedule_delay_s
        self._max_queued = max_queued
        self._cond = threading.Condition()
        self._queue: deque[_Item[T]] = deque()
        self._inflight: list[_Item[T]] = []
        self._failed: list[_Item[T]] = []
        self._next_seq = 0
        self._urgent = False
        self._stopping = False
        self._dropped_since_flush = 0
        self._thread: threading.Thread | None = None
        self.on_room: Callable[[], None] | None = None  # called from the worker after each export
        # Counters (items), for tests and metrics.
        self.exported = 0
        self.failed_exports = 0
        self.dropped = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"otlp-export-{self.name}", daemon=True)
            self._thread.start()

    @property
    def outstanding(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._inflight) + len(self._failed)

    def has_room(self, items: int) -> bool:
        """Whether ``items`` more fit (an empty queue takes any number: a run is never refused forever)."""
        with self._cond:
            held = len(self._queue) + len(self._failed)
            return held == 0 or held + items <= self._max_queued

    def put(self, value: T) -> None:
        with self._cond:
            # submit() waits for room below max_queued: this ceiling is the last resort, never the rule.
            if self._stopping or len(self._queue) + len(self._failed) >= 2 * self._max_queued:
                self.dropped += 1
                self._dropped_since_flush += 1
                if self._dropped_since_flush == 1:
                    log.warning("OTLP %s queue full or closed: dropping (counted; the next flush fails)", self.name)
                return
            self._next_seq += 1
            self._queue.append(_Item(self._next_seq, value))
            if len(self._queue) == 1 or len(self._queue) >= self._max_batch:
                self._cond.notify_all()

    def _pending_up_to(self, target: int) -> bool:
        return bool(self._queue and self._queue[0].seq <= target) or bool(
            self._inflight and self._inflight[0].seq <= target
        )

    def begin_flush(self) -> int:
        """Put failed items back in front and ask for an export now; returns the flush's target."""
        with self._cond:
            target = self._next_seq
            if self._failed:
                self._queue.extendleft(reversed(self._failed))
                self._failed = []
            self._urgent = True
            self._cond.notify_all()
            return target

    def finish_flush(self, target: int, timeout_s: float) -> bool:
        """Wait for every item up to ``target``; ``True`` when all were exported and none was dropped."""
        with self._cond:
            done = self._cond.wait_for(lambda: not self._pending_up_to(target), timeout=max(timeout_s, 0.0))
            failed = sum(1 for item in self._failed if item.seq <= target)
            dropped, self._dropped_since_flush = self._dropped_since_flush, 0
        if failed or dropped:
            log.warning(
                "OTLP %s: %d items not exported (kept for the next flush), %d dropped since the last flush",
                self.name,
                failed,
                dropped,
            )
        return done and not failed and not dropped

    def flush_sync(self, timeout_s: float) -> bool:
        return self.finish_flush(self.begin_flush(), timeout_s)

    def stop_sync(self, timeout_s: float) -> bool:
        """Export what is queued (one attempt), then stop the worker. ``True`` when it stopped in time."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(max(timeout_s, 0.0))
            if thread.is_alive():
                return False
        with self._cond:
            abandoned = len(self._queue) + len(self._failed)
        if abandoned:
            log.warning("OTLP %s: closing with %d items not exported", self.name, abandoned)
        return True

    def _run(self) -> None:
        # Exports must not be traced themselves (an instrumented HTTP or gRPC client would loop).
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            while self._run_once():
                pass
        finally:
            detach(token)

    def _run_once(self) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._queue) or self._stopping)
            if not self._queue:
                return False  # stopping, nothing left
            if not (self._urgent or self._stopping) and len(self._queue) < self._max_batch:
                self._cond.wait_for(
                    lambda: self._urgent or self._stopping or len(self._queue) >= self._max_batch,
                    timeout=self._delay,
                )
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))]
            self._inflight = batch
        try:
            ok = self._export([item.value for item in batch])
        except Exception:
            log.exception("OTLP %s export raised", self.name)
            ok = False
        with self._cond:
            self._inflight = []
            if ok:
                self.exported += len(batch)
            else:
                self.failed_exports += len(batch)
                self._failed.extend(batch)
            if not self._queue:
                self._urgent = False
            self._cond.notify_all()
        if self.on_room is not None:
            self.on_room()
        return True


class _ScoreSpanIds(IdGenerator):
    """Span ids derived from the score id while a run's spans are emitted (random otherwise).

    A redelivered run re-exports the same spans with the same ids, so backends that key spans by
    (trace id, span id) keep one copy, as the score topic keeps one score per ``scoreId``.
    """

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._seed: bytes | None = None
        self._n = 0

    def seed(self, score_id: str | None) -> None:
        self._seed = score_id.encode() if score_id is not None else None
        self._n = 0

    def generate_span_id(self) -> int:
        if self._seed is None:
            return self._random.generate_span_id()
        self._n += 1
        digest = hashlib.blake2b(self._seed + b":%d" % self._n, digest_size=8).digest()
        return int.from_bytes(digest, "big") or 1  # 0 is the invalid span id

    def generate_trace_id(self) -> int:  # score spans join the scored trace; never used for them
        return self._random.generate_trace_id()


class _QueueSpanProcessor(SpanProcessor):
    """Hands every ended span to an export queue (what ``BatchSpanProcessor`` does, minus the loss)."""

    def __init__(self, queue: _ExportQueue[ReadableSpan]) -> None:
        self._queue = queue

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._queue.put(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._queue.flush_sync(timeout_millis / 1000)


class _QueueLogProcessor(LogRecordProcessor):
    def __init__(self, queue: _ExportQueue[ReadableLogRecord]) -> None:
        self._queue = queue

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        resource = log_record.resource if log_record.resource is not None else Resource.get_empty()
        self._queue.put(
            ReadableLogRecord(
                log_record=log_record.log_record,
                resource=resource,
                instrumentation_scope=log_record.instrumentation_scope,
                limits=log_record.limits,
            )
        )

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._queue.flush_sync(timeout_millis / 1000)


# --- The sink ----------------------------------------------------------------------------------------------


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
