"""Stage 2's consumer: its own group (``<group>-sessions``), so that a rebalance of the traces topic (KEDA scaling
on lag) leaves the conversations where they are, and the other way round; started once the broker answered,
after the check that the internal topic is there and compacts."""

from __future__ import annotations

import contextlib

from aiokafka import AIOKafkaConsumer

from sidecar.runtime.clients import ClientOptions
from sidecar.runtime.sessions.topic import check_topic

__all__ = ["session_group", "start_session_consumer"]


def session_group(group_id: str) -> str:
    return f"{group_id}-sessions"


async def start_session_consumer(options: ClientOptions, topic: str) -> tuple[AIOKafkaConsumer, int]:
    """The started consumer and the topic's partition count (:class:`StartupFailure` when the topic is unfit)."""
    if options.group_id is None:
        raise ValueError("conversations need the consumer group of the service")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=options.bootstrap_servers,
        group_id=session_group(options.group_id),
        # Nothing is committed: every assignment reads its partitions from the beginning.
        **{**options.consumer, "enable_auto_commit": False, "auto_offset_reset": "earliest"},
    )
    await consumer.start()
    try:
        partitions = await check_topic(
            consumer, topic, {"bootstrap_servers": options.bootstrap_servers, **options.producer}
        )
    except BaseException:
        with contextlib.suppress(Exception):
            await consumer.stop()
        raise
    return consumer, partitions
