"""The thin async Kafka layer: records in (aiokafka consumer), dead letters out (aiokafka producer).

All decisions are made by :func:`sidecar.ingest.pipeline.process_record`; this module moves bytes.
Offsets are *not* committed here: the runtime commits a record once its runs are exported
(docs/delivery.md). Dead letters are delivered before :meth:`TraceIngestor.poll` returns, so a record whose
dead letters are lost is never committed.
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
from sidecar.core.runs import ScorerRunRequest
from sidecar.ingest.deadletter import (
    DeadLetter,
    DeadLetterCounter,
    DeadLetterReason,
    RecordOrigin,
    dead_letter_headers,
)
from sidecar.ingest.pipeline import IngestConfig, ProcessedRecord, process_record

__all__ = ["DeadLetterPublisher", "IngestedRecord", "TraceIngestor", "open_trace_ingestor"]

log = logging.getLogger(__name__)


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
    """Sends dead letters and waits for the broker to acknowledge them."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        *,
        encoding: str,
        counter: DeadLetterCounter | None = None,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._encoding = encoding
        self.counter = counter if counter is not None else DeadLetterCounter()

    async def publish(
        self, source: RecordOrigin, letters: Sequence[DeadLetter], *, encoding: str | None = None
    ) -> None:
        """Deliver ``letters`` about ``source`` (``encoding``: of ``source.value``, when it is not the input's:
        a span of an assembled trace is set aside alone, as OTLP protobuf)."""
        deliveries = [
            await self._producer.send(
                self._topic,
                value=source.value,
                key=source.key,
                headers=dead_letter_headers(letter, source, encoding or self._encoding),
            )
            for letter in letters
        ]
        await asyncio.gather(*deliveries)
        self.counter.add(letters)
        for letter in letters:
            log.warning(
                "dead letter reason=%s source=%s/%d@%d span=%s detail=%s",
                letter.reason.value,
                source.topic,
                source.partition,
                source.offset,
                letter.span_id or "-",
                letter.detail,
            )


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
) -> AsyncIterator[TraceIngestor]:
    """A started consumer (subscribed to ``config.topic`` when ``group_id`` is set, else not yet
    assigned: call ``ingestor.consumer.assign(...)``) and dead-letter producer, closed on exit."""
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
                producer, config.dead_letter_topic, encoding=config.encoding, counter=counter
            )
            yield TraceIngestor(consumer, publisher, config)
        finally:
            await consumer.stop()
    finally:
        await producer.stop()
