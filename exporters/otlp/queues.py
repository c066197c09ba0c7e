"""Delivery (``flush``, at-least-once as the runtime needs it): export queues and the processors feeding them.

The SDK's ``BatchSpanProcessor`` drops a batch whose export failed and its ``force_flush`` does not
report export failures, so this module has its own small processors feeding an export queue per signal,
with one worker thread each: the SDK exporters are synchronous (and retry with backoff within
``timeout_s``), so exports never run on the event loop. A batch whose export failed is *kept* and
exported again by the next ``flush``; ``flush`` returns ``True`` only when everything submitted before it
was exported, so a runtime that commits after a ``True`` flush never commits past a lost span, even if it
calls ``flush`` again instead of rewinding. The queues are bounded (``max_queued`` items per signal):
``submit`` waits for room, which keeps the run in flight so the runtime pauses its consumer. Only items
put past twice the bound (or after close) are dropped, counted, and fail the next flush.

A queue can be *disabled* (an optional signal the receiver does not take): what it holds is discarded,
what is put later is ignored, and its flushes confirm at once. Discarded items are counted apart from
dropped ones: a disabled signal is a decision, not a loss that should fail a flush.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context, attach, detach, set_value
from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

# The package's logger: records are named exporters.otlp whichever of its modules logs.
log = logging.getLogger("exporters.otlp")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Item(Generic[T]):
    seq: int
    value: T


class _ExportQueue(Generic[T]):
    """A bounded FIFO exported in batches by one worker thread, with failures kept for the next flush.

    Every item gets a sequence number. ``flush_sync`` puts failed items back in front, asks for an export
    now, waits until every item numbered up to the last one put before the call is no longer queued or
    being exported, and reports ``True`` only when none of them failed and nothing was dropped since the
    previous flush. Items keep their order: failed items are always older than queued ones.
    """

    def __init__(
        self,
        name: str,
        export: Callable[[Sequence[T]], bool],
        *,
        max_batch: int = 512,
        schedule_delay_s: float = 0.2,
        max_queued: int = 20_000,
    ) -> None:
        self.name = name
        self._export = export
        self._max_batch = max_batch
        self._delay = schedule_delay_s
        self._max_queued = max_queued
        self._cond = threading.Condition()
        self._queue: deque[_Item[T]] = deque()
        self._inflight: list[_Item[T]] = []
        self._failed: list[_Item[T]] = []
        self._next_seq = 0
        self._urgent = False
        self._stopping = False
        self._disabled = False
        self._dropped_since_flush = 0
        self._thread: threading.Thread | None = None
        self.on_room: Callable[[], None] | None = None  # called from the worker after each export
        # Counters (items), for tests and metrics.
        self.exported = 0
        self.failed_exports = 0
        self.dropped = 0
        self.discarded = 0  # held or put after disable()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"otlp-export-{self.name}", daemon=True)
            self._thread.start()

    @property
    def outstanding(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._inflight) + len(self._failed)

    @property
    def disabled(self) -> bool:
        return self._disabled

    def disable(self) -> int:
        """Discard what is held and ignore what comes; returns how many items were discarded. A batch being
        exported meanwhile is discarded when its export returns."""
        with self._cond:
            self._disabled = True
            discarded = len(self._queue) + len(self._failed)
            self._queue.clear()
            self._failed = []
            self.discarded += discarded
            self._cond.notify_all()
            return discarded

    def has_room(self, items: int) -> bool:
        """Whether ``items`` more fit (an empty queue takes any number: a run is never refused forever)."""
        with self._cond:
            held = len(self._queue) + len(self._failed)
            return self._disabled or held == 0 or held + items <= self._max_queued

    def put(self, value: T) -> None:
        with self._cond:
            if self._disabled:
                self.discarded += 1
                return
            # submit() waits for room below max_queued: this ceiling is the last resort, never the rule.
            if self._stopping or len(self._queue) + len(self._failed) >= 2 * self._max_queued:
                self.dropped += 1
                self._dropped_since_flush += 1
                if self._dropped_since_flush == 1:
                    log.warning("OTLP %s queue full or closed: dropping (counted; the next flush fails)", self.name)
                return
            self._next_seq += 1
            self._queue.append(_Item(self._next_seq, value))
            if len(self._queue) == 1 or len(self._queue) >= self._max_batch:
                self._cond.notify_all()

    def _pending_up_to(self, target: int) -> bool:
        return bool(self._queue and self._queue[0].seq <= target) or bool(
            self._inflight and self._inflight[0].seq <= target
        )

    def begin_flush(self) -> int:
        """Put failed items back in front and ask for an export now; returns the flush's target."""
        with self._cond:
            target = self._next_seq
            if self._failed:
                self._queue.extendleft(reversed(self._failed))
                self._failed = []
            self._urgent = True
            self._cond.notify_all()
            return target

    def finish_flush(self, target: int, timeout_s: float) -> bool:
        """Wait for every item up to ``target``; ``True`` when all were exported and none was dropped."""
        with self._cond:
            done = self._cond.wait_for(lambda: not self._pending_up_to(target), timeout=max(timeout_s, 0.0))
            failed = sum(1 for item in self._failed if item.seq <= target)
            dropped, self._dropped_since_flush = self._dropped_since_flush, 0
        if failed or dropped:
            log.warning(
                "OTLP %s: %d items not exported (kept for the next flush), %d dropped since the last flush",
                self.name,
                failed,
                dropped,
            )
        return done and not failed and not dropped

    def flush_sync(self, timeout_s: float) -> bool:
        return self.finish_flush(self.begin_flush(), timeout_s)

    def stop_sync(self, timeout_s: float) -> bool:
        """Export what is queued (one attempt), then stop the worker. ``True`` when it stopped in time."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(max(timeout_s, 0.0))
            if thread.is_alive():
                return False
        with self._cond:
            abandoned = len(self._queue) + len(self._failed)
        if abandoned:
            log.warning("OTLP %s: closing with %d items not exported", self.name, abandoned)
        return True

    def _run(self) -> None:
        # Exports must not be traced themselves (an instrumented HTTP or gRPC client would loop).
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            while self._run_once():
                pass
        finally:
            detach(token)

    def _run_once(self) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._queue) or self._stopping)
            if not self._queue:
                return False  # stopping, nothing left
            if not (self._urgent or self._stopping) and len(self._queue) < self._max_batch:
                self._cond.wait_for(
                    lambda: self._urgent or self._stopping or len(self._queue) >= self._max_batch,
                    timeout=self._delay,
                )
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))]
            self._inflight = batch
        try:
            ok = self._export([item.value for item in batch])
        except Exception:
            log.exception("OTLP %s export raised", self.name)
            ok = False
        with self._cond:
            self._inflight = []
            if ok:
                self.exported += len(batch)
            elif self._disabled:
                self.discarded += len(batch)
            else:
                self.failed_exports += len(batch)
                self._failed.extend(batch)
            if not self._queue:
                self._urgent = False
            self._cond.notify_all()
        if self.on_room is not None:
            self.on_room()
        return True


class _QueueSpanProcessor(SpanProcessor):
    """Hands every ended span to an export queue (what ``BatchSpanProcessor`` does, minus the loss)."""

    def __init__(self, queue: _ExportQueue[ReadableSpan]) -> None:
        self._queue = queue

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._queue.put(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._queue.flush_sync(timeout_millis / 1000)


class _QueueLogProcessor(LogRecordProcessor):
    def __init__(self, queue: _ExportQueue[ReadableLogRecord]) -> None:
        self._queue = queue

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        resource = log_record.resource if log_record.resource is not None else Resource.get_empty()
        self._queue.put(
            ReadableLogRecord(
                log_record=log_record.log_record,
                resource=resource,
                instrumentation_scope=log_record.instrumentation_scope,
                limits=log_record.limits,
            )
        )

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._queue.flush_sync(timeout_millis / 1000)
