"""Kafka score records (SPEC §4): one JSON record per successful scorer run, keyed by trace id.

:func:`score_record` is the format (``eval --output`` writes the same JSON); :class:`KafkaScoreSink` is
the exporter. ``submit`` queues; one sender task feeds the producer (large batches, short linger); ``flush``
confirms: ``True`` only when every record submitted before it is acknowledged by the broker (``acks=all``).
The sink holds at most ``max_pending`` unacknowledged records: beyond that, ``submit`` waits.

Delivery policy (at-least-once, SPEC §5):

* A delivery that fails for a reason that may pass (broker down, timeouts, leader changes) is kept and
  sent again by the next ``flush``; that flush returns ``False`` until it gets through. So a runtime that
  commits only after a ``True`` flush never commits past a lost record, even if it calls ``flush`` again
  instead of rewinding.
* A record the broker can never take (larger than ``max_request_size``, invalid topic) is logged with its
  score id, counted in ``dropped`` and not retried; the flush that observes it returns ``False``.
* Duplicates are harmless: the score id is deterministic (scorer fingerprint, trace id, span id), so a
  redelivered run produces the same ``scoreId`` and consumers keep one (see the ``score-id`` header).

No idempotent or transactional producer by default: the test broker (Tansu) cannot start one, and the
deterministic ids make it unnecessary. ``enable_idempotence=True`` turns it on for real Kafka.

The record deliberately leaves out the run's input and output (the traced conversation): SPEC §4 does not
list them, they are the largest part and the most sensitive, and the score points at the scored span by
``traceId``/``spanId``. The prompts sent to the judge are included (SPEC lists them), and they quote that
content: set a topic ACL accordingly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import pydantic_core
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from exporters.partitioner import KeyPartitioner
from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver
from sidecar.core.timestamps import iso_millis

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_TOPIC",
    "KafkaScoreSink",
    "ScoreRecord",
    "score_record",
    "score_record_head",
    "score_record_json",
]

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "agent_scores"
CONTENT_TYPE = "application/json"
# What produced the record: the live service, or a backfill of a past window (``scoring-sidecar backfill``). The
# score id does not depend on it: a backfilled score replaces the live one for the same scorer and span.
SCORE_SOURCE = "live"

# Model fields that never enter a record: the traced conversation (see the module docstring), and run
# state that a successful run does not have.
_EXCLUDED_RESULT_FIELDS = {"input", "output", "ground_truth", "request_context", "not_scorable"}

# The record can never be accepted: retrying would block every later commit forever.
_PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    RecordListTooLargeError,
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
)


def score_record_head(run: ScoredRun, score: float | None, reason: str | None) -> dict[str, Any]:
    """The fields that identify a score, in record order (``eval --output`` writes them for failures too)."""
    target = run.request.target
    return {
        "scoreId": run.score_id,
        "timestamp": iso_millis(run.finished_unix_nano),
        "traceId": target.trace_id,
        "spanId": target.span_id,
        "scorerId": run.scorer_id,
        "scorerName": run.scorer_name,
        "scoreSource": SCORE_SOURCE,
        "score": score,
        "reason": reason,  # always present: null when the scorer has no generate_reason step
    }


def score_record_json(run: ScoredRun) -> dict[str, Any] | None:
    """The record as a JSON-ready dict, or ``None`` when the run produces no record (not scored)."""
    result = run.result
    if run.outcome != "scored" or result is None or not result.is_scored:
        return None
    target = run.request.target
    # Step results, prompts and the judge record exactly as ScorerRunResult serialises them (camelCase,
    # no None, no telemetry-only fields): the record follows the types without a second schema here.
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=_EXCLUDED_RESULT_FIELDS)
    run_id = dumped.pop("runId")
    score = dumped.pop("score")
    reason = dumped.pop("reason", None)
    metadata: dict[str, Any] = {
        "agentName": target.agent_name,
        "agentId": target.agent_id,
        "serviceName": target.service_name,
        "model": target.model,
        "spanName": target.span_name or None,
        "spanKind": target.kind,
        "convention": target.convention or None,
        "scorerFingerprint": run.scorer_fingerprint,
        "sidecarVersion": __version__,
        "scope": run.request.scope,
        # Parts the scorer reads that the run lacked: the score judged the rest (absent when none).
        "missing": list(run.missing) or None,
    }
    assembly = run.request.assembly
    if assembly is not None:
        metadata["trace"] = assembly.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        **score_record_head(run, score, reason),
        # The score span lives in the scored trace (SPEC §4, OTel output).
        "scoreTraceId": target.trace_id,
        "runId": run_id,
        **dumped,  # preprocess/analyzeStepResult, the four prompts, judge: each only when present
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }


@dataclass(frozen=True, slots=True)
class ScoreRecord:
    """One score record on the wire."""

    score_id: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]  # a list: aiokafka's record builder (C) takes nothing else; never mutated


@dataclass(frozen=True, slots=True)
class _Pending:
    """A record on its way, with the epoch (flush) it belongs to."""

    record: ScoreRecord
    epoch: int


def _encode(run: ScoredRun, score_source: str = SCORE_SOURCE) -> ScoreRecord | None:
    body = score_record_json(run)
    if body is None:
        return None
    body["scoreSource"] = score_source
    # pydantic-core's encoder (Rust): compact UTF-8 JSON like json.dumps(ensure_ascii=False, separators=(",",
    # ":")) at a fraction of the CPU; non-finite floats (which no record should hold) become null.
    value = pydantic_core.to_json(body, inf_nan_mode="null")
    score_id: str = body["scoreId"]
    headers = [("content-type", CONTENT_TYPE.encode()), ("score-id", score_id.encode())]
    return ScoreRecord(score_id, run.request.target.trace_id.encode("utf-8"), value, headers)


def score_record(run: ScoredRun) -> tuple[bytes, bytes, list[tuple[str, bytes]]] | None:
    """``(key, value, headers)`` of the run's score record, or ``None`` when the run is not scored."""
    record = _encode(run)
    if record is None:
        return None
    return record.key, record.value, list(record.headers)


class KafkaScoreSink:
    """A :class:`~sidecar.core.Sink` producing score records to Kafka.

    ``submit`` encodes the record and queues it; one sender task hands queued records to the producer,
    which batches them (``linger_ms``, ``max_batch_size``) and reports each delivery through a callback.
    Records are grouped in *epochs* (one per ``flush``), so a flush waits only for what was submitted
    before it. ``submit`` waits while ``max_pending`` records are unacknowledged: that wait keeps the run
    in flight, so the runtime's own backpressure pauses the consumer instead of this queue growing while
    the broker is slow or down.

    Counters for tests and metrics: ``sent`` (acknowledged records), ``ignored`` (runs by outcome that
    produce no record), ``failed_attempts`` (deliveries that failed and were kept for resending),
    ``dropped`` (records the broker can never take), ``last_error``. ``outstanding`` is what a ``True``
    flush still needs.
    """

    name = "kafka_scores"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = DEFAULT_TOPIC,
        producer_options: dict[str, Any] | None = None,
        *,
        enable_idempotence: bool = False,
        linger_ms: int = 10,
        max_batch_size: int = 512 * 1024,
        compression_type: str | None = None,
        max_pending: int = 10_000,
        observer: ServiceObserver | None = None,
        score_source: str = SCORE_SOURCE,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.score_source = score_source
        self.max_pending = max_pending
        self._observer = observer or ServiceObserver()
        self._options: dict[str, Any] = {
            "acks": "all",
            "linger_ms": linger_ms,
            # Tansu (and Kafka) take large batches far better than many small ones (see BROKER.md).
            "max_batch_size": max_batch_size,
            "compression_type": compression_type,
            "enable_idempotence": enable_idempotence,
            "partitioner": KeyPartitioner(),
            **(producer_options or {}),
        }
        self._partitioner = self._options["partitioner"]
        self._max_request_size: int = self._options.get("max_request_size", 1024 * 1024)
        self._producer: AIOKafkaProducer | None = None
        self._sender: asyncio.Task[None] | None = None
        self._queue: deque[_Pending] = deque()
        self._queued = asyncio.Event()
        self._retry: list[_Pending] = []  # failed, to send again on the next flush
        self._epoch = 0
        self._open: Counter[int] = Counter()  # epoch -> records not yet resolved (queued or in flight)
        self._spoiled: set[int] = set()  # epochs with a failed or dropped record
        self._settled = asyncio.Event()  # an epoch's last record resolved
        self._room = asyncio.Event()
        self._room.set()
        self._unresolved = 0
        self.sent = 0
        self.failed_attempts = 0
        self.dropped = 0
        self.ignored: Counter[str] = Counter()
        self.last_error: str | None = None

    @property
    def outstanding(self) -> int:
        """Records submitted and not yet acknowledged (queued, in flight, or waiting to be sent again)."""
        return self._unresolved + len(self._retry)

    async def start(self) -> None:
        """Connect (raises if the brokers cannot be reached at all: fail fast at start-up)."""
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, **self._options)
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer
        self._sender = asyncio.create_task(self._send_queued(producer), name="score-records sender")

    async def submit(self, run: ScoredRun) -> None:
        """Queue the run's record, if it has one. Never raises for the broker; waits only while the
        sink holds ``max_pending`` unacknowledged records."""
        record = _encode(run, self.score_source)
        if record is None:
            self.ignored[run.outcome] += 1
            return
        while self.outstanding >= self.max_pending and self._producer is not None:
            self._room.clear()
            await self._room.wait()
        self._enqueue(_Pending(record, self._epoch))

    def _enqueue(self, pending: _Pending) -> None:
        self._open[pending.epoch] += 1
        self._unresolved += 1
        self._queue.append(pending)
        self._queued.set()

    async def _send_queued(self, producer: AIOKafkaProducer) -> None:
        # Records go out in batches this task builds (aiokafka's batch API): per record, one append to a
        # batch instead of send()'s validation, metadata wait, future and callback (a third of the CPU).
        queue = self._queue
        while True:
            if not queue:
                self._queued.clear()
                await self._queued.wait()
                continue
            try:
                partitions = sorted(await producer.partitions_for(self.topic))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # metadata unavailable: kept for the next flush, like a failed send
                while queue:
                    self._resolve(queue.popleft(), error)
                continue
            by_partition: dict[int, list[_Pending]] = {}
            while queue:  # everything queued by now; what arrives meanwhile makes the next batches
                pending = queue.popleft()
                record = pending.record
                size = DefaultRecordBatchBuilder.estimate_size_in_bytes(record.key, record.value, record.headers)
                if size > self._max_request_size:
                    self._resolve(pending, MessageSizeTooLargeError(f"the record is {size} bytes when serialized"))
                    continue
                partition = self._partitioner(record.key, partitions, partitions)
                by_partition.setdefault(partition, []).append(pending)
            for partition, records in by_partition.items():
                await self._send_partition(producer, partition, records)

    async def _send_partition(self, producer: AIOKafkaProducer, partition: int, records: list[_Pending]) -> None:
        batch: list[_Pending] = []
        builder = producer.create_batch()
        for pending in records:
            record = pending.record
            if builder.append(key=record.key, value=record.value, timestamp=None, headers=record.headers) is None:
                await self._send_batch(producer, builder, partition, batch)
                batch, builder = [], producer.create_batch()
                # An empty batch takes any record up to max_request_size (checked above).
                builder.append(key=record.key, value=record.value, timestamp=None, headers=record.headers)
            batch.append(pending)
        if batch:
            await self._send_batch(producer, builder, partition, batch)

    async def _send_batch(
        self, producer: AIOKafkaProducer, builder: Any, partition: int, batch: list[_Pending]
    ) -> None:
        try:
            # Returns once the batch is queued; waits while this partition's previous batch is not sent yet.
            delivery = await producer.send_batch(builder, self.topic, partition=partition)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the producer is closed, or no room before request_timeout_ms
            for pending in batch:
                self._resolve(pending, error)
            return
        delivery.add_done_callback(functools.partial(self._delivered, batch))

    def _delivered(self, batch: list[_Pending], delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled():  # the producer was stopped: close() counts what it abandons
            return
        error = delivery.exception()
        for pending in batch:
            self._resolve(pending, error)

    def _resolve(self, pending: _Pending, error: BaseException | None) -> None:
        if error is None:
            self.sent += 1
        elif isinstance(error, _PERMANENT_ERRORS):
            self.dropped += 1
            self._spoiled.add(pending.epoch)
            self._observer.exporter_dropped(self.name, "rejected")
            log.error(
                "score record %s dropped (%d bytes): %s: %s",
                pending.record.score_id,
                len(pending.record.value),
                type(error).__name__,
                error,
            )
        else:
            # Logged once per flush (an outage fails every record): see flush().
            self.failed_attempts += 1
            self.last_error = f"{type(error).__name__}: {error}"
            self._spoiled.add(pending.epoch)
            self._retry.append(pending)
        self._unresolved -= 1
        left = self._open[pending.epoch] - 1
        if left:
            self._open[pending.epoch] = left
        else:
            del self._open[pending.epoch]
            self._settled.set()
        if self.outstanding < self.max_pending:
            self._room.set()

    async def flush(self, timeout_s: float) -> bool:
        """Send again what failed, then wait up to ``timeout_s`` for every record submitted so far.

        ``True`` when all are acknowledged; ``False`` on a timeout (they stay in flight), a failure (kept
        and sent again by the next flush) or a record dropped since the last flush. Records submitted
        while the flush waits belong to the next one: waiting for them would put commits off for as long
        as traffic flows."""
        if self._producer is None:
            return self.outstanding == 0
        epoch = self._epoch
        self._epoch += 1
        retry, self._retry = self._retry, []
        for pending in retry:
            self._enqueue(_Pending(pending.record, epoch))
        settled = True
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                while any(open_epoch <= epoch for open_epoch in self._open):
                    self._settled.clear()
                    await self._settled.wait()
        except TimeoutError:
            settled = False
        spoiled = {e for e in self._spoiled if e <= epoch}
        self._spoiled -= spoiled
        if spoiled and self._retry:
            log.warning(
                "%d score records not delivered (last error: %s); kept for the next flush",
                len(self._retry),
                self.last_error,
            )
        return settled and not spoiled

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop the producer. Call ``flush`` first: what is still outstanding here is abandoned."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        abandoned = self.outstanding
        if abandoned:
            log.warning("closing the score producer with %d records not delivered", abandoned)
        self._queue.clear()
        self._retry.clear()
        self._open.clear()
        self._unresolved = 0
        self._room.set()  # submitters waiting for room: the sink is closed, nothing to wait for
        stopping = asyncio.ensure_future(producer.stop())
        stopping.add_done_callback(_stopped)
        await asyncio.wait({stopping}, timeout=timeout_s)
        if not stopping.done():
            # aiokafka's stop() waits until every batch is delivered or expires (request_timeout_ms), and
            # cancelling it would leave its sender and connections running: let it finish on its own.
            _STOPPING.add(stopping)
            log.warning("score producer still stopping after %.1fs; it finishes in the background", timeout_s)


# Producers whose stop() outlived close(): referenced until done so that the task is not collected.
_STOPPING: set[asyncio.Future[None]] = set()


def _stopped(stopping: asyncio.Future[None]) -> None:
    _STOPPING.discard(stopping)
    if not stopping.cancelled() and stopping.exception() is not None:
        log.warning("score producer stopped with %r", stopping.exception())
