"""The offset tracker: commit up to the lowest record not done, never past it, never backwards."""

from __future__ import annotations

import random
import time

import pytest
from aiokafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sidecar.runtime.offsets import OffsetTracker, PartitionKey

A = PartitionKey("spans", 0)
B = PartitionKey("spans", 1)


def test_out_of_order_completion_commits_only_the_done_prefix() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.track(A, offset)
    assert tracker.committable() == {}  # the start position alone is nothing to commit
    assert tracker.done(A, 12) and tracker.done(A, 11)
    assert tracker.committable() == {}  # 10 still runs
    assert tracker.position(A) == 10 and tracker.pending(A) == 1
    assert tracker.done(A, 10)
    assert tracker.committable() == {A: 13}
    assert tracker.in_flight == 0


def test_partial_prefix_and_mark_committed() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    for offset in range(5):
        tracker.track(A, offset)
    tracker.done(A, 0)
    tracker.done(A, 1)
    tracker.done(A, 3)
    assert tracker.committable() == {A: 2}
    tracker.mark_committed({A: 2})
    assert tracker.committable() == {}  # nothing advanced since the commit
    assert tracker.committed(A) == 2
    tracker.done(A, 2)
    assert tracker.committable() == {A: 4}  # 3 was already done
    tracker.mark_committed({A: 1})  # stale acknowledgement: ignored
    assert tracker.committed(A) == 2
    tracker.mark_committed({A: 99})  # past the position (from before a revoke): ignored
    assert tracker.committed(A) == 2


def test_commit_in_flight_while_more_finishes() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    for offset in range(4):
        tracker.track(A, offset)
    tracker.done(A, 0)
    snapshot = tracker.committable()
    assert snapshot == {A: 1}
    tracker.done(A, 1)  # finishes while the commit of 1 is on the wire
    tracker.mark_committed(snapshot)
    assert tracker.committable() == {A: 2}


def test_partitions_are_independent_and_filterable() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    tracker.track(A, 0)
    tracker.track(B, 100)
    tracker.track(B, 101)
    tracker.done(A, 0)
    tracker.done(B, 101)
    assert tracker.committable() == {A: 1}
    tracker.done(B, 100)
    assert tracker.committable() == {A: 1, B: 102}
    assert tracker.committable([B]) == {B: 102}
    assert tracker.committable([PartitionKey("other", 0)]) == {}
    assert set(tracker.partitions) == {A, B}


def test_gaps_in_offsets() -> None:
    # Compacted topics and transaction markers leave holes: commit up to the next fetched record.
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    for offset in (5, 8, 20):
        tracker.track(A, offset)
    tracker.done(A, 5)
    assert tracker.committable() == {A: 8}
    tracker.done(A, 20)
    tracker.done(A, 8)
    assert tracker.committable() == {A: 21}


def test_revoke_forgets_and_late_results_are_ignored() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    for offset in range(3):
        tracker.track(A, offset)
    tracker.track(B, 0)
    tracker.done(A, 0)
    assert tracker.revoke([A, PartitionKey("never", 0)]) == 2  # 1 and 2 abandoned
    assert A not in tracker and tracker.in_flight == 1
    assert tracker.committable() == {}
    assert not tracker.done(A, 1)  # a run that finished after the rebalance
    tracker.mark_committed({A: 1})  # a commit acknowledged after the rebalance
    assert A not in tracker
    assert tracker.pending(A) == 0 and tracker.position(A) is None and tracker.committed(A) is None
    # Assigned again: tracked afresh from wherever the consumer resumes, even backwards.
    tracker.track(A, 1)
    tracker.done(A, 1)
    assert tracker.committable() == {A: 2}


def test_done_twice_or_untracked_changes_nothing() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    tracker.track(A, 0)
    tracker.track(A, 1)
    assert tracker.done(A, 1)
    assert not tracker.done(A, 1)
    assert not tracker.done(A, 7)
    assert not tracker.done(B, 0)
    assert tracker.in_flight == 1 and tracker.pending(A) == 1


def test_offsets_must_increase() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    tracker.track(A, 3)
    with pytest.raises(ValueError, match="must increase"):
        tracker.track(A, 3)
    with pytest.raises(ValueError, match="must increase"):
        tracker.track(A, 2)


def test_aiokafka_topic_partitions_are_the_same_keys() -> None:
    tracker: OffsetTracker[TopicPartition] = OffsetTracker()
    tracker.track(TopicPartition("spans", 0), 0)
    tracker.done(TopicPartition("spans", 0), 0)
    committable = tracker.committable()
    assert committable == {TopicPartition("spans", 0): 1}
    assert committable == {A: 1}  # named tuples: equal and hash-equal
    assert isinstance(next(iter(committable)), TopicPartition)  # the caller's own key objects come back


def test_many_records_in_amortised_constant_time() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    n = 200_000
    order = list(range(n))
    random.Random(7).shuffle(order)
    started = time.perf_counter()
    for offset in range(n):
        tracker.track(A, offset)
    for offset in order:
        tracker.done(A, offset)
    elapsed = time.perf_counter() - started
    assert tracker.committable() == {A: n}
    assert elapsed < 2.0  # quadratic would take minutes


@given(
    gaps=st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=60),
    data=st.data(),
)
def test_any_completion_order_reaches_last_plus_one(gaps: list[int], data: st.DataObject) -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    offsets = []
    offset = data.draw(st.integers(min_value=0, max_value=1000))
    for gap in gaps:
        tracker.track(A, offset)
        offsets.append(offset)
        offset += gap
    order = data.draw(st.permutations(offsets))
    undone = set(offsets)
    seen: list[int] = []
    for finished in order:
        assert tracker.done(A, finished)
        undone.discard(finished)
        got = tracker.committable().get(A)
        if got is not None:
            assert all(o >= got for o in undone)  # never past a record that is not done
            assert not seen or got >= seen[-1]  # monotonic
            seen.append(got)
            if data.draw(st.booleans()):
                tracker.mark_committed({A: got})
    assert tracker.position(A) == offsets[-1] + 1
    final = tracker.committable().get(A, tracker.committed(A))
    assert final == offsets[-1] + 1
    assert tracker.in_flight == 0


class TrackerMachine(RuleBasedStateMachine):
    """Interleaves fetches, completions, commits and revokes on three partitions against a plain model."""

    PARTITIONS = (PartitionKey("t", 0), PartitionKey("t", 1), PartitionKey("u", 0))

    @initialize()
    def setup(self) -> None:
        self.tracker: OffsetTracker[PartitionKey] = OffsetTracker()
        self.next_offset = dict.fromkeys(self.PARTITIONS, 0)
        self.tracked: dict[PartitionKey, list[int]] = {}  # model: offsets tracked since (re)assignment
        self.undone: dict[PartitionKey, set[int]] = {}
        self.committed: dict[PartitionKey, int] = {}
        self.reported: dict[PartitionKey, int] = {}  # the last value committable() reported

    @rule(tp=st.sampled_from(PARTITIONS), gap=st.integers(min_value=1, max_value=3))
    def track(self, tp: PartitionKey, gap: int) -> None:
        offset = self.next_offset[tp]
        self.tracker.track(tp, offset)
        if tp not in self.tracked:
            self.tracked[tp] = []
            self.undone[tp] = set()
            self.committed[tp] = offset
        self.tracked[tp].append(offset)
        self.undone[tp].add(offset)
        self.next_offset[tp] = offset + gap

    @precondition(lambda self: any(self.undone.values()))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        tp = data.draw(st.sampled_from(sorted(tp for tp, undone in self.undone.items() if undone)))
        offset = data.draw(st.sampled_from(sorted(self.undone[tp])))
        assert self.tracker.done(tp, offset)
        self.undone[tp].remove(offset)

    @rule(tp=st.sampled_from(PARTITIONS), offset=st.integers(min_value=0, max_value=200))
    def done_unknown(self, tp: PartitionKey, offset: int) -> None:
        if offset in self.undone.get(tp, set()):
            return
        assert not self.tracker.done(tp, offset)

    @rule(acknowledge=st.booleans())
    def commit(self, acknowledge: bool) -> None:
        committable = self.tracker.committable()
        for tp, offset in committable.items():
            assert offset > self.committed[tp]  # only advances are reported
            assert offset >= self.reported.get(tp, offset)  # monotonic
            self.reported[tp] = offset
        if acknowledge:
            self.tracker.mark_committed(committable)
            self.committed.update(committable)

    @rule(tp=st.sampled_from(PARTITIONS), resume_back=st.integers(min_value=0, max_value=3))
    def revoke(self, tp: PartitionKey, resume_back: int) -> None:
        abandoned = self.tracker.revoke([tp])
        assert abandoned == len(self.undone.pop(tp, set()))
        self.tracked.pop(tp, None)
        self.committed.pop(tp, None)
        self.reported.pop(tp, None)
        # A new owner (maybe us again) resumes from the last commit: offsets may go back.
        self.next_offset[tp] = max(0, self.next_offset[tp] - resume_back)

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "tracker"):
            return
        assert self.tracker.in_flight == sum(len(u) for u in self.undone.values())
        for tp in self.PARTITIONS:
            if tp not in self.tracked:
                assert tp not in self.tracker and self.tracker.position(tp) is None
                continue
            undone = self.undone[tp]
            expected = min(undone) if undone else self.tracked[tp][-1] + 1
            position = self.tracker.position(tp)
            assert position == expected  # never past an undone record; last + 1 when all done
            assert self.tracker.pending(tp) == len(undone)
            assert self.tracker.committed(tp) == self.committed[tp]
            got = self.tracker.committable([tp]).get(tp)
            assert got == (expected if expected > self.committed[tp] else None)


TestTrackerMachine = TrackerMachine.TestCase
TestTrackerMachine.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
