"""Claims: what holds a record back from its commit, through one small API.

A :class:`Claim` is work that holds something back. Whoever starts a piece of work under it ``take()``s a part,
and ``release()``s it when the work ends; whoever opened it ``seal()``s it once no more work will be added. A
sealed claim with no part open is *done*: its ``_finish`` runs, once. A claim can be *dropped* (its partition was
revoked, or the service stops): its tasks are cancelled, later ``take``/``release``/``seal`` calls do nothing, and
it never finishes. Nobody counts parts by hand.

A record's claim (:class:`RecordClaim`) is opened by :class:`Claims` when the record is fetched, under the
assignment *generation* of its partition. Done, it marks its record done in the :class:`OffsetTracker`, but only
if its partition is still owned under that generation: work that outlives a revoke (a handler suspended at an
await, a run that finished late) can never complete a record that a later assignment fetched at the same offset,
as Kafka Streams fences a task's state with its generation.

A unit of work made of several records (a ready trace) is a claim of its own: it takes a part of each record's
claim when the records bring it spans and releases them when its own claim is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from sidecar.runtime.offsets import OffsetTracker

__all__ = ["Claim", "Claims", "RecordClaim"]

K = TypeVar("K", bound=Hashable)


def _nothing() -> None:
    return None


class Claim:
    """Parts of work taken and released; done (``on_done``, once) when sealed with none open, unless dropped."""

    __slots__ = ("_live", "_open", "_sealed", "on_done", "tasks")

    def __init__(self, on_done: Callable[[], None] = _nothing, *, sealed: bool = False) -> None:
        self._open = 0
        self._sealed = sealed
        self._live = True
        self.on_done = on_done
        self.tasks: list[asyncio.Task[Any]] = []  # cancelled when the claim is dropped

    @property
    def live(self) -> bool:
        """Neither done nor dropped: work started under it still counts."""
        return self._live

    def take(self, n: int = 1) -> None:
        """``n`` more pieces of work hold the claim until each is released."""
        if self._live:
            self._open += n

    def release(self) -> None:
        """One piece of work ended (whatever became of it)."""
        if self._live:
            self._open -= 1
            if self._open <= 0 and self._sealed:
                self._done()

    def seal(self) -> None:
        """No more work will be added: done as soon as the parts taken are released (at once if none)."""
        if self._live and not self._sealed:
            self._sealed = True
            if self._open <= 0:
                self._done()

    def drop(self) -> None:
        """Forget the work: cancel its tasks; the claim never finishes."""
        if self._live:
            self._live = False
            for task in self.tasks:
                task.cancel()

    def _done(self) -> None:
        self._live = False
        self._finish()

    def _finish(self) -> None:
        self.on_done()


class RecordClaim(Claim):
    """A fetched record's claim, opened under its partition's assignment generation. A method rather than a closure
    per record: a service holds tens of thousands of records while whole traces wait (docs/benchmarks.md)."""

    __slots__ = ("_claims", "generation", "offset", "partition", "size")

    def __init__(self, claims: Claims[Any], partition: Any, offset: int, size: int, generation: int) -> None:
        Claim.__init__(self)
        self._claims = claims
        self.partition = partition
        self.offset = offset
        self.size = size
        self.generation = generation

    def _finish(self) -> None:
        self._claims._done(self)


class Claims(Generic[K]):
    """The claims of fetched records, per partition: what holds each back, the bytes held, and the offset tracker
    that turns "done" into committable offsets."""

    def __init__(self) -> None:
        self.offsets: OffsetTracker[K] = OffsetTracker()
        self._open: dict[tuple[K, int], RecordClaim] = {}
        self._generations: dict[K, int] = {}
        self.held_bytes = 0  # of the records not done

    def open(self, partition: K, offset: int, size: int) -> RecordClaim | None:
        """A record was fetched: its claim, to be sealed once every stage took what the record brings (None: this
        assignment holds the record already, a fetch from before a seek; the first copy counts)."""
        try:
            self.offsets.track(partition, offset)
        except ValueError:
            return None
        claim = RecordClaim(self, partition, offset, size, self._generations.get(partition, 0))
        self._open[(partition, offset)] = claim
        self.held_bytes += size
        return claim

    def _done(self, claim: RecordClaim) -> None:
        key = (claim.partition, claim.offset)
        if self._open.get(key) is not claim or self._generations.get(claim.partition, 0) != claim.generation:
            return  # revoked (and perhaps assigned again) since it was opened: the record is not this claim's
        del self._open[key]
        self.held_bytes -= claim.size
        self.offsets.done(claim.partition, claim.offset)

    def revoke(self, partitions: Iterable[K]) -> int:
        """Drop the claims of ``partitions`` (a revoke) and start a new generation for them: work still running
        under the old claims never completes a record. Returns how many fetched records were not done."""
        lost = set(partitions)
        for key in [key for key in self._open if key[0] in lost]:
            self._drop(key)
        for partition in lost:
            self._generations[partition] = self._generations.get(partition, 0) + 1
        return self.offsets.revoke(lost)

    def drop_all(self) -> None:
        """Drop every open claim (a stop), so that a cancelled run never completes its record: a checkpoint that
        still happens (a rebalance while the consumer leaves) cannot commit it."""
        for key in list(self._open):
            self._drop(key)

    def _drop(self, key: tuple[K, int]) -> None:
        claim = self._open.pop(key)
        self.held_bytes -= claim.size
        claim.drop()

    @property
    def held(self) -> int:
        """Records fetched and not done."""
        return len(self._open)
