"""One delivery loop for every sink: a bounded queue, one sender task, and a flush to a watermark.

A sink puts items (a score record, an annotation, a span); one sender task takes them in batches of
``batch_size`` (after up to ``linger_s`` for a full one) and hands each batch to the sink's transport,
which reports an :class:`~exporters.delivery.outcome.Outcome` per batch, at once (an HTTP answer) or later
from a callback (a Kafka delivery), through ``settle``. The queue applies the sink's ``DeliveryRules``:

* **bounded**: ``put`` waits while ``max_pending`` items are unconfirmed (backpressure: the run stays in
  flight, so the runtime pauses its consumer); nothing is ever dropped for lack of room;
* **sequence numbers and epochs**: every item is numbered and belongs to the epoch of the flushes begun
  before it was put, so a flush waits only for what was put before it;
* **resending**: a failed item is sent again after an exponential backoff with jitter, or at the next
  flush only (``retry_between_flushes``), never before a ``Retry-After``; a rejected batch is split and
  its items sent alone to find the culprit; items that must wait (``WaitRule``) wait with their deadline;
* **flush**: ``True`` only when every item put before the call is confirmed and nothing was dropped since
  the last flush, save what a checkpointed ``set_aside`` took (the dead-letter topic, flushed after the sinks
  in the same checkpoint: a steady refusal costs no commit). It sends failed items again at once
  (``Retry-After`` permitting) and returns ``False`` as soon as one of its items fails again, or at its
  timeout;
* **drops**: counted per reason through ``observer.exporter_dropped`` and logged, each with the item (its
  score id) and the destination's words, then handed to ``set_aside`` (the score dead-letter topic:
  ``exporters.dead_letters``), so that what a destination never takes is kept, not lost;
* **close**: stops the sender (after one last attempt at what is queued, when asked to drain); what is
  abandoned is counted in a warning.

Everything runs on the event loop: the transport's own blocking work (an SDK exporter) goes to a thread.
One idea, in one module past the usual size: every rule above acts on the same entries and counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from exporters.delivery.outcome import DeliveryRules, Outcome, Wording
from sidecar.core.observers import ServiceObserver
from sidecar.scoring.backoff import equal_jitter

__all__ = ["DeliveryQueue", "Entry", "SetAside", "Settle", "Transport"]

V = TypeVar("V")

_WAIT_LOG_EVERY_S = 30.0


class Entry(Generic[V]):
    """One item on its way, with what the queue knows of its attempts."""

    __slots__ = ("alone", "epoch", "failures", "inflight", "not_before", "retry_after", "seq", "value", "wait_since")

    def __init__(self, value: V, seq: int, epoch: int) -> None:
        self.value = value
        self.seq = seq
        self.epoch = epoch  # the flushes begun before it was put: the first flush that must confirm it
        self.not_before = 0.0  # monotonic: not sent before
        self.retry_after = False  # not_before was set by the destination: a flush does not bring it forward
        self.failures = 0  # failed attempts in a row (the backoff)
        self.wait_since: float | None = None  # the destination's first "not yet" (WaitRule)
        self.alone = False  # rejected within a batch: sent alone to find the culprit
        self.inflight = False


Settle = Callable[[Sequence[Entry[V]], Outcome], None]
# What becomes of a dropped item after it is counted and logged: (item, reason, the destination's words).
SetAside = Callable[[V, str, str], None]


class Transport(Protocol[V]):
    def send(self, batch: Sequence[Entry[V]], settle: Settle[V]) -> Awaitable[None]:
        """Send ``batch``; ``settle`` each entry exactly once, before returning or later (a delivery
        callback). The queue sends the next batch once this returns. Raising settles what is left as
        failed."""
        ...


class _FlushWait:
    __slots__ = ("changed", "epoch", "failed")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.failed = False  # an item of this flush failed during it
        self.changed = asyncio.Event()


class DeliveryQueue(Generic[V]):
    """The delivery of one sink (or one signal of a sink): see the module doc.

    ``describe(value)`` names an item in log lines (with its score id); ``log`` is the sink's logger, so lines carry the
    sink's name. ``set_aside(value, reason, detail)`` receives every dropped item (the score dead letters); it must not
    raise and must not wait. ``set_aside_checkpointed``: ``set_aside`` keeps what it receives on something the same
    checkpoint flushes after this queue (the score dead-letter topic), so a drop it took does not fail :meth:`flush`;
    otherwise (no set-aside, or one that keeps nothing) it does. Counters for tests and metrics: ``confirmed``,
    ``failed_attempts``, ``dropped`` (per reason), ``discarded``, ``last_error``.
    """

    def __init__(
        self,
        name: str,
        transport: Transport[V],
        rules: DeliveryRules,
        *,
        wording: Wording,
        describe: Callable[[V], str],
        log: logging.Logger,
        observer: ServiceObserver | None = None,
        set_aside: SetAside[V] | None = None,
        set_aside_checkpointed: bool = False,
    ) -> None:
        self.name = name
        self.rules = rules
        self._set_aside = set_aside
        self._set_aside_checkpointed = set_aside is not None and set_aside_checkpointed
        self._transport = transport
        self._wording = wording
        self._describe = describe
        self._log = log
        self._observer = observer or ServiceObserver()
        self._ready: deque[Entry[V]] = deque()
        self._alone = 0  # entries in _ready to be sent alone
        self._later: list[Entry[V]] = []  # failed or waiting, each with its not_before
        self._next_due = math.inf  # the earliest not_before in _later
        self._open: dict[int, int] = {}  # epoch -> items not confirmed yet
        self._unsettled = 0
        self._inflight = 0
        self._seq = 0
        self._epoch = 0
        self._flushes: list[_FlushWait] = []
        self._dropped_since_flush = 0
        self._wake = asyncio.Event()  # something to send, a flush, a close
        self._room = asyncio.Event()
        self._room.set()
        self._settled = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        # Stamped on each start: a delivery reported after a close (a Kafka callback) is ignored.
        self._session: object | None = None
        self._urgent = False  # a flush or a close: no lingering
        self._closing = False
        self._discarding = False
        self._last_wait_log = -math.inf
        self.confirmed = 0
        self.failed_attempts = 0
        self.dropped: dict[str, int] = dict.fromkeys(rules.drop_reasons, 0)
        self.discarded = 0
        self.last_error: str | None = None

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._sender is not None

    @property
    def outstanding(self) -> int:
        """Items put and not confirmed (queued, in flight, waiting to be sent again)."""
        return self._unsettled

    @property
    def waiting(self) -> int:
        """Items waiting under the ``WaitRule`` (a span the destination does not have yet)."""
        return sum(1 for entry in self._later if entry.wait_since is not None)

    @property
    def discarding(self) -> bool:
        return self._discarding

    def has_room(self, items: int = 1) -> bool:
        """Whether ``items`` more fit (an empty queue takes any number: a run is never refused forever)."""
        held = self._unsettled
        return self._discarding or held == 0 or held + items <= self.rules.max_pending

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._sender is None:
            self._closing = False
            session = self._session = object()
            self._sender = asyncio.create_task(self._send_loop(session), name=f"{self.name} sender")

    async def close(self, *, drain_s: float = 0.0) -> None:
        """Stop sending. ``drain_s``: first give what is queued one more attempt, within that time (failures
        are not retried). Call ``flush`` first to know whether everything went out: the rest is abandoned."""
        sender = self._sender
        if sender is None:
            return
        if drain_s > 0:
            self._closing = self._urgent = True
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain_s):
                    while self._ready or self._inflight:
                        self._settled.clear()
                        await self._settled.wait()
        self._sender = self._session = None
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        abandoned = self._unsettled
        if abandoned:
            self._log.warning(
                "closing the %s exporter with %d %s not %s",
                self.name,
                abandoned,
                self._wording.noun,
                self._wording.done,
            )
        self._ready.clear()
        self._alone = 0
        self._later.clear()
        self._next_due = math.inf
        self._open.clear()
        self._unsettled = self._inflight = 0
        self._room.set()  # submitters waiting for room: the queue is closed
        for flush in self._flushes:
            flush.failed = True
            flush.changed.set()

    def discard(self) -> int:
        """Stop delivering for good: drop nothing, send nothing. What is held is discarded (counted apart
        from drops: a decision, not a loss), what is put later is ignored, flushes confirm at once; a batch
        in flight is discarded when it settles. Returns how many items were discarded now."""
        self._discarding = True
        held = [*self._ready, *self._later]
        self._ready.clear()
        self._alone = 0
        self._later.clear()
        self._next_due = math.inf
        for entry in held:
            self._resolve(entry)
        self.discarded += len(held)
        self._changed()
        return len(held)

    # -- putting ----------------------------------------------------------------------------------------------
    async def put(self, value: V) -> None:
        """Queue ``value``, after waiting for room."""
        if self._sender is not None and not self.has_room(1):
            await self.wait_for_room(1)
        self.put_nowait(value)

    async def wait_for_room(self, items: int = 1) -> None:
        """Wait until ``items`` more fit (not while the queue is not running: nothing would make room)."""
        while self._sender is not None and not self.has_room(items):
            self._room.clear()
            await self._room.wait()

    def put_nowait(self, value: V) -> None:
        """Queue ``value`` now (the caller waited for room: ``wait_for_room``)."""
        if self._discarding:
            self.discarded += 1
            return
        self._seq += 1
        epoch = self._epoch
        self._ready.append(Entry(value, self._seq, epoch))
        self._open[epoch] = self._open.get(epoch, 0) + 1
        self._unsettled += 1
        self._wake.set()

    # -- flushing ---------------------------------------------------------------------------------------------
    async def flush(self, timeout_s: float) -> bool:
        """``True`` when every item put before the call is confirmed and none was dropped since the last flush (a drop
        handed to a checkpointed ``set_aside`` excepted: that one's flush covers it). Failed items are sent again now
        (``Retry-After`` permitting); returns ``False`` as soon as one of them fails again, or at ``timeout_s`` (items
        that wait for the destination are waited for until then)."""
        if self._sender is None:
            return self._unsettled == 0
        epoch = self._epoch
        self._epoch += 1
        self._bring_forward()
        self._urgent = True
        self._wake.set()
        waiter = _FlushWait(epoch)
        self._flushes.append(waiter)
        done = False
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(timeout_s, 0.0)):
                    while not waiter.failed:
                        if not any(open_epoch <= epoch for open_epoch in self._open):
                            done = True
                            break
                        waiter.changed.clear()
                        await waiter.changed.wait()
        finally:
            self._flushes.remove(waiter)
        dropped, self._dropped_since_flush = self._dropped_since_flush, 0
        if not done:
            self._log_unconfirmed(epoch)
        return done and not waiter.failed and not dropped

    def _bring_forward(self) -> None:
        """A flush is the retry the runtime asks for: failed items are due now, unless the destination asked
        for a pause or they wait for the destination."""
        changed = False
        for entry in self._later:
            if entry.wait_since is None and not entry.retry_after and entry.not_before > 0.0:
                entry.not_before = 0.0
                changed = True
        if changed:
            self._next_due = 0.0

    def _log_unconfirmed(self, epoch: int) -> None:
        pending = sum(n for open_epoch, n in self._open.items() if open_epoch <= epoch)
        waiting = [e for e in self._later if e.wait_since is not None and e.epoch <= epoch]
        failing = pending - len(waiting)
        if failing and self.last_error:
            self._log.warning(
                "%d %s not %s (last error: %s); kept and sent again",
                failing,
                self._wording.noun,
                self._wording.done,
                self.last_error,
            )
        rule = self.rules.wait
        now = time.monotonic()
        if rule is not None and waiting and now - self._last_wait_log >= _WAIT_LOG_EVERY_S:
            self._last_wait_log = now
            oldest = max(now - (e.wait_since or now) for e in waiting)
            self._log.warning(
                "%d %s wait for %s (oldest %.0f s; each is given up after %s = %.0f s): %s",
                len(waiting),
                self._wording.noun,
                rule.waiting_for,
                oldest,
                rule.setting,
                rule.max_wait_s,
                rule.advice,
            )

    # -- sending ----------------------------------------------------------------------------------------------
    async def _send_loop(self, session: object) -> None:
        rules = self.rules
        ready = self._ready

        def settle(entries: Sequence[Entry[V]], outcome: Outcome) -> None:
            if self._session is session:
                self._settle(entries, outcome)

        while True:
            if not self._closing and self._next_due <= time.monotonic():
                self._promote_due()
            if not ready:
                self._urgent = False
                await self._sleep()
                continue
            if rules.linger_s > 0 and len(ready) < rules.batch_size and not self._urgent:
                await self._linger()
            batch = self._take()
            self._inflight += len(batch)
            for entry in batch:
                entry.inflight = True
            try:
                await self._transport.send(batch, settle)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log.exception("%s exporter: sending a batch raised", self.name)
                settle([e for e in batch if e.inflight], Outcome("failed", f"{type(exc).__name__}: {exc}"))

    async def _sleep(self) -> None:
        """Until something is put, a flush or a close, or the next failed item is due."""
        self._wake.clear()
        delay = None if self._closing or self._next_due == math.inf else max(self._next_due - time.monotonic(), 0.0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()

    async def _linger(self) -> None:
        deadline = time.monotonic() + self.rules.linger_s
        while len(self._ready) < self.rules.batch_size and not self._urgent:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._wake.wait()

    def _take(self) -> list[Entry[V]]:
        ready = self._ready
        if ready[0].alone:
            self._alone -= 1
            return [ready.popleft()]
        size = self.rules.batch_size
        if len(ready) <= size and not self._alone:
            batch = list(ready)
            ready.clear()
            return batch
        batch = []
        while ready and len(batch) < size and not ready[0].alone:
            batch.append(ready.popleft())
        return batch

    def _promote_due(self) -> None:
        now = time.monotonic()
        due = [e for e in self._later if e.not_before <= now]
        if due:
            self._later = [e for e in self._later if e.not_before > now]
            due.sort(key=lambda e: e.seq)
            self._alone += sum(1 for e in due if e.alone)
            self._ready.extendleft(reversed(due))
        self._next_due = min((e.not_before for e in self._later), default=math.inf)

    # -- settling ---------------------------------------------------------------------------------------------
    def _settle(self, entries: Sequence[Entry[V]], outcome: Outcome) -> None:
        """What the transport reports for ``entries``: applied by the sink's rules (see the outcome doc)."""
        self._inflight -= len(entries)
        kind = outcome.kind
        if self._discarding or kind in ("confirmed", "discarded"):
            open_ = self._open
            for entry in entries:  # _resolve, inlined: a confirmation settles thousands of records at once
                entry.inflight = False
                epoch = entry.epoch
                left = open_[epoch] - 1
                if left:
                    open_[epoch] = left
                else:
                    del open_[epoch]
            self._unsettled -= len(entries)
            if kind == "confirmed" and not self._discarding:
                self.confirmed += len(entries)
            else:
                self.discarded += len(entries)
            self._changed()
            return
        for entry in entries:
            entry.inflight = False
        if kind == "failed" or (kind == "rejected" and self.rules.rejected == "hold"):
            self._failed(entries, outcome)
        elif kind == "rejected":
            if len(entries) > 1 and not outcome.each:
                for entry in entries:
                    entry.alone = True
                self._alone += len(entries)
                self._again(entries)
            else:
                for entry in entries:
                    self._drop(entry, "rejected", outcome.detail)
        elif kind == "wait":
            self._wait(entries, outcome)
        self._changed()

    def _resolve(self, entry: Entry[V]) -> None:
        left = self._open[entry.epoch] - 1
        if left:
            self._open[entry.epoch] = left
        else:
            del self._open[entry.epoch]
        self._unsettled -= 1

    def _again(self, entries: Sequence[Entry[V]]) -> None:
        """Back in front of the queue, in their order (``alone`` already counted by the caller)."""
        self._ready.extendleft(reversed(entries))
        self._wake.set()

    def _later_at(self, entry: Entry[V], not_before: float) -> None:
        entry.not_before = not_before
        self._later.append(entry)
        if not_before < self._next_due:
            self._next_due = not_before
            self._wake.set()

    def _backoff(self, failures: int, cap: float) -> float:
        return equal_jitter(failures - 1, self.rules.backoff_base_s, cap)

    def _failed(self, entries: Sequence[Entry[V]], outcome: Outcome) -> None:
        rules = self.rules
        now = time.monotonic()
        self.failed_attempts += len(entries)
        self.last_error = outcome.detail or self.last_error
        oldest = min(entry.epoch for entry in entries)
        for flush in self._flushes:
            if oldest <= flush.epoch:
                flush.failed = True  # failed again during the flush: it will not confirm
        for entry in entries:
            entry.failures += 1
            if outcome.retry_after_s is not None:
                entry.retry_after = True
                self._later_at(entry, now + min(outcome.retry_after_s, rules.max_retry_after_s))
                continue
            entry.retry_after = False
            if rules.retry_between_flushes and not self._closing:
                self._later_at(entry, now + self._backoff(entry.failures, rules.backoff_max_s))
            else:
                self._later_at(entry, math.inf)  # the next flush sends it again

    def _wait(self, entries: Sequence[Entry[V]], outcome: Outcome) -> None:
        rule = self.rules.wait
        if rule is None:
            raise RuntimeError(f"{self.name}: a wait outcome without a WaitRule")
        now = time.monotonic()
        again: list[Entry[V]] = []
        for position, entry in enumerate(entries):
            if position not in outcome.waiting:
                again.append(entry)  # it failed for another item's sake
                continue
            if entry.wait_since is None:
                entry.wait_since = now
                entry.failures = 0
            if now - entry.wait_since >= rule.max_wait_s:
                self._drop(
                    entry,
                    rule.reason,
                    f"still {outcome.detail} {rule.max_wait_s:.0f} s after the first try ({rule.setting}); "
                    f"{rule.advice}",
                )
                continue
            entry.failures += 1
            self._later_at(entry, now + self._backoff(entry.failures, rule.backoff_max_s))
        if again:
            self._alone += sum(1 for e in again if e.alone)
            self._again(again)

    def _drop(self, entry: Entry[V], reason: str, detail: str) -> None:
        self._resolve(entry)
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        self._observer.exporter_dropped(self.name, reason)
        self._log.error("%s dropped (%s): %s", self._describe(entry.value), reason, detail)
        kept = False  # on the dead-letter topic, which the checkpoint flushes after this queue
        if self._set_aside is not None:
            try:
                self._set_aside(entry.value, reason, detail)
                kept = self._set_aside_checkpointed
            except Exception:  # the item is dropped all the same: the line above names it
                self._log.exception("%s exporter: setting %s aside raised", self.name, self._describe(entry.value))
        if not kept:  # nothing durable holds it: the flush that sees the drop fails
            self._dropped_since_flush += 1

    def _changed(self) -> None:
        for flush in self._flushes:
            flush.changed.set()
        self._settled.set()
        if self.has_room(1):
            self._room.set()
