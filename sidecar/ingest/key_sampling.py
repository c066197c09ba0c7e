"""Sampling decided from a record's key, before the record is decoded.

With the Collector's ``partition_traces_by_id``, its Kafka exporter splits every export by trace and keys
each record with that trace's id as 32 lowercase hex characters (``pcommon.TraceID.String()``), so a record
holds one trace and its key names it. Sampling is a function of the trace id alone (the same on every
replica), so when every scorer samples that trace out, the record can be counted and committed without
being decoded or walked: most of what a record costs. A key that is not a trace id (another producer, a
missing key, the all-zero id) says nothing, and the record is decoded as always. A key that looks like one is
trusted only once decoding has confirmed it (sidecar.runtime.records).
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.conventions.selection import sample_score

__all__ = ["KeySampler", "trace_id_from_key"]

_HEX = frozenset(b"0123456789abcdefABCDEF")
_NO_TRACE = bytes(16)


def trace_id_from_key(key: bytes | None) -> bytes | None:
    """The trace id a record key names (32 hex characters), or None when the key is not one."""
    if key is None or len(key) != 32 or not _HEX.issuperset(key):
        return None
    trace_id = bytes.fromhex(key.decode("ascii"))
    return None if trace_id == _NO_TRACE else trace_id


class KeySampler:
    """Whether every scorer samples a trace out, from its id. ``rates``: each scorer's sampling rate."""

    def __init__(self, rates: Iterable[float]) -> None:
        rates = tuple(rates)
        # A scorer that keeps every trace keeps every record: nothing can be skipped.
        self.useful = bool(rates) and all(rate < 1.0 for rate in rates)
        self._highest = max(rates, default=1.0)

    def samples_out(self, trace_id: bytes) -> bool:
        # A lower rate keeps a subset of what a higher one keeps: the highest rate decides for all.
        return self._highest <= 0.0 or sample_score(trace_id) >= self._highest
