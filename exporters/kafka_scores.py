"""Kafka score records (SPEC §4): one JSON record per successful scorer run, keyed by trace id.

:func:`score_record` is the format (``eval --output`` writes the same JSON); :class:`KafkaScoreSink` is
the exporter. The sink sends without waiting (aiokafka batches with a short linger) and confirms in
``flush``: ``True`` only when every record submitted so far is acknowledged by the broker (``acks=all``).

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
import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from exporters.base import ScoredRun

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_TOPIC",
    "KafkaScoreSink",
    "ScoreRecord",
    "score_record",
    "score_record_json",
]

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "agent_scores"
CONTENT_TYPE = "application/json"
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


def _iso_utc(unix_nano: int) -> str:
    """JavaScript's ``toISOString`` form: millisecond precision, ``Z``."""
    seconds, nanos = divmod(unix_nano, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanos // 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _sidecar_version() -> str:
    from sidecar import __version__

    return __version__


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
    metadata = {
        "agentName": target.agent_name,
        "agentId": target.agent_id,
        "serviceName": target.service_name,
        "model": target.model,
        "spanName": target.span_name or None,
        "spanKind": target.kind,
        "convention": target.convention or None,
        "scorerFingerprint": run.scorer_fingerprint,
        "sidecarVersion": _sidecar_version(),
    }
    return {
        "scoreId": run.score_id,
        "timestamp": _iso_utc(run.finished_unix_nano),
        "traceId": target.trace_id,
        "spanId": target.span_id,
        "scorerId": run.scorer_id,
        "scorerName": run.scorer_name,
        "scoreSource": SCORE_SOURCE,
        "score": score,
        "reason": reason,  # always present: null when the scorer has no generate_reason step
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
    headers: tuple[tuple[str, bytes], ...]


def _encode(run: ScoredRun) -> ScoreRecord | None:
    body = score_record_json(run)
    if body is None:
        return None
    value = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    score_id: str = body["scoreId"]
    headers = (("content-type", CONTENT_TYPE.encode()), ("score-id", score_id.encode()))
    return ScoreRecord(score_id, run.request.target.trace_id.encode("utf-8"), value, headers)


def score_record(run: ScoredRun) -> tuple[bytes, bytes, list[tuple[str, bytes]]] | None:
    """``(key, value, headers)`` of the run's score record, or ``None`` when the run is not scored."""
    record = _encode(run)
    if record is None:
        return None
    return record.key, record.value, list(record.headers)


class KafkaScoreSink:
    """A :class:`~exporters.base.Sink` producing score records to Kafka.

    Counters for tests and metrics: ``sent`` (acknowledged records), ``ignored`` (runs by outcome that
    produce no record), ``failed_attempts`` (deliveries that failed and were kept for resending),
    ``dropped`` (records the broker can never take), ``last_error``. ``outstanding`` is what a ``True`` flush
    still needs: a runtime can use it for backpressure while the broker is down.
    """

    name = "kafka_scores"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = DEFAULT_TOPIC,
        producer_options: dict[str, Any] | None = None,
        *,
        enable_idempotence: bool = False,
        linger_ms: int = 5,
        compression_type: str | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self._options: dict[str, Any] = {
            "acks": "all",
            "linger_ms": linger_ms,
            "compression_type": compression_type,
            "enable_idempotence": enable_idempotence,
            **(producer_options or {}),
        }
        self._producer: AIOKafkaProducer | None = None
        self._in_flight: dict[asyncio.Task[None], ScoreRecord] = {}
        self._retry: list[ScoreRecord] = []  # failed, to send again on the next flush
        self._dropped_since_flush = 0
        self.sent = 0
        self.failed_attempts = 0
        self.dropped = 0
        self.ignored: Counter[str] = Counter()
        self.last_error: str | None = None

    @property
    def outstanding(self) -> int:
        """Records submitted and not yet acknowledged (in flight or waiting to be sent again)."""
        return len(self._in_flight) + len(self._retry)

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

    async def submit(self, run: ScoredRun) -> None:
        """Queue the run's record, if it has one. Never waits for the broker and never raises for it."""
        record = _encode(run)
        if record is None:
            self.ignored[run.outcome] += 1
            return
        self._send(record)

    def _send(self, record: ScoreRecord) -> None:
        # aiokafka's send() itself can wait (for topic metadata, or room in a full batch, up to
        # request_timeout_ms): run it in a task so that submit stays non-blocking.
        task = asyncio.create_task(self._deliver(record), name=f"score-record {record.score_id}")
        self._in_flight[task] = record
        task.add_done_callback(self._delivered)

    async def _deliver(self, record: ScoreRecord) -> None:
        if self._producer is None:
            raise RuntimeError("KafkaScoreSink is not started")
        delivery = await self._producer.send(
            self.topic, value=record.value, key=record.key, headers=list(record.headers)
        )
        await delivery

    def _delivered(self, task: asyncio.Task[None]) -> None:
        record = self._in_flight.pop(task)
        if task.cancelled():  # only close() cancels: nothing is waiting for it any more
            return
        error = task.exception()
        if error is None:
            self.sent += 1
        elif isinstance(error, _PERMANENT_ERRORS):
            self.dropped += 1
            self._dropped_since_flush += 1
            log.error(
                "score record %s dropped (%d bytes): %s: %s",
                record.score_id,
                len(record.value),
                type(error).__name__,
                error,
            )
        else:
            # Logged once per flush (an outage fails every record): see flush().
            self.failed_attempts += 1
            self.last_error = f"{type(error).__name__}: {error}"
            self._retry.append(record)
            log.debug("score record %s not delivered, kept for the next flush: %s", record.score_id, self.last_error)

    async def flush(self, timeout_s: float) -> bool:
        """Send again what failed, then wait up to ``timeout_s`` for every record submitted so far.

        ``True`` when all are acknowledged; ``False`` on a timeout (they stay in flight), a failure (kept
        and sent again by the next flush) or a record dropped since the last flush."""
        if self._producer is None:
            return self.outstanding == 0
        retry, self._retry = self._retry, []
        for record in retry:
            self._send(record)
        # Only what was submitted before this flush counts: records submitted while we wait belong to the
        # next checkpoint, and waiting for them would put commits off for as long as traffic flows.
        snapshot = dict(self._in_flight)
        if snapshot:
            await asyncio.wait(set(snapshot), timeout=max(timeout_s, 0.0))
            # _delivered runs from the tasks' done callbacks (call_soon): one more turn to be sure they ran.
            await asyncio.sleep(0)
        dropped, self._dropped_since_flush = self._dropped_since_flush, 0
        pending = [task for task in snapshot if task in self._in_flight]
        failed_ids = {id(record) for record in self._retry}
        failed = [record for record in snapshot.values() if id(record) in failed_ids]
        if failed:
            log.warning(
                "%d score records not delivered (last error: %s); kept for the next flush",
                len(failed),
                self.last_error,
            )
        return not pending and not failed and dropped == 0

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop the producer. Call ``flush`` first: what is still outstanding here is abandoned."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        tasks = list(self._in_flight)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        abandoned = len(tasks) + len(self._retry)
        if abandoned:
            log.warning("closing the score producer with %d records not delivered", abandoned)
        self._retry.clear()
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
