"""The dead-letter producer: what cannot be scored goes to the dead-letter topic, with the record it came from.

The runtime waits for the broker's acknowledgement before it lets the record commit (docs/delivery.md): a record
whose dead letters are lost is never committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from sidecar.ingest.deadletter import DeadLetter, DeadLetterCounter, RecordOrigin, dead_letter_headers

__all__ = ["DeadLetterPublisher"]

log = logging.getLogger(__name__)


class DeadLetterPublisher:
    """Sends dead letters on its own producer (``acks=all``) and waits for the broker to acknowledge them."""

    name = "dead letters"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        encoding: str,
        producer_options: dict[str, Any] | None = None,
        counter: DeadLetterCounter | None = None,
    ) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._options = dict(producer_options or {})
        self.topic = topic
        self._encoding = encoding
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
    ) -> None:
        """Deliver ``letters`` about ``source`` (``encoding``: of ``source.value``, when it is not the input's:
        a span of an assembled trace is set aside alone, as OTLP protobuf)."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("the dead-letter producer is not started")
        deliveries = [
            await producer.send(
                self.topic,
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


async def _stop_quietly(producer: AIOKafkaProducer) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 5.0)
    except Exception:
        return
