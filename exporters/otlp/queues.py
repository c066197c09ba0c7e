"""How the OTLP sink's spans and log records reach the delivery queues, and how each signal is exported.

The SDK's ``BatchSpanProcessor`` drops a batch whose export failed and its ``force_flush`` does not report
export failures, so the sink has its own small processors: each ended span (each emitted log record) is put
on the signal's :class:`~exporters.delivery.DeliveryQueue`, which gives it the delivery rules of every sink
(bounded, batched, flushed to a watermark; docs/delivery.md). The processors are called on the event loop,
where the sink ends its spans.

The SDK exporters are synchronous (and retry with backoff within ``timeout_s``): :class:`SignalExport`,
the queues' transport, runs each export on a thread of its own per signal, never on the event loop, and
hands the result back to the loop, where the sink decides what it means (``exporters.otlp.signals``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context, attach, detach, set_value
from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from exporters.delivery import DeliveryQueue, Entry, Outcome, Settle

__all__ = ["QueueLogProcessor", "QueueSpanProcessor", "SignalExport"]

T = TypeVar("T")
A = TypeVar("A")


class SignalExport(Generic[T, A]):
    """A delivery transport: ``export`` (blocking: the SDK exporter, and what the sink asks the receiver
    after a failure) on this signal's own thread; ``judge`` (on the event loop) turns its answer into the
    batch's outcome."""

    def __init__(self, thread_name: str, export: Callable[[Sequence[T]], A], judge: Callable[[A], Outcome]) -> None:
        self.thread_name = thread_name
        self._export = export
        self._judge = judge
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)

    async def send(self, batch: Sequence[Entry[T]], settle: Settle[T]) -> None:
        values = [entry.value for entry in batch]
        answer = await asyncio.get_running_loop().run_in_executor(self._executor, self._export_quietly, values)
        settle(batch, self._judge(answer))

    def _export_quietly(self, values: Sequence[T]) -> A:
        # Exports must not be traced themselves (an instrumented HTTP or gRPC client would loop).
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            return self._export(values)
        finally:
            detach(token)

    def shutdown(self) -> None:
        """Let the thread go once its export returns (the sink shuts the exporter down, which ends it soon)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class QueueSpanProcessor(SpanProcessor):
    """Puts every ended span on the spans' delivery queue (what ``BatchSpanProcessor`` does, minus the loss).
    The sink waited for room before it started the run's spans."""

    def __init__(self, queue: DeliveryQueue[ReadableSpan]) -> None:
        self._queue = queue

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._queue.put_nowait(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        # Flushing waits on the event loop, which calls this: the sink's own flush is the one to use.
        return self._queue.outstanding == 0


class QueueLogProcessor(LogRecordProcessor):
    def __init__(self, queue: DeliveryQueue[ReadableLogRecord]) -> None:
        self._queue = queue

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        resource = log_record.resource if log_record.resource is not None else Resource.get_empty()
        self._queue.put_nowait(
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
        return self._queue.outstanding == 0
