"""The thin async Kafka layer: records in (aiokafka consumer), dead letters out (aiokafka producer).

All decisions are made by :func:`sidecar.ingest.pipeline.process_record`; this module moves bytes.
Offsets are *not* committed here: the runtime commits a record once its runs are exported
(docs/delivery.md). Dead letters are delivered before :meth:`TraceIngestor.poll` returns, so a record whose
dead letters are lost to a broker outage is never committed. A letter the broker refuses for good (see
``sidecar.core.kafka_errors``) is logged and counted, and its record goes on: one record must not stop its
partition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from sidecar.conventions.spans import SkipCounts
from sidecar.core.kafka_errors import PERMANENT_ERRORS
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ScorerRunRequest
from sidecar.ingest.deadletter import (
    DEFAULT_MAX_REQUEST_SIZE,
    DeadLetter,
    DeadLetterCounter,
    DeadLetterReason,
    LetterRecord,
    RecordOrigin,
    letter_record,
    one_per_reason,
)
from sidecar.ingest.pipeline import IngestConfig, ProcessedRecord, process_record

__all__ = ["DeadLetterPublisher", "IngestedRecord", "TraceIngestor", "open_trace_ingestor"]

log = logging.getLogger(__name__)

# A letter that failed for a reason worth another try (the broker unreachable) is sent again after this long,
# doubling up to the most: meanwhile its record stays uncommitted, as every record behind it.
_RETRY_FIRST_S = 1.0
_RETRY_MOST_S = 10.0


@dataclass(frozen=True, slots=True)
class IngestedRecord:
    """One consumed record, fully ingested: its runs are ready, its dead letters delivered."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    runs: tuple[ScorerRunRequest, ...]
    dead_letters: tuple[DeadLetter, ...]
    skipped: SkipCounts
    spans_seen: int


class DeadLetterPublisher:
    """Sends dead letters, one per record and reason, each cut to what the producer may send
    (``max_request_size``), and waits for the broker to acknowledge them (docs/limits.md)."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        *,
        encoding: str,
        counter: DeadLetterCounter | None = None,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        observer: ServiceObserver | None = None,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._encoding = encoding
        self._max_request_size = max_request_size
        self._observer = observer or ServiceObserver()
        self.counter = counter if counter is not None else DeadLetterCounter()

    async def publish(
        self, source: RecordOrigin, letters: Sequence[DeadLetter], *, encoding: str | None = None
    ) -> tuple[DeadLetter, ...]:
        """Deliver ``letters`` about ``source`` (``encoding``: of ``source.value``, when it is not the input's:
        spans of an assembled trace are set aside as OTLP protobuf). Letters of one reason are merged into one
        (:func:`~sidecar.ingest.deadletter.one_per_reason`); the first carries the record's bytes. Returns the
        letters the broker acknowledged; one it refuses for good is logged and counted, and left out. Retries
        while the broker cannot be reached."""
        merged = one_per_reason(letters)
        carrier = merged[0].reason if merged else None
        records = [
            letter_record(
                letter,
                source,
                encoding or self._encoding,
                max_request_size=self._max_request_size,
                value_with=None if i == 0 else carrier,
            )
            for i, letter in enumerate(merged)
        ]
        pending = list(zip(merged, records, strict=True))
        delivered: list[DeadLetter] = []
        delay = _RETRY_FIRST_S
        while pending:
            errors = await self._send_all([record for _, record in pending])
            failed: list[tuple[DeadLetter, LetterRecord]] = []
            for (letter, record), error in zip(pending, errors, strict=True):
                if error is None:
                    delivered.append(letter)
                    if record.truncated:
                        self._observer.limit_hit("dead_letter_bytes")
                    self._delivered(source, letter)
                elif isinstance(error, PERMANENT_ERRORS):
                    self._refused(source, letter, error)
                else:
                    failed.append((letter, record))
                    log.warning(
                        "dead letter (%s) for %s/%d@%d not delivered to %s: %s: %s; its record stays uncommitted, "
                        "trying again in %.0f s",
                        letter.reason.value, source.topic, source.partition, source.offset, self._topic,
                        type(error).__name__, error, delay,
                    )  # fmt: skip
            pending = failed
            if pending:
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MOST_S)
        self.counter.add(delivered)
        return tuple(delivered)

    @staticmethod
    def _delivered(source: RecordOrigin, letter: DeadLetter) -> None:
        log.warning(
            "dead letter reason=%s source=%s/%d@%d span=%s%s detail=%s",
            letter.reason.value,
            source.topic,
            source.partition,
            source.offset,
            letter.span_id or "-",
            f" (and {letter.spans - 1} more spans)" if letter.spans > 1 else "",
            letter.detail[:300],
        )

    async def _send_all(self, records: list[LetterRecord]) -> list[BaseException | None]:
        """Each record sent, then every acknowledgement awaited: its error, or None once acknowledged."""
        deliveries: list[asyncio.Future[Any] | BaseException] = []
        for record in records:
            try:
                deliveries.append(
                    await self._producer.send(self._topic, value=record.value, key=record.key, headers=record.headers)
                )
            except Exception as exc:  # refused before it left (its size), or no metadata for the topic
                deliveries.append(exc)
        errors: list[BaseException | None] = []
        for delivery in deliveries:
            if isinstance(delivery, BaseException):
                errors.append(delivery)
                continue
            try:
                await delivery
            except Exception as exc:
                errors.append(exc)
            else:
                errors.append(None)
        return errors

    def _refused(self, source: RecordOrigin, letter: DeadLetter, error: BaseException) -> None:
        self._observer.dead_letter_refused(letter.reason.value)
        log.error(
            "dead letter (%s) for %s/%d@%d refused by %s: %s: %s; the record is committed without it (raise "
            "kafka.max_request_size and the topic's max.message.bytes together if it was too large)",
            letter.reason.value, source.topic, source.partition, source.offset, self._topic,
            type(error).__name__, error,
        )  # fmt: skip


class TraceIngestor:
    """Polls a started consumer and turns each record into runs and delivered dead letters."""

    def __init__(self, consumer: AIOKafkaConsumer, publisher: DeadLetterPublisher, config: IngestConfig) -> None:
        self.consumer = consumer
        self.publisher = publisher
        self.config = config

    async def poll(self, *, timeout_ms: int = 1000, max_records: int | None = None) -> list[IngestedRecord]:
        batches: dict[Any, list[Any]] = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        ingested: list[IngestedRecord] = []
        for records in batches.values():
            for record in records:
                source = RecordOrigin(
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                    value=record.value if record.value is not None else b"",
                    key=record.key,
                    headers=tuple((k, bytes(v)) for k, v in record.headers or ()),
                )
                ingested.append(await self.ingest(source, tombstone=record.value is None))
        return ingested

    async def ingest(self, source: RecordOrigin, *, tombstone: bool = False) -> IngestedRecord:
        try:
            processed = process_record(None if tombstone else source.value, self.config)
        except Exception as exc:
            # A bug, not bad input: the pure layer raises nothing on bad input. Set the record aside
            # rather than blocking the partition on it forever.
            log.exception("ingest failed on %s/%d@%d", source.topic, source.partition, source.offset)
            detail = f"{exc.__class__.__name__}: {exc}"[:300]
            processed = ProcessedRecord(dead_letters=(DeadLetter(DeadLetterReason.INTERNAL_ERROR, detail),))
        if processed.dead_letters:
            await self.publisher.publish(source, processed.dead_letters)
        return IngestedRecord(
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
            key=source.key,
            runs=processed.runs,
            dead_letters=processed.dead_letters,
            skipped=processed.skipped,
            spans_seen=processed.spans_seen,
        )


@asynccontextmanager
async def open_trace_ingestor(
    bootstrap_servers: str,
    config: IngestConfig,
    *,
    group_id: str | None,
    counter: DeadLetterCounter | None = None,
    consumer_options: dict[str, Any] | None = None,
    producer_options: dict[str, Any] | None = None,
    observer: ServiceObserver | None = None,
) -> AsyncIterator[TraceIngestor]:
    """A started consumer (subscribed to ``config.topic`` when ``group_id`` is set, else not yet
    assigned: call ``ingestor.consumer.assign(...)``) and dead-letter producer, closed on exit. ``observer`` hears
    of letters cut to fit the producer's ``max_request_size`` and of letters refused."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **(consumer_options or {}),
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", **(producer_options or {}))
    await producer.start()
    try:
        await consumer.start()
        try:
            if group_id is not None:
                consumer.subscribe([config.topic])
            publisher = DeadLetterPublisher(
                producer,
                config.dead_letter_topic,
                encoding=config.encoding,
                counter=counter,
                max_request_size=(producer_options or {}).get("max_request_size", DEFAULT_MAX_REQUEST_SIZE),
                observer=observer,
            )
            yield TraceIngestor(consumer, publisher, config)
        finally:
            await consumer.stop()
    finally:
        await producer.stop()
