"""The dead-letter producer: what cannot be scored goes to the dead-letter topic, with the record it came from.

The runtime waits for the broker's acknowledgement before it lets the record commit (docs/delivery.md): a record
whose dead letters are lost to a broker outage is never committed. A letter the broker refuses for good (see
``sidecar.core.kafka_errors``) is logged and counted, and its record goes on: one record must not stop its
partition. Letters are bounded (docs/limits.md): one per record and reason, each cut to what the producer may send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from sidecar.core.kafka_errors import PERMANENT_ERRORS
from sidecar.core.observers import ServiceObserver
from sidecar.ingest.deadletter import (
    DEFAULT_MAX_REQUEST_SIZE,
    DeadLetter,
    DeadLetterCounter,
    LetterRecord,
    RecordOrigin,
    letter_record,
    one_per_reason,
)

__all__ = ["DeadLetterPublisher"]

log = logging.getLogger(__name__)

# A letter that failed for a reason worth another try (the broker unreachable) is sent again after this long,
# doubling up to the most: meanwhile its record stays uncommitted, as every record behind it.
_RETRY_FIRST_S = 1.0
_RETRY_MOST_S = 10.0


class DeadLetterPublisher:
    """Sends dead letters on its own producer (``acks=all``), one per record and reason, each cut to what the
    producer may send (``max_request_size``), and waits for the broker to acknowledge them (docs/limits.md)."""

    name = "dead letters"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        encoding: str,
        producer_options: dict[str, Any] | None = None,
        counter: DeadLetterCounter | None = None,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        observer: ServiceObserver | None = None,
    ) -> None:
        self._bootstrap_servers = bootstrap_servers
        # The producer may send what a letter is cut to (a producer option given explicitly wins: a smaller one makes
        # the producer itself refuse, as a broker's max.message.bytes would).
        self._options = {"max_request_size": max_request_size, **(producer_options or {})}
        self.topic = topic
        self._encoding = encoding
        self._max_request_size = max_request_size
        self._observer = observer or ServiceObserver()
        self.counter = counter if counter is not None else DeadLetterCounter()
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        """Start a producer (a failed start leaves none: the next start tries afresh)."""
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap_servers, acks="all", **self._options)
        try:
            await producer.start()
        except BaseException:
            await asyncio.shield(_stop_quietly(producer))
            raise
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

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
                        letter.reason.value, source.topic, source.partition, source.offset, self.topic,
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
        producer = self._producer
        if producer is None:
            raise RuntimeError("the dead-letter producer is not started")
        deliveries: list[asyncio.Future[Any] | BaseException] = []
        for record in records:
            try:
                deliveries.append(
                    await producer.send(self.topic, value=record.value, key=record.key, headers=record.headers)
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
            letter.reason.value, source.topic, source.partition, source.offset, self.topic,
            type(error).__name__, error,
        )  # fmt: skip


async def _stop_quietly(producer: AIOKafkaProducer) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 5.0)
    except Exception:
        return
