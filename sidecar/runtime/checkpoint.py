"""The commit step, in order, with its collaborators injected (so its rules are tested without a broker).

1. Take the committable offsets: per partition, the lowest record not yet done. This comes *first*: a run
   done before this moment was submitted to the sinks before it, so the flush below covers it.
2. Flush every sink, even after one fails: a failed sink resends on its next flush, and the others must
   not wait a checkpoint longer for it.
3. Commit only if every sink confirmed. Otherwise commit nothing: the records are redelivered and score
   ids are deterministic, so at worst a score is exported twice under the same id.
4. Remember what was committed (lag is reported against it).

A unit of work that commits no offset but must know when its exports are confirmed (a conversation's window,
whose turns are tombstoned once its scores are exported) registers a *confirmation*: asked before the flush
(step 1) for what waits now, it is called back once every sink confirmed that flush; a checkpoint with nothing
to commit still flushes for it.

A sink whose last ``unhealthy_after`` flushes failed is *down*: ``/readyz`` names it and its
``exporter_up`` series reads 0. Checkpoints never overlap (one lock): a revoke's checkpoint waits for the
periodic one instead of committing from a half-flushed state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from sidecar.core import Flushable
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.offsets import OffsetTracker

__all__ = ["UNHEALTHY_FLUSHES", "Checkpoint", "Confirmation", "OffsetCommitter"]

log = logging.getLogger(__name__)

# Failed flushes in a row after which an exporter counts as down for readiness (one failure can be a
# timeout under load).
UNHEALTHY_FLUSHES = 3

K = TypeVar("K", bound=Hashable)

# Asked before a flush: the callback to run once the flush is confirmed (None: nothing waits).
Confirmation = Callable[[], Callable[[], None] | None]


class OffsetCommitter(Protocol[K]):
    """What commits offsets: ``AIOKafkaConsumer`` (``commit({TopicPartition: offset})``), or a test double."""

    async def commit(self, offsets: dict[K, int]) -> None: ...


class Checkpoint(Generic[K]):
    def __init__(
        self,
        tracker: OffsetTracker[K],
        sinks: Sequence[Flushable],
        committer: OffsetCommitter[K],
        observer: ServiceObserver | None = None,
        *,
        unhealthy_after: int = UNHEALTHY_FLUSHES,
        confirmations: Sequence[Confirmation] = (),
    ) -> None:
        self._tracker = tracker
        self._sinks = tuple(sinks)
        self._committer = committer
        self._observer = observer or ServiceObserver()
        self._unhealthy_after = unhealthy_after
        self._confirmations = tuple(confirmations)
        self._failed_flushes: dict[str, int] = {}  # sink name -> flushes failed in a row
        self._lock = asyncio.Lock()

    def sinks_down(self) -> list[str]:
        """Sinks whose last ``unhealthy_after`` flushes failed: they are not confirming their exports."""
        return sorted(name for name, n in self._failed_flushes.items() if n >= self._unhealthy_after)

    async def commit(self, partitions: Iterable[K], *, timeout_s: float) -> bool:
        """Commit what is done on ``partitions`` once every sink confirmed it; True when committed (or when
        there was nothing to commit)."""
        async with self._lock:
            offsets = self._tracker.committable(partitions)  # 1: before the flush
            confirmed = [then for ask in self._confirmations if (then := ask()) is not None]
            if not offsets and not confirmed:
                return True
            if not await self._flush_all(timeout_s):  # 2
                return False
            for then in confirmed:
                then()
            if not offsets:
                return True
            try:
                await self._committer.commit(offsets)  # 3
            except Exception as exc:
                log.warning("commit failed (%s); records after the last commit will be redelivered", exc)
                return False
            self._tracker.mark_committed(offsets)  # 4
            return True

    async def _flush_all(self, timeout_s: float) -> bool:
        confirmed = True
        for sink in self._sinks:
            try:
                flushed = await sink.flush(timeout_s)
            except Exception:
                log.exception("sink %s failed to flush", sink.name)
                flushed = False
            if flushed:
                self._failed_flushes.pop(sink.name, None)
                self._observer.exporter_flushed(sink.name, confirmed=True, up=True)
                continue
            failed = self._failed_flushes[sink.name] = self._failed_flushes.get(sink.name, 0) + 1
            self._observer.exporter_flushed(sink.name, confirmed=False, up=failed < self._unhealthy_after)
            log.warning("sink %s did not confirm its exports; not committing", sink.name)
            confirmed = False
        return confirmed
