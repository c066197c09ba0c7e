"""Kafka score records: one JSON record per successful scorer run, keyed by trace id, a conversation's by its
conversation id (docs/delivery.md, docs/sessions.md).

:func:`score_record` is the format (``eval --output`` writes the same JSON); :class:`KafkaScoreSink` is
the exporter, on the delivery queue of every sink (``exporters.delivery``): ``submit`` encodes and queues;
one sender task hands what is queued to the producer in batches it builds itself (aiokafka's batch
builder, per partition); ``flush`` confirms: ``True`` only when every record submitted before it is
acknowledged by the broker (``acks=all``). The sink holds at most ``max_pending`` unacknowledged records:
beyond that, ``submit`` waits.

Delivery rules (at-least-once, docs/delivery.md):

* A delivery that fails for a reason that may pass (broker down, timeouts, leader changes) is kept and
  sent again by the next ``flush``; a flush returns ``False`` while one of its records fails. So a runtime
  that commits only after a ``True`` flush never commits past a lost record, even if it calls ``flush``
  again instead of rewinding.
* A record the broker can never take (larger than ``max_request_size``, invalid topic) is logged with its
  score id, counted (``rejected``), set aside on the score dead-letter topic (``exporters.dead_letters``:
  its value left out when too large) and not retried; the flush that observes it returns ``False``.
* Duplicates are harmless: the score id is deterministic (scorer fingerprint, trace id, span id), so a
  redelivered run produces the same ``scoreId`` and consumers keep one (see the ``score-id`` header).

No idempotent or transactional producer by default: the test broker (Tansu) cannot start one, and the
deterministic ids make it unnecessary. ``enable_idempotence=True`` turns it on for real Kafka.

The record deliberately leaves out the run's input and output (the traced conversation): they are the
largest part and the most sensitive, and the score points at the scored span by ``traceId``/``spanId``.
The prompts sent to the judge are included (they show what the judge was asked), and they quote that
content, redacted when the judge's ``redact`` block is on (docs/redaction.md, with a count by entity in
``redactions``): set a topic ACL accordingly.

The ``exporters.kafka_scores`` block (:class:`KafkaScoresExporterSettings`) and the exporter's declaration
close the module.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import pydantic_core
from pydantic import Field
from pydantic_core import InitErrorDetails

from exporters.delivery import DeadLetter, DeliveryQueue, DeliveryRules, Wording
from exporters.delivery.letters import SetAsideLetter, is_checkpointed
from exporters.kafka_batches import ProducerBatches
from exporters.partitioner import KeyPartitioner
from exporters.registry import ExporterContext, SettingsView, exporter_kind
from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.config import FrozenConfig, config_problem
from sidecar.core.observers import ServiceObserver
from sidecar.core.timestamps import iso_millis

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_TOPIC",
    "KafkaScoreSink",
    "KafkaScoresExporterSettings",
    "ScoreRecord",
    "score_record",
    "score_record_head",
    "score_record_json",
]

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "agent_scores"
# The score topic's dead-letter topic, unless named (exporters.dead_letters): agent_scores.dead_letter.
DEAD_LETTER_SUFFIX = ".dead_letter"
CONTENT_TYPE = "application/json"
# What produced the record: the live service, or a backfill of a past window (``scoring-sidecar backfill``). The
# score id does not depend on it: a backfilled score replaces the live one for the same scorer and span.
SCORE_SOURCE = "live"
DROP_REASONS: Final = ("rejected",)

# Model fields that never enter a record: the traced conversation (see the module docstring), and run
# state that a successful run does not have.
_EXCLUDED_RESULT_FIELDS = {"input", "output", "ground_truth", "request_context", "not_scorable"}


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
        # The agent's version as traced (docs/versions.md): what `compare` groups the scores by.
        "agentVersion": target.version,
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
    session = run.request.session
    conversation: dict[str, Any] = {}
    if session is not None:
        # A conversation's score: keyed by its id (record_key), named by its first turn, attached to its last.
        conversation = {
            "conversationId": session.conversation_id,
            "turnTraceIds": [turn.trace_id for turn in session.turns],
            "windowStart": iso_millis(session.start_unix_nano),
        }
        metadata["session"] = {
            "turns": len(session.turns),
            "closeReason": session.close_reason,
            "complete": session.complete,
            "truncated": any(turn.truncated for turn in session.turns),
        }
    return {
        **score_record_head(run, score, reason),
        # The trace the score belongs to: the scored one (the OTLP exporter puts its span there too).
        "scoreTraceId": target.trace_id,
        **conversation,
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

    @property
    def partition_key(self) -> bytes:
        return self.key

    @property
    def timestamp_ms(self) -> int | None:
        return None  # the producer's clock


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
    return ScoreRecord(score_id, run.request.record_key, value, headers)


def score_record(run: ScoredRun) -> tuple[bytes, bytes, list[tuple[str, bytes]]] | None:
    """``(key, value, headers)`` of the run's score record, or ``None`` when the run is not scored."""
    record = _encode(run)
    if record is None:
        return None
    return record.key, record.value, list(record.headers)


def _describe(record: ScoreRecord) -> str:
    return f"score record {record.score_id} ({len(record.value)} bytes)"


def _letters(exporter: str, set_aside: SetAsideLetter) -> Callable[[ScoreRecord, str, str], None]:
    def letter(record: ScoreRecord, reason: str, detail: str) -> None:
        set_aside(DeadLetter(exporter, record.score_id, record.key, record.value), reason, detail)

    return letter


class KafkaScoreSink:
    """A :class:`~sidecar.core.Sink` producing score records to Kafka.

    ``submit`` encodes the record and queues it; the delivery queue hands queued records to the producer,
    which reports each batch's delivery through a callback. A flush waits only for what was submitted
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
        name: str = "kafka_scores",
        set_aside: SetAsideLetter | None = None,
        score_source: str = SCORE_SOURCE,
    ) -> None:
        self.name = name  # another topic's publisher on the same loop (the score dead letters) names itself
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.score_source = score_source
        self.max_pending = max_pending
        self._options: dict[str, Any] = {
            "acks": "all",
            "linger_ms": linger_ms,
            # Large batches: Tansu (and Kafka) take them far better than many small ones (docs/delivery.md).
            "max_batch_size": max_batch_size,
            "compression_type": compression_type,
            "enable_idempotence": enable_idempotence,
            "partitioner": KeyPartitioner(),
            **(producer_options or {}),
        }
        self._batches: ProducerBatches[ScoreRecord] = ProducerBatches(
            topic, self._options["partitioner"], self._options.get("max_request_size", 1024 * 1024)
        )
        self._queue: DeliveryQueue[ScoreRecord] = DeliveryQueue(
            self.name,
            self._batches,
            # One sender hands everything queued to the producer at once (it lingers and batches by size);
            # failed records go again at the next flush, as the producer already retried them.
            DeliveryRules(batch_size=max_pending, max_pending=max_pending, retry_between_flushes=False),
            wording=Wording("score records", "delivered"),
            describe=_describe,
            log=log,
            observer=observer,
            set_aside=None if set_aside is None else _letters(name, set_aside),
            set_aside_checkpointed=is_checkpointed(set_aside),
        )
        self.ignored: Counter[str] = Counter()

    @property
    def outstanding(self) -> int:
        """Records submitted and not yet acknowledged (queued, in flight, or waiting to be sent again)."""
        return self._queue.outstanding

    @property
    def sent(self) -> int:
        return self._queue.confirmed

    @property
    def failed_attempts(self) -> int:
        return self._queue.failed_attempts

    @property
    def dropped(self) -> int:
        return sum(self._queue.dropped.values())

    @property
    def last_error(self) -> str | None:
        return self._queue.last_error

    async def start(self) -> None:
        """Connect (raises if the brokers cannot be reached at all: fail fast at start-up)."""
        if await self._batches.connect(self.bootstrap_servers, self._options):
            self._queue.start()

    async def submit(self, run: ScoredRun) -> None:
        """Queue the run's record, if it has one. Never raises for the broker; waits only while the
        sink holds ``max_pending`` unacknowledged records."""
        record = _encode(run, self.score_source)
        if record is None:
            self.ignored[run.outcome] += 1
            return
        await self._queue.put(record)

    def put_nowait(self, record: ScoreRecord) -> None:
        """Queue an encoded record now, without waiting for room (a publisher fed from a delivery loop)."""
        self._queue.put_nowait(record)

    async def flush(self, timeout_s: float) -> bool:
        """Send again what failed, then wait up to ``timeout_s`` for every record submitted so far.

        ``True`` when all are acknowledged; ``False`` on a timeout (they stay in flight), a failure (kept
        and sent again by the next flush) or a record dropped since the last flush. Records submitted
        while the flush waits belong to the next one: waiting for them would put commits off for as long
        as traffic flows."""
        return await self._queue.flush(timeout_s)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop the producer. Call ``flush`` first: what is still outstanding here is abandoned."""
        await self._batches.close(self._queue, timeout_s, "score producer")


# -- the exporters.kafka_scores block and the exporter's declaration --------------------------------------------


class KafkaScoresExporterSettings(FrozenConfig):
    """Score records (JSON, keyed by trace id) on a Kafka topic of the same brokers."""

    enabled: bool = True  # false: no score records (the score dead-letter topic still takes what others refuse)
    topic: str = Field(default=DEFAULT_TOPIC, min_length=1)  # the score topic
    # Unacknowledged records the sink holds before runs wait for it (then the consumer pauses).
    max_pending_records: int = Field(default=10_000, ge=1)
    # Where every exporter sets aside what its destination refuses for good (exporters.dead_letters), whether
    # or not score records are on: None is <topic>.dead_letter.
    dead_letter_topic: str | None = Field(default=None, min_length=1)

    @property
    def score_dead_letter_topic(self) -> str:
        return self.dead_letter_topic or self.topic + DEAD_LETTER_SUFFIX


def _own_topic(block: KafkaScoresExporterSettings, view: SettingsView) -> Iterable[InitErrorDetails]:
    if block.enabled and (block.topic in view.input_topics or block.topic == view.dead_letter_topic):
        yield config_problem(
            ("exporters", "kafka_scores", "topic"), "must differ from the input and dead-letter topics"
        )
        if block.dead_letter_topic is None:
            return  # its dead letters' topic is named after it: one problem, where the operator wrote it
    letters = block.score_dead_letter_topic
    if letters in view.input_topics or letters == view.dead_letter_topic or letters == block.topic:
        yield config_problem(
            ("exporters", "kafka_scores", "dead_letter_topic"),
            f"{letters!r} must differ from the input topics, the spans' dead-letter topic and the score topic",
        )


@exporter_kind(
    name="kafka_scores",
    settings=KafkaScoresExporterSettings,
    description="score records on a Kafka topic",
    drop_reasons=DROP_REASONS,
    check=_own_topic,
)
def build_kafka_score_sink(block: KafkaScoresExporterSettings, context: ExporterContext) -> KafkaScoreSink | None:
    if not block.enabled:
        return None
    if context.kafka is None:
        raise ValueError("the Kafka score exporter needs the kafka block")
    return KafkaScoreSink(
        context.kafka.bootstrap_servers,
        topic=block.topic,
        producer_options=dict(context.kafka.producer_options),
        enable_idempotence=context.kafka.enable_idempotence,
        max_pending=block.max_pending_records,
        observer=context.observer,
        set_aside=context.set_aside,
        score_source=context.score_source,
    )
