"""Per-partition offset tracking for at-least-once commits when runs finish out of order (docs/delivery.md).

Kafka commits "the next offset to read". A record is *done* when everything it produced is exported
(the runtime decides what that means: all its runs handed to the sinks and the sinks flushed, or it was
dead-lettered, or it held nothing to score). A partition may be committed up to the lowest offset that is
fetched but not done; when every fetched record is done, up to the last fetched offset + 1.

    tracker = OffsetTracker()
    tracker.track(tp, 10); tracker.track(tp, 11); tracker.track(tp, 12)
    tracker.done(tp, 11)              # out of order: 10 is still running
    tracker.committable()             # {} (nothing past the start position yet)
    tracker.done(tp, 10)
    tracker.committable()             # {tp: 12}: 12 is the lowest record not done
    tracker.mark_committed({tp: 12})  # after the broker acknowledged the commit

The tracker is pure (no I/O, no clock, no locks: one event loop owns it). It is generic in its key, any
hashable ``(topic, partition)`` value: :class:`PartitionKey` is ours; aiokafka's ``TopicPartition`` (also
a named tuple, equal and hash-equal to a ``PartitionKey`` with the same fields) works as is, so
``OffsetTracker[TopicPartition]`` hands ``committable()`` straight to ``consumer.commit``.

Cost: ``track``, ``done`` and ``pending`` are amortised O(1) (a deque of fetched offsets whose done
prefix is popped, and two sets); ``committable`` is O(partitions).

Rules that keep the commit safe:

* The start position of a partition (its first tracked offset, normally the offset the consumer resumed
  from) is never reported as committable by itself: committing it would change nothing.
* ``committable`` only reports a partition whose position advanced past what was last committed, and the
  positions it reports never go backwards.
* ``revoke`` forgets a partition entirely. A ``done`` or ``mark_committed`` that arrives afterwards for
  it (a run that finished after a rebalance took the partition away) is ignored: the new owner
  reprocesses from the last commit.
* Offsets must be tracked in increasing order per partition (gaps are fine: compacted topics and
  transaction markers leave holes). Re-tracking an offset, or going back, raises ``ValueError``: after a
  seek back, ``revoke`` the partition first and track it afresh.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

__all__ = ["OffsetTracker", "PartitionKey"]

K = TypeVar("K", bound=Hashable)


class PartitionKey(NamedTuple):
    """A topic partition. Equal (and hash-equal) to aiokafka's ``TopicPartition`` with the same fields."""

    topic: str
    partition: int


@dataclass(slots=True)
class _PartitionState:
    start: int  # the first tracked offset: the position the consumer resumed from
    last: int  # the highest tracked offset
    queue: deque[int] = field(default_factory=deque)  # tracked offsets not yet popped, increasing
    undone: set[int] = field(default_factory=set)  # tracked offsets still running
    committed: int = -1  # the last position confirmed committed (or the start position)

    @property
    def position(self) -> int:
        """The lowest offset not done, or last + 1 when everything tracked is done."""
        return self.queue[0] if self.queue else self.last + 1


class OffsetTracker(Generic[K]):
    """Which offset each partition may commit, given records fetched in order and finished in any order."""

    def __init__(self) -> None:
        self._partitions: dict[K, _PartitionState] = {}
        self._in_flight = 0

    # -- records ----------------------------------------------------------------------------------
    def track(self, tp: K, offset: int) -> None:
        """A record was fetched. Offsets must increase per partition."""
        state = self._partitions.get(tp)
        if state is None:
            state = _PartitionState(start=offset, last=offset, committed=offset)
            self._partitions[tp] = state
        elif offset <= state.last:
            raise ValueError(f"{tp}: offset {offset} tracked after {state.last}; offsets must increase")
        state.last = offset
        state.queue.append(offset)
        state.undone.add(offset)
        self._in_flight += 1

    def done(self, tp: K, offset: int) -> bool:
        """Everything from this record is finished. Returns False (and changes nothing) when the record is
        not in flight: already done, never tracked, or its partition was revoked."""
        state = self._partitions.get(tp)
        if state is None or offset not in state.undone:
            return False
        state.undone.remove(offset)
        self._in_flight -= 1
        queue, undone = state.queue, state.undone
        # Pop the done prefix: each offset is popped once, so this is amortised O(1) per record.
        while queue and queue[0] not in undone:
            queue.popleft()
        return True

    # -- commits ----------------------------------------------------------------------------------
    def committable(self, partitions: Iterable[K] | None = None) -> dict[K, int]:
        """Partitions whose position advanced since the last commit, with the offset to commit.

        ``partitions`` restricts the answer (e.g. to the partitions the consumer still owns)."""
        if partitions is None:
            items: Iterator[tuple[K, _PartitionState]] = iter(self._partitions.items())
        else:
            items = ((tp, self._partitions[tp]) for tp in partitions if tp in self._partitions)
        out: dict[K, int] = {}
        for tp, state in items:
            position = state.position
            if position > state.committed:
                out[tp] = position
        return out

    def mark_committed(self, offsets: Mapping[K, int]) -> None:
        """The broker acknowledged these commits. Unknown (revoked) partitions, values not past the last
        commit and values past the current position are ignored."""
        for tp, offset in offsets.items():
            state = self._partitions.get(tp)
            # A value past the position can only come from before a revoke (the partition was tracked
            # afresh since): it says nothing about the records tracked now.
            if state is not None and state.committed < offset <= state.position:
                state.committed = offset

    # -- partitions -------------------------------------------------------------------------------
    def revoke(self, partitions: Iterable[K]) -> int:
        """Forget partitions (rebalance or shutdown). Returns how many in-flight records were abandoned."""
        abandoned = 0
        for tp in partitions:
            state = self._partitions.pop(tp, None)
            if state is not None:
                abandoned += len(state.undone)
        self._in_flight -= abandoned
        return abandoned

    def pending(self, tp: K) -> int:
        """Records of this partition fetched and not done."""
        state = self._partitions.get(tp)
        return len(state.undone) if state is not None else 0

    def position(self, tp: K) -> int | None:
        """The offset this partition could commit now (whether or not it already has), or None if unknown."""
        state = self._partitions.get(tp)
        return state.position if state is not None else None

    def committed(self, tp: K) -> int | None:
        """The last committed position (the start position until a commit), or None if unknown."""
        state = self._partitions.get(tp)
        return state.committed if state is not None else None

    @property
    def in_flight(self) -> int:
        """Records fetched and not done, over all partitions."""
        return self._in_flight

    @property
    def partitions(self) -> tuple[K, ...]:
        return tuple(self._partitions)

    def __contains__(self, tp: object) -> bool:
        return tp in self._partitions

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{tp}: pos={s.position} committed={s.committed} pending={len(s.undone)}"
            for tp, s in self._partitions.items()
        )
        return f"OffsetTracker({parts})"
