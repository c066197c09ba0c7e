"""Spans grouped by trace until the trace is ready to score (``scope: trace``).

The Collector's Kafka exporter keys records by trace id (``partition_traces_by_id``), so every span of a
trace reaches the same partition, and so the same consumer, usually over several records (it batches by
time). The buffer groups them as records arrive and says when a trace is **ready**:

- ``root_idle``: its local root span has arrived (spans are exported when they end, so the root has
  ended) and no span of it arrived for ``idle_s``: the usual end of a trace, detected without a fixed
  delay from the first span, and without waiting for stragglers longer than ``idle_s``;
- ``max_wait``: ``max_wait_s`` passed since its first span (a root that never ends, or spans lost
  upstream): scored as it is, and the run says it was incomplete;
- ``evicted``: it outgrew ``max_trace_bytes``: scored at once from what arrived, and marked incomplete.

Each buffered trace remembers the records (partition, offset) that brought its spans: the runtime keeps
those records uncommitted until the trace is scored, skipped or given up on, and exported. The buffer
counts its spans' bytes, so the runtime can pause intake at ``max_bytes`` (backpressure: nothing is
dropped). A span arriving for a trace already scored is *late*: counted, not scored again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from sidecar.conventions.trace_runs import TraceSpan
from sidecar.core.runs import ReadyReason

__all__ = ["BufferedTrace", "TraceBuffer"]

P = TypeVar("P", bound=Hashable)  # a partition

_FORGET_AFTER = 100_000  # scored traces remembered to recognise late spans


@dataclass(slots=True)
class BufferedTrace(Generic[P]):
    trace_id: bytes
    partition: P
    first_seen: float
    last_seen: float
    spans: list[TraceSpan] = field(default_factory=list)
    records: set[int] = field(default_factory=set)  # offsets (on ``partition``) that brought its spans
    span_ids: set[bytes] = field(default_factory=set)
    bytes: int = 0
    root_seen: bool = False

    def add(self, spans: Iterable[TraceSpan], offset: int, now: float) -> None:
        for item in spans:
            span_id = item.span.span_id
            if span_id in self.span_ids:
                continue  # a redelivered record, or the Collector's retry: each span once
            self.span_ids.add(span_id)
            self.spans.append(item)
            self.bytes += item.span.ByteSize()
            if not self.root_seen and _starts_here(item):
                self.root_seen = True
        self.records.add(offset)
        self.last_seen = now

    def root_arrived(self) -> bool:
        """A root span without a parent, or with a remote one, has arrived. When the exporter did not say
        whether parents are remote (older SDKs leave ``Span.flags`` bit 8 unset), the trace's spans hanging
        under exactly one span whose parent is not among them is taken as that: the entry span of this
        service, under a caller's span in another service."""
        if self.root_seen:
            return True
        orphans = [item.span for item in self.spans if item.span.parent_span_id not in self.span_ids]
        return len(orphans) == 1 and not orphans[0].flags & _HAS_IS_REMOTE


# Span.flags bits 8 and 9 (OTLP): whether the exporter knew if the parent was remote, and that it was.
_HAS_IS_REMOTE = 0x100
_PARENT_IS_REMOTE = 0x100 | 0x200


def _starts_here(item: TraceSpan) -> bool:
    span = item.span
    return not span.parent_span_id or span.flags & _PARENT_IS_REMOTE == _PARENT_IS_REMOTE


class TraceBuffer(Generic[P]):
    def __init__(
        self,
        *,
        idle_s: float = 5.0,
        max_wait_s: float = 120.0,
        max_trace_bytes: int = 4 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_s = idle_s
        self.max_wait_s = max_wait_s
        self.max_trace_bytes = max_trace_bytes
        self._clock = clock
        self._traces: dict[bytes, BufferedTrace[P]] = {}
        self._scored: OrderedDict[bytes, None] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._traces)

    def add(self, partition: P, offset: int, trace_id: bytes, spans: list[TraceSpan]) -> Literal["buffered", "late"]:
        """Buffer a record's spans of one trace; ``late`` when the trace was already scored."""
        if trace_id in self._scored:
            return "late"
        now = self._clock()
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = BufferedTrace(trace_id, partition, now, now)
        before = trace.bytes
        trace.add(spans, offset, now)
        self.bytes += trace.bytes - before
        return "buffered"

    def due(self) -> list[tuple[BufferedTrace[P], ReadyReason]]:
        """Take the traces ready now out of the buffer, with why (oldest first)."""
        now = self._clock()
        ready: list[tuple[BufferedTrace[P], ReadyReason]] = []
        for trace in self._traces.values():
            if trace.bytes > self.max_trace_bytes:
                ready.append((trace, "evicted"))
            elif now - trace.last_seen >= self.idle_s and trace.root_arrived():
                ready.append((trace, "root_idle"))
            elif now - trace.first_seen >= self.max_wait_s:
                ready.append((trace, "max_wait"))
        for trace, _ in ready:
            self._take(trace)
        return ready

    def next_due_in(self) -> float | None:
        """Seconds until the next trace with a flagged root, or any trace at ``max_wait_s``, becomes ready
        with no new span (``None``: nothing buffered). Roots recognised only by shape are found by ``due``,
        which the runtime also calls at a steady pace."""
        if not self._traces:
            return None
        now = self._clock()
        soonest = min(
            min(t.first_seen + self.max_wait_s, t.last_seen + self.idle_s if t.root_seen else float("inf"))
            for t in self._traces.values()
        )
        return max(0.0, soonest - now)

    def drop_partitions(self, partitions: Iterable[P]) -> list[BufferedTrace[P]]:
        """Forget the traces of revoked partitions (their new owner re-reads their records)."""
        lost = set(partitions)
        dropped = [t for t in self._traces.values() if t.partition in lost]
        for trace in dropped:
            del self._traces[trace.trace_id]
            self.bytes -= trace.bytes
        return dropped

    def _take(self, trace: BufferedTrace[P]) -> None:
        del self._traces[trace.trace_id]
        self.bytes -= trace.bytes
        self._scored[trace.trace_id] = None
        if len(self._scored) > _FORGET_AFTER:
            self._scored.popitem(last=False)
