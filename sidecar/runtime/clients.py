"""Starting what needs the broker (the exporters, the dead-letter producer, the consumer), retrying while the
broker cannot be reached: pods commonly start before Kafka does (docs/worker-lifecycle.md, "Starting")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from sidecar.core import Flushable
from sidecar.ingest.deadletter import DEFAULT_MAX_REQUEST_SIZE
from sidecar.runtime.startup import EXIT_UNREACHABLE, BrokerWait, StartupFailure, quiet_connect_errors
from sidecar.runtime.stopping import cancel_and_wait

__all__ = ["BrokerClients", "ClientOptions", "start_clients"]

log = logging.getLogger(__name__)

# The attempt made at kafka.startup_timeout_s gets this long: a refused connection fails in milliseconds,
# and a broker that answers just then is not given up on.
_LAST_ATTEMPT_S = 2.0


@dataclass(frozen=True, slots=True)
class BrokerClients:
    producer: AIOKafkaProducer  # dead letters
    consumer: AIOKafkaConsumer


@dataclass(frozen=True, slots=True)
class ClientOptions:
    bootstrap_servers: str
    group_id: str | None
    consumer: dict[str, Any]
    producer: dict[str, Any]
    startup_timeout_s: float
    # The dead-letter producer's (kafka.max_request_size): its letters are cut to fit it.
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE


async def start_clients(
    options: ClientOptions,
    sinks: Sequence[Flushable],
    stop: asyncio.Event,
    *,
    waiting: Callable[[str], None],
    phase: Callable[[str], None],
) -> BrokerClients | None:
    """Start the sinks, the dead-letter producer and the consumer, retrying while the broker cannot be reached
    (up to ``startup_timeout_s``, then :class:`StartupFailure`); None when the stop came first. ``waiting``
    hears why the start waits (``/readyz``; ``""`` once done), ``phase`` what it is doing (a watchdog's line)."""
    bootstrap = options.bootstrap_servers
    wait = BrokerWait(bootstrap, options.startup_timeout_s)
    # Before a first failure (a connect that hangs on a host dropping packets), /readyz says so already.
    waiting(f"connecting to the Kafka broker at {bootstrap}")
    stopped = asyncio.ensure_future(stop.wait())
    try:
        with quiet_connect_errors() as connect_errors:
            while True:
                phase(f"starting: connecting to the Kafka broker at {bootstrap}")
                step = ["starting"]
                attempt = asyncio.ensure_future(_start_attempt(options, sinks, step))
                await asyncio.wait(
                    {attempt, stopped}, timeout=max(wait.left(), _LAST_ATTEMPT_S), return_when=asyncio.FIRST_COMPLETED
                )
                if not attempt.done():
                    await cancel_and_wait(attempt, timeout_s=5.0)  # its own cleanup stops what it started
                    if stopped.done():
                        return None
                    raise wait.give_up(f"{step[0]} did not finish")
                try:
                    clients = attempt.result()
                except KafkaConnectionError as exc:
                    detail = connect_errors.last or str(exc)
                    connect_errors.last = None
                    delay = wait.failed(f"{step[0]}: cannot connect ({detail})")
                except KafkaError as exc:  # the broker answered and refused (security settings, versions)
                    raise StartupFailure(
                        f"the Kafka broker at {bootstrap} refused the sidecar ({step[0]}: "
                        f"{type(exc).__name__}: {exc}): check kafka.security and kafka.bootstrap_servers",
                        EXIT_UNREACHABLE,
                    ) from exc
                else:
                    if wait.attempts:
                        log.info("the Kafka broker at %s answered after %d failed attempts", bootstrap, wait.attempts)
                    return clients
                waiting(wait.reason)
                await asyncio.wait({stopped}, timeout=delay)
                if stopped.done():
                    return None
    finally:
        stopped.cancel()
        waiting("")


async def _start_attempt(options: ClientOptions, sinks: Sequence[Flushable], step: list[str]) -> BrokerClients:
    """One start of every client that needs the broker; a failure stops the clients it made, so a retry starts
    afresh. Sinks that started stay started: a sink's ``start`` is a no-op once it succeeded."""
    producer: AIOKafkaProducer | None = None
    consumer: AIOKafkaConsumer | None = None
    try:
        for sink in sinks:
            step[0] = f"starting exporter {sink.name}"
            await sink.start()
        step[0] = "starting the dead-letter producer"
        producer = AIOKafkaProducer(
            bootstrap_servers=options.bootstrap_servers,
            acks="all",
            **{"max_request_size": options.max_request_size, **options.producer},
        )
        await producer.start()
        step[0] = "starting the consumer"
        consumer = AIOKafkaConsumer(
            bootstrap_servers=options.bootstrap_servers,
            group_id=options.group_id,
            **{"auto_offset_reset": "earliest", **options.consumer, "enable_auto_commit": False},
        )
        await consumer.start()
    except BaseException:
        for client in (consumer, producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.stop(), 5.0)
        raise
    return BrokerClients(producer, consumer)
