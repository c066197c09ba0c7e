"""Kafka's default key partitioning (murmur2, as the Java client and aiokafka compute it), faster.

aiokafka's ``DefaultPartitioner`` hashes byte by byte in Python, a visible share of the sidecar's CPU for
the 32-byte trace-id keys of score records (docs/delivery.md has the figure). Same hash, same partitions
(a property test compares them), so score records still land where any Kafka client would put their key,
e.g. for co-partitioned joins.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Sequence

__all__ = ["KeyPartitioner", "murmur2"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


@functools.lru_cache(maxsize=4096)  # every scorer of a trace produces a record with the same key
def murmur2(data: bytes) -> int:
    """MurmurHash2 as ``org.apache.kafka.common.utils.Utils.murmur2`` (an unsigned 32-bit value)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length // 4
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail >= 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


class KeyPartitioner:
    """aiokafka's partitioner interface with the default's choices: murmur2 of the key, random if none."""

    def __call__(self, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        if key is None:
            return random.choice(available or all_partitions)
        return all_partitions[(murmur2(key) & 0x7FFFFFFF) % len(all_partitions)]
