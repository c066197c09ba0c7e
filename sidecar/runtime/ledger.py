"""Which records are still held back by work, and so which offsets may be committed.

A record is *done* when everything it started has finished and been handed to the sinks: its span runs, and
each unit of work elsewhere that it brought spans to (a trace being assembled, later a session). Each such
part holds a :class:`Claim`; when a claim's last part ends it calls its ``on_done``. A record's claim marks
the record done in the :class:`OffsetTracker`; the claim of a unit of work (a ready trace) releases one part of
every record that brought it spans. So span scope, trace scope and any scope after them share one piece of
bookkeeping instead of a copy each.

A claim can be *dropped* (its partition was revoked, or the service stops): its tasks are cancelled and its
``on_done`` never runs, so work that outlives a revoke never completes a record that the current assignment
holds at the same offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sidecar.runtime.offsets import OffsetTracker

__all__ = ["Claim", "RecordLedger"]

K = TypeVar("K", bound=Hashable)


@dataclass(eq=False, slots=True)
class Claim:
    """``parts`` pieces of work not finished; ``on_done`` once the last one is, unless dropped first."""

    parts: int
    on_done: Callable[[], None]
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    live: bool = True

    def part_done(self) -> None:
        self.parts -= 1
        if self.parts == 0 and self.live:
            self.live = False
            self._finish()

    def _finish(self) -> None:
        self.on_done()

    def drop(self) -> None:
        """Forget the work: cancel its tasks; ``on_done`` will not run."""
        self.live = False
        for task in self.tasks:
            task.cancel()


def _nothing() -> None:
    return None


class _RecordClaim(Claim):
    """A record's claim. Done, it marks its record done in the ledger: a method rather than a closure per
    record, since a ledger holds tens of thousands of records while whole traces wait (docs/benchmarks.md)."""

    __slots__ = ("_key", "_ledger", "size")

    def __init__(self, ledger: RecordLedger[Any], key: tuple[Any, int], parts: int, size: int) -> None:
        Claim.__init__(self, parts, _nothing)
        self._ledger = ledger
        self._key = key
        self.size = size

    def _finish(self) -> None:
        self._ledger._done(self._key, self.size)


class RecordLedger(Generic[K]):
    """Records from fetch to done, per partition: what holds each back, the bytes held, the offset tracker."""

    def __init__(self) -> None:
        self.offsets: OffsetTracker[K] = OffsetTracker()
        self._held: dict[tuple[K, int], _RecordClaim] = {}
        self.held_bytes = 0  # of the records held back by work

    def track(self, tp: K, offset: int) -> bool:
        """A record was fetched; False when this assignment holds it already (a fetch from before a seek)."""
        try:
            self.offsets.track(tp, offset)
        except ValueError:
            return False
        return True

    def hold(self, tp: K, offset: int, parts: int, size: int) -> Claim | None:
        """Hold the record back until ``parts`` pieces of work are done; with none, it is done now (None)."""
        if parts <= 0:
            self.offsets.done(tp, offset)
            return None
        key = (tp, offset)
        claim = self._held[key] = _RecordClaim(self, key, parts, size)
        self.held_bytes += size
        return claim

    def _done(self, key: tuple[K, int], size: int) -> None:
        del self._held[key]
        self.held_bytes -= size
        self.offsets.done(*key)

    def release(self, tp: K, offset: int) -> None:
        """One piece of work holding this record ended (a unit of work that does not keep the record's claim)."""
        held = self._held.get((tp, offset))
        if held is not None:
            held.part_done()

    def forget(self, partitions: Iterable[K]) -> int:
        """Drop the records of ``partitions`` (a revoke): their work is cancelled and never completes them.
        Returns how many fetched records were not done."""
        lost = set(partitions)
        for key in [key for key in self._held if key[0] in lost]:
            self._drop(key)
        return self.offsets.revoke(lost)

    def drop_all(self) -> None:
        """Cancel the work of every held record, first forgetting them, so that a cancelled run never completes
        its record: a checkpoint that still happens (a rebalance while the consumer leaves) cannot commit it."""
        for key in list(self._held):
            self._drop(key)

    def _drop(self, key: tuple[K, int]) -> None:
        claim = self._held.pop(key)
        self.held_bytes -= claim.size
        claim.drop()

    @property
    def held(self) -> int:
        """Records held back by work."""
        return len(self._held)
