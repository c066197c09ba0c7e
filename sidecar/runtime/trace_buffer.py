"""Spans grouped by trace until the trace is ready to score (``scope: trace``).

The Collector's Kafka exporter keys records by trace id (``partition_traces_by_id``), so every span of a
trace reaches the same partition, and so the same consumer, usually over several records (it batches by
time). The buffer groups them as records arrive and says when a trace is **ready**:

- ``root_idle``: its local root span has arrived (spans are exported when they end, so the root has
  ended) and no span of it arrived for ``idle_s``: the usual end of a trace, detected without a fixed
  delay from the first span, and without waiting for stragglers longer than ``idle_s``;
- ``max_wait``: ``max_wait_s`` passed since its first span (a root that never ends, or spans lost
  upstream): scored as it is, and the run says it was incomplete;
- ``evicted``: it outgrew ``max_trace_bytes``, or the buffer is full and stuck (see below): scored at once
  from what arrived, and marked incomplete.

Each buffered trace keeps what holds back the records that brought its spans (their claims): the runtime keeps
those records uncommitted until the trace is scored, skipped or given up on, and exported, then releases them. The
buffer counts its spans' bytes, so the runtime can pause intake at ``max_traces`` / ``max_bytes`` (backpressure:
nothing is dropped). A full buffer whose traces all wait for spans still behind the paused intake cannot
get a trace ready but at ``max_wait_s``; after ``idle_s`` of that the runtime takes the oldest out
(``take_oldest``, scored as ``evicted``) rather than stall. A span arriving for a trace already scored is
*late*: counted, not scored again.
"""

from __future__ import annotations

import builtins
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from opentelemetry.proto.trace.v1.trace_pb2 import Span, TracesData

from sidecar.conventions.trace_runs import TraceSpan
from sidecar.core.runs import ReadyReason, ResourceValue

__all__ = ["BufferedRecord", "BufferedSpan", "BufferedTrace", "Held", "TraceBuffer", "TraceBufferLimits"]

P = TypeVar("P", bound=Hashable)  # a partition

_FORGET_AFTER = 100_000  # scored (or cut) traces remembered to recognise late spans


class Held(Protocol):
    """What holds back a record that brought spans to a trace (its claim's part): released once the trace is done."""

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TraceBufferLimits:
    """``runtime.trace_buffer``: readiness (``idle_s``, ``max_wait_s``) and bounds. At ``max_traces`` or
    ``max_bytes`` intake pauses; a trace past ``max_trace_bytes`` is scored at once (``evicted``)."""

    idle_s: float = 5.0
    max_wait_s: float = 120.0
    max_traces: int = 20_000
    max_bytes: int = 64 * 1024 * 1024
    max_trace_bytes: int = 4 * 1024 * 1024

    def buffer(self, clock: Callable[[], float] = time.monotonic) -> TraceBuffer[Any]:
        return TraceBuffer(
            idle_s=self.idle_s, max_wait_s=self.max_wait_s, max_trace_bytes=self.max_trace_bytes, clock=clock
        )

    def full(self, buffer: TraceBuffer[Any]) -> bool:
        return len(buffer) >= self.max_traces or buffer.bytes >= self.max_bytes


@dataclass(frozen=True, slots=True)
class BufferedSpan:
    """A span kept as its encoded bytes with what readiness reads: a decoded span keeps its whole record's
    decoding alive, several times the record's size (docs/whole-trace.md has the figures)."""

    data: bytes
    span_id: bytes
    parent_span_id: bytes
    flags: int
    service: str | None
    resource: tuple[tuple[str, ResourceValue], ...]
    offset: int

    @classmethod
    def of(cls, item: TraceSpan) -> BufferedSpan:
        span = item.span
        return cls(
            span.SerializeToString(), span.span_id, span.parent_span_id, span.flags, item.service, item.resource,
            item.offset,
        )  # fmt: skip

    def decode(self) -> TraceSpan:
        return TraceSpan(Span.FromString(self.data), self.service, self.resource, self.offset)


@dataclass(frozen=True, slots=True)
class BufferedRecord:
    """A record holding spans of this trace alone (the Collector's ``partition_traces_by_id`` writes one trace
    per record), kept as it came: its spans are neither re-encoded one by one when buffered nor decoded one by
    one when the trace is assembled, and each costs no object of its own meanwhile."""

    data: bytes
    offset: int
    service: str | None
    resource: tuple[tuple[str, ResourceValue], ...]

    def decode(self) -> list[TraceSpan]:
        traces = TracesData.FromString(self.data)
        service, resource, offset = self.service, self.resource, self.offset
        return [
            TraceSpan(span, service, resource, offset)
            for resource_spans in traces.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]


@dataclass(slots=True)
class BufferedTrace(Generic[P]):
    trace_id: bytes
    partition: P
    first_seen: float
    last_seen: float
    # In arrival order: spans kept one by one, and records kept as they came.
    parts: list[BufferedSpan | BufferedRecord] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)  # a part of the claim of each record that brought its spans
    # Every span's parent by span id: each span counts once, and the orphans say where a trace starts.
    parents: dict[bytes, bytes] = field(default_factory=dict)
    # The spans whose exporter did not say whether their parent is remote (older SDKs); None: none so far.
    unflagged: set[bytes] | None = None
    bytes: int = 0
    root_seen: bool = False
    # Spans of this trace were taken out before (evicted without a run): what is here is not the whole trace.
    cut_short: bool = False
    first_ms: int | None = None  # the oldest timestamp of the records that brought its spans
    _rootless_at: int = -1  # span count at which root_arrived() last answered False (asked again only after)

    @property
    def span_count(self) -> int:
        return len(self.parents)

    @property
    def spans(self) -> list[BufferedSpan]:
        """The spans kept one by one (not those of records kept whole)."""
        return [part for part in self.parts if isinstance(part, BufferedSpan)]

    @property
    def whole(self) -> list[BufferedRecord]:
        """The records kept as they came."""
        return [part for part in self.parts if isinstance(part, BufferedRecord)]

    def add(
        self,
        spans: Sequence[TraceSpan],
        offset: int,
        now: float,
        timestamp_ms: int | None = None,
        held: Held | None = None,
    ) -> None:
        record = spans[0].record if spans else None
        links = _links_if_whole(spans, self.parents) if record is not None else None
        if links is not None:
            assert record is not None
            first = spans[0]
            self.parts.append(BufferedRecord(record, offset, first.service, first.resource))
            self.bytes += len(record)
            for span_id, parent, flags in links:
                self._link(span_id, parent, flags)
        else:
            for item in spans:
                if item.span.span_id in self.parents:
                    continue  # a redelivered record, or the Collector's retry: each span once
                kept = BufferedSpan.of(item)
                self.parts.append(kept)
                self.bytes += len(kept.data)
                self._link(kept.span_id, kept.parent_span_id, kept.flags)
        if held is not None:
            self.held.append(held)
        self.last_seen = now
        if timestamp_ms is not None and (self.first_ms is None or timestamp_ms < self.first_ms):
            self.first_ms = timestamp_ms

    def _link(self, span_id: builtins.bytes, parent: builtins.bytes, flags: int) -> None:
        self.parents[span_id] = parent
        if not flags & _HAS_IS_REMOTE:
            if self.unflagged is None:
                self.unflagged = set()
            self.unflagged.add(span_id)
        if not self.root_seen and _starts_here(parent, flags):
            self.root_seen = True

    def release_held(self) -> None:
        """The trace is done: release what held back each record that brought it spans."""
        held, self.held = self.held, []
        for each in held:
            each.release()

    def decoded(self) -> list[TraceSpan]:
        """Its spans, decoded (to assemble it), in the order they arrived."""
        spans: list[TraceSpan] = []
        for part in self.parts:
            if isinstance(part, BufferedSpan):
                spans.append(part.decode())
            else:
                spans.extend(part.decode())
        return spans

    def root_arrived(self) -> bool:
        """A root span without a parent, or with a remote one, has arrived. When the exporter did not say
        whether parents are remote (older SDKs leave ``Span.flags`` bit 8 unset), the trace's spans hanging
        under exactly one span whose parent is not among them is taken as that: the entry span of this
        service, under a caller's span in another service."""
        if self.root_seen:
            return True
        parents = self.parents
        if self._rootless_at == len(parents) or not self.unflagged:
            self._rootless_at = len(parents)
            return False
        orphans = [span_id for span_id, parent in parents.items() if parent not in parents]
        if len(orphans) == 1 and orphans[0] in self.unflagged:
            return True
        self._rootless_at = len(parents)
        return False


def _links_if_whole(
    spans: Sequence[TraceSpan], parents: Mapping[bytes, bytes]
) -> list[tuple[bytes, bytes, int]] | None:
    """(span id, parent id, flags) of each span when their record can be kept whole: every span is new (none
    seen before, none twice) and they share one resource; else None (the spans are kept one by one)."""
    first = spans[0]
    service, resource = first.service, first.resource
    links: list[tuple[bytes, bytes, int]] = []
    seen: set[bytes] = set()
    for item in spans:
        span = item.span
        span_id = span.span_id
        if span_id in parents or span_id in seen or item.service != service or item.resource != resource:
            return None
        seen.add(span_id)
        links.append((span_id, span.parent_span_id, span.flags))
    return links


# Span.flags bits 8 and 9 (OTLP): whether the exporter knew if the parent was remote, and that it was.
_HAS_IS_REMOTE = 0x100
_PARENT_IS_REMOTE = 0x100 | 0x200


def _starts_here(parent: bytes, flags: int) -> bool:
    return not parent or flags & _PARENT_IS_REMOTE == _PARENT_IS_REMOTE


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
        # By (partition, trace id): a trace whose spans reach two partitions (records not keyed by trace id)
        # is two traces, each committed with its own partition's records.
        self._traces: dict[tuple[P, bytes], BufferedTrace[P]] = {}  # in first-span order
        # The same keys by last span (least recent first), so that a tick reads only the traces gone quiet.
        self._by_activity: OrderedDict[tuple[P, bytes], None] = OrderedDict()
        self._oversized: dict[tuple[P, bytes], None] = {}
        self._scored: OrderedDict[tuple[P, bytes], None] = OrderedDict()
        # Traces taken out without a run (no agent span had arrived): their later spans start them anew.
        self._cut: OrderedDict[tuple[P, bytes], None] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._traces)

    def add(
        self,
        partition: P,
        offset: int,
        trace_id: bytes,
        spans: list[TraceSpan],
        timestamp_ms: int | None = None,
        held: Held | None = None,
    ) -> Literal["buffered", "late"]:
        """Buffer a record's spans of one trace (``timestamp_ms``: the record's; ``held``: what holds the record
        back, kept with the trace when it is buffered); ``late`` when the trace was already scored."""
        key = (partition, trace_id)
        if key in self._scored:
            return "late"
        now = self._clock()
        trace = self._traces.get(key)
        if trace is None:
            trace = self._traces[key] = BufferedTrace(trace_id, partition, now, now)
            if key in self._cut:
                del self._cut[key]
                trace.cut_short = True
        before = trace.bytes
        trace.add(spans, offset, now, timestamp_ms, held)
        self.bytes += trace.bytes - before
        self._by_activity[key] = None
        self._by_activity.move_to_end(key)
        if trace.bytes > self.max_trace_bytes:
            self._oversized[key] = None
        return "buffered"

    def due(self, limit: int | None = None) -> list[tuple[BufferedTrace[P], ReadyReason]]:
        """Take the traces ready now out of the buffer, with why: past the per-trace bound, then quiet with
        their root (least recently active first), then at ``max_wait_s`` (oldest first). At most ``limit``:
        the others stay buffered, ready, for the next call.

        Cost: the traces gone quiet and those at ``max_wait_s``, not every buffered trace."""
        now = self._clock()
        room = len(self._traces) if limit is None else limit
        ready: dict[tuple[P, bytes], ReadyReason] = {}
        for key in self._oversized:
            if len(ready) >= room:
                break
            ready[key] = "evicted"
        if len(ready) < room:
            for key in self._by_activity:
                trace = self._traces[key]
                if now - trace.last_seen < self.idle_s or len(ready) >= room:
                    break  # the rest were active more recently
                if key not in ready and trace.root_arrived():
                    ready[key] = "root_idle"
        if len(ready) < room:
            for key, trace in self._traces.items():
                if now - trace.first_seen < self.max_wait_s or len(ready) >= room:
                    break  # the rest started more recently
                ready.setdefault(key, "max_wait")
        taken = [(self._traces[key], reason) for key, reason in ready.items()]
        for trace, _ in taken:
            self._take(trace)
        return taken

    def oldest_record_ms(self, look: int = 16) -> int | None:
        """About the oldest record timestamp of the buffered traces: the least of the ``look`` traces that arrived
        first (records of a partition are stamped in order; across partitions nearly so)."""
        oldest: int | None = None
        for _, trace in zip(range(look), self._traces.values(), strict=False):
            if trace.first_ms is not None and (oldest is None or trace.first_ms < oldest):
                oldest = trace.first_ms
        return oldest

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

    def take_oldest(self, prefer: Callable[[BufferedTrace[P]], bool] | None = None) -> BufferedTrace[P] | None:
        """Take out the trace that arrived first, or the first that ``prefer`` accepts if any (``None``: nothing
        buffered): room for intake when the buffer is full and no trace can get ready without the spans
        behind the paused intake."""
        traces = self._traces.values()
        chosen = next((t for t in traces if prefer(t)), None) if prefer is not None else None
        chosen = chosen or next(iter(traces), None)
        if chosen is not None:
            self._take(chosen)
        return chosen

    def forget(self, trace: BufferedTrace[P]) -> None:
        """A trace taken out that made no run (no agent span of it had arrived): its later spans are not late,
        they are buffered anew, and that trace is marked cut short."""
        key = (trace.partition, trace.trace_id)
        self._scored.pop(key, None)
        self._cut[key] = None
        if len(self._cut) > _FORGET_AFTER:
            self._cut.popitem(last=False)

    def drop_partitions(self, partitions: Iterable[P]) -> list[BufferedTrace[P]]:
        """Forget the traces of revoked partitions, buffered and scored: their records are read again (by a
        new owner, or by this consumer if they come back) and their traces assembled anew."""
        lost = set(partitions)
        dropped = [t for t in self._traces.values() if t.partition in lost]
        for trace in dropped:
            self._remove((trace.partition, trace.trace_id))
        for remembered in (self._scored, self._cut):
            for key in [k for k in remembered if k[0] in lost]:
                del remembered[key]
        return dropped

    def _remove(self, key: tuple[P, bytes]) -> None:
        trace = self._traces.pop(key)
        del self._by_activity[key]
        self._oversized.pop(key, None)
        self.bytes -= trace.bytes

    def _take(self, trace: BufferedTrace[P]) -> None:
        key = (trace.partition, trace.trace_id)
        self._remove(key)
        self._scored[key] = None
        if len(self._scored) > _FORGET_AFTER:
            self._scored.popitem(last=False)
