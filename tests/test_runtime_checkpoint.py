"""The checkpoint's rules, without a broker: scripted sinks, a recording committer, the real OffsetTracker.

Each test names the rule of ``sidecar.runtime.checkpoint`` it pins down, and would fail if that rule broke.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.core import ScoredRun, Sink
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.checkpoint import UNHEALTHY_FLUSHES, Checkpoint
from sidecar.runtime.offsets import OffsetTracker, PartitionKey

A = PartitionKey("spans", 0)
B = PartitionKey("spans", 1)
TIMEOUT_S = 2.0

# What one flush of a scripted sink does: confirm (True), not confirm (False), or raise.
Outcome = bool | Exception


class RecordingCommitter:
    """An ``OffsetCommitter``: records every commit it accepted; raises instead while ``fail`` is set."""

    def __init__(self, log: list[str] | None = None) -> None:
        self.commits: list[dict[PartitionKey, int]] = []
        self.attempts = 0
        self.fail = False
        self._log = log

    async def commit(self, offsets: dict[PartitionKey, int]) -> None:
        self.attempts += 1
        if self._log is not None:
            self._log.append("commit")
        if self.fail:
            raise ConnectionError("broker unreachable")
        self.commits.append(dict(offsets))


class ScriptedSink:
    """A ``Sink`` whose flushes follow a script (then confirm), with hooks to act during a flush.

    ``during_flush`` runs inside the flush, before it answers: the test's stand-in for runs finishing while
    the checkpoint waits on the sinks. ``gate``, when set, holds every flush until it is set.
    """

    def __init__(
        self,
        name: str,
        outcomes: Iterable[Outcome] = (),
        *,
        during_flush: Callable[[], object] | None = None,
        gate: asyncio.Event | None = None,
        log: list[str] | None = None,
    ) -> None:
        self.name = name
        self.outcomes = list(outcomes)
        self.during_flush = during_flush
        self.gate = gate
        self.entered = asyncio.Event()
        self.flushes = 0
        self.timeouts: list[float] = []
        self._log = log

    async def start(self) -> None:
        pass

    async def submit(self, run: ScoredRun) -> None:
        pass

    async def flush(self, timeout_s: float) -> bool:
        self.flushes += 1
        self.timeouts.append(timeout_s)
        if self._log is not None:
            self._log.append(f"flush {self.name}")
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.during_flush is not None:
            self.during_flush()
        outcome = self.outcomes.pop(0) if self.outcomes else True
        if self._log is not None:
            self._log.append(f"flushed {self.name}")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    @property
    def outstanding(self) -> int:
        return 0

    async def close(self) -> None:
        pass


@dataclass
class RecordingObserver(ServiceObserver):
    flushed: list[tuple[str, bool, bool]] = field(default_factory=list)

    def exporter_flushed(self, name: str, *, confirmed: bool, up: bool) -> None:
        self.flushed.append((name, confirmed, up))


def tracked(
    offsets: Mapping[PartitionKey, Iterable[int]], done: Mapping[PartitionKey, Iterable[int]]
) -> OffsetTracker[PartitionKey]:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    for tp, values in offsets.items():
        for offset in values:
            tracker.track(tp, offset)
    for tp, values in done.items():
        for offset in values:
            assert tracker.done(tp, offset)
    return tracker


def test_the_doubles_are_what_the_checkpoint_expects() -> None:
    assert isinstance(ScriptedSink("s"), Sink)


# -- (1) offsets are taken before the flush -----------------------------------------------------------------


async def test_a_record_done_during_the_flush_waits_for_the_next_checkpoint() -> None:
    tracker = tracked({A: range(3)}, {A: [0]})
    # Record 1's run finishes while the sink flushes: its output may have reached the sink after the flush
    # started, so this checkpoint must not commit past it.
    sink = ScriptedSink("s", during_flush=lambda: tracker.done(A, 1))
    committer = RecordingCommitter()
    checkpoint = Checkpoint(tracker, [sink], committer)

    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert committer.commits == [{A: 1}]
    assert tracker.committable([A]) == {A: 2}  # the next checkpoint takes it

    sink.during_flush = None
    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert committer.commits == [{A: 1}, {A: 2}]


# -- (2) every sink is flushed, (3) commit only when all confirmed ------------------------------------------


@pytest.mark.parametrize("failure", [False, RuntimeError("exporter crashed")], ids=["unconfirmed", "raised"])
async def test_every_sink_is_flushed_even_after_one_fails(failure: Outcome) -> None:
    tracker = tracked({A: range(2)}, {A: [0]})
    first, second, third = ScriptedSink("first"), ScriptedSink("second", [failure]), ScriptedSink("third")
    checkpoint = Checkpoint(tracker, [first, second, third], RecordingCommitter())

    assert not await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert (first.flushes, second.flushes, third.flushes) == (1, 1, 1)
    assert first.timeouts == second.timeouts == third.timeouts == [TIMEOUT_S]


async def test_commits_when_every_sink_confirmed() -> None:
    tracker = tracked({A: range(3), B: range(5, 7)}, {A: [0, 1], B: [5]})
    committer = RecordingCommitter()
    checkpoint = Checkpoint(tracker, [ScriptedSink("s1"), ScriptedSink("s2")], committer)

    assert await checkpoint.commit([A, B], timeout_s=TIMEOUT_S)
    assert committer.commits == [{A: 2, B: 6}]


@pytest.mark.parametrize("failing", [0, 1])
async def test_one_unconfirmed_sink_means_nothing_is_committed(failing: int) -> None:
    tracker = tracked({A: range(3), B: range(5, 7)}, {A: [0, 1], B: [5]})
    sinks = [ScriptedSink("s1"), ScriptedSink("s2")]
    sinks[failing].outcomes = [False]
    committer = RecordingCommitter()
    checkpoint = Checkpoint(tracker, sinks, committer)

    assert not await checkpoint.commit([A, B], timeout_s=TIMEOUT_S)
    assert committer.attempts == 0  # not even a partial commit of the partitions "covered" elsewhere
    assert (tracker.committed(A), tracker.committed(B)) == (0, 5)
    # The same offsets are offered again once the sink confirms (it resends on its next flush).
    assert await checkpoint.commit([A, B], timeout_s=TIMEOUT_S)
    assert committer.commits == [{A: 2, B: 6}]


# -- (4) a commit that raises, (5) mark_committed after success ------------------------------------------------


async def test_a_commit_that_raises_commits_nothing_and_the_tracker_does_not_advance() -> None:
    tracker = tracked({A: range(3)}, {A: [0, 1]})
    committer = RecordingCommitter()
    committer.fail = True
    checkpoint = Checkpoint(tracker, [ScriptedSink("s")], committer)

    assert not await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert committer.attempts == 1 and committer.commits == []
    assert tracker.committed(A) == 0
    assert tracker.committable([A]) == {A: 2}  # still to be committed

    committer.fail = False
    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert committer.commits == [{A: 2}]


async def test_a_successful_commit_is_marked_in_the_tracker() -> None:
    tracker = tracked({A: range(3)}, {A: [0, 1]})
    sink = ScriptedSink("s")
    committer = RecordingCommitter()
    checkpoint = Checkpoint(tracker, [sink], committer)

    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert tracker.committed(A) == 2
    assert tracker.committable([A]) == {}
    # Marked, so the next checkpoint has nothing to do: it neither flushes nor commits the same offset again.
    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert sink.flushes == 1 and committer.commits == [{A: 2}]


# -- (6) nothing to commit --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offsets", "done", "partitions"),
    [
        ({}, {}, [A]),  # nothing tracked
        ({A: range(3)}, {}, [A]),  # the start position alone
        ({A: range(3)}, {A: [1, 2]}, [A]),  # done out of order, 0 still running
        ({A: range(3)}, {A: [0, 1, 2]}, [B]),  # progress, but on a partition not asked for
    ],
    ids=["empty", "start-only", "head-running", "other-partition"],
)
async def test_nothing_to_commit_means_no_flush_and_no_commit(
    offsets: dict[PartitionKey, range], done: dict[PartitionKey, list[int]], partitions: list[PartitionKey]
) -> None:
    tracker = tracked(offsets, done)
    sink = ScriptedSink("s", [False])  # would fail the checkpoint if it were flushed
    committer = RecordingCommitter()
    observer = RecordingObserver()
    checkpoint = Checkpoint(tracker, [sink], committer, observer)

    assert await checkpoint.commit(partitions, timeout_s=TIMEOUT_S)
    assert sink.flushes == 0 and committer.attempts == 0 and observer.flushed == []


# -- (7) sinks down, (8) a flush that raises is a failed flush --------------------------------------------


@pytest.mark.parametrize("failure", [False, RuntimeError("exporter crashed")], ids=["unconfirmed", "raised"])
async def test_a_sink_is_down_after_unhealthy_after_failed_flushes_in_a_row_and_up_after_a_success(
    failure: Outcome,
) -> None:
    tracker = tracked({A: range(2)}, {A: [0]})
    flaky = ScriptedSink("flaky", [failure] * (UNHEALTHY_FLUSHES + 1))
    steady = ScriptedSink("steady")
    observer = RecordingObserver()
    checkpoint = Checkpoint(tracker, [flaky, steady], RecordingCommitter(), observer)  # the default threshold

    down_after: list[list[str]] = []
    for _ in range(UNHEALTHY_FLUSHES + 1):
        assert not await checkpoint.commit([A], timeout_s=TIMEOUT_S)
        down_after.append(checkpoint.sinks_down())
    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)

    assert down_after == [[], [], ["flaky"], ["flaky"]]
    assert checkpoint.sinks_down() == []
    assert [event for event in observer.flushed if event[0] == "flaky"] == [
        ("flaky", False, True),
        ("flaky", False, True),
        ("flaky", False, False),  # the third failure in a row: down
        ("flaky", False, False),
        ("flaky", True, True),  # one success: up again
    ]
    assert set(event for event in observer.flushed if event[0] == "steady") == {("steady", True, True)}


async def test_failed_flushes_count_in_a_row_only() -> None:
    tracker = tracked({A: range(2)}, {A: [0, 1]})
    # Two failures, a success, two failures: never three in a row, so never down.
    sink = ScriptedSink("s", [False, False, True, False, False])
    observer = RecordingObserver()
    checkpoint = Checkpoint(tracker, [sink], RecordingCommitter(), observer, unhealthy_after=3)

    results = []
    for _ in range(5):
        results.append(await checkpoint.commit([A], timeout_s=TIMEOUT_S))
        assert checkpoint.sinks_down() == []
        if results[-1]:  # committed: give the next checkpoints something new to commit
            tracker.track(A, 2)
            tracker.done(A, 2)
    assert results == [False, False, True, False, False]
    assert sink.flushes == 5
    assert all(up for _, _, up in observer.flushed)


async def test_unhealthy_after_is_configurable() -> None:
    tracker = tracked({A: range(2)}, {A: [0]})
    observer = RecordingObserver()
    checkpoint = Checkpoint(tracker, [ScriptedSink("s", [False])], RecordingCommitter(), observer, unhealthy_after=1)

    assert not await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert checkpoint.sinks_down() == ["s"]
    assert observer.flushed == [("s", False, False)]


# -- (9) checkpoints never interleave ------------------------------------------------------------------------


async def test_a_second_commit_waits_for_the_first_to_finish() -> None:
    tracker = tracked({A: range(3)}, {A: [0]})
    events: list[str] = []
    gate = asyncio.Event()
    sink = ScriptedSink("s", gate=gate, log=events)
    committer = RecordingCommitter(log=events)
    checkpoint = Checkpoint(tracker, [sink], committer)

    first = asyncio.create_task(checkpoint.commit([A], timeout_s=TIMEOUT_S))
    await asyncio.wait_for(sink.entered.wait(), TIMEOUT_S)  # the first checkpoint is flushing
    tracker.done(A, 1)  # more is done meanwhile: the second checkpoint has something of its own to commit
    second = asyncio.create_task(checkpoint.commit([A], timeout_s=TIMEOUT_S))
    for _ in range(20):  # let the second run as far as it can
        await asyncio.sleep(0)
    assert not second.done()
    assert sink.flushes == 1  # it has not started flushing beside the first
    assert committer.attempts == 0

    gate.set()
    assert list(await asyncio.wait_for(asyncio.gather(first, second), TIMEOUT_S)) == [True, True]
    assert committer.commits == [{A: 1}, {A: 2}]
    assert events == ["flush s", "flushed s", "commit", "flush s", "flushed s", "commit"]


# -- property: never past a record not done at the start, never without every sink's confirmation ------

PARTITIONS = (A, B)
outcomes = st.sampled_from([True, False, RuntimeError("exporter crashed")])


@dataclass(frozen=True)
class Track:
    tp: PartitionKey
    gap: int  # compacted topics and transaction markers leave holes


@dataclass(frozen=True)
class Done:
    tp: PartitionKey
    pick: int  # which of the partition's running records (modulo their number)


@dataclass(frozen=True)
class Check:
    partitions: frozenset[PartitionKey]
    sinks: tuple[Outcome, Outcome]
    commit_fails: bool
    done_during_flush: tuple[Done, ...]


steps = st.lists(
    st.one_of(
        st.builds(Track, st.sampled_from(PARTITIONS), st.integers(1, 3)),
        st.builds(Done, st.sampled_from(PARTITIONS), st.integers(0, 50)),
        st.builds(
            Check,
            st.frozensets(st.sampled_from(PARTITIONS), min_size=1),
            st.tuples(outcomes, outcomes),
            st.booleans(),
            st.lists(st.builds(Done, st.sampled_from(PARTITIONS), st.integers(0, 50)), max_size=3).map(tuple),
        ),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_commits_never_pass_a_record_not_done_when_the_checkpoint_began(script: list[Track | Done | Check]) -> None:
    # A loop of its own per example, never made the thread's current one: the async tests' session loop
    # stays as it is.
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_play(script))
    finally:
        loop.close()


async def _play(script: list[Track | Done | Check]) -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    running: dict[PartitionKey, list[int]] = {tp: [] for tp in PARTITIONS}  # the model: records not done
    start: dict[PartitionKey, int] = {}  # first tracked offset: the position committed until a commit
    last: dict[PartitionKey, int] = {}

    def finish(step: Done) -> None:
        if running[step.tp]:
            offset = running[step.tp].pop(step.pick % len(running[step.tp]))
            assert tracker.done(step.tp, offset)

    first, second = ScriptedSink("first"), ScriptedSink("second")
    committer = RecordingCommitter()
    checkpoint = Checkpoint(tracker, [first, second], committer)
    for step in script:
        if isinstance(step, Track):
            offset = last.get(step.tp, -1) + step.gap
            tracker.track(step.tp, offset)
            running[step.tp].append(offset)
            start.setdefault(step.tp, offset)
            last[step.tp] = offset
        elif isinstance(step, Done):
            finish(step)
        else:
            not_done_at_start = {tp: list(offsets) for tp, offsets in running.items()}
            expected = tracker.committable(step.partitions)
            first.outcomes = [step.sinks[0]]
            second.outcomes = [step.sinks[1]]

            def during_flush(finishing: tuple[Done, ...] = step.done_during_flush) -> None:
                for done in finishing:
                    finish(done)

            first.during_flush = during_flush
            committer.fail = step.commit_fails
            commits_before = len(committer.commits)

            ok = await checkpoint.commit(step.partitions, timeout_s=TIMEOUT_S)

            new_commits = committer.commits[commits_before:]
            all_confirmed = all(outcome is True for outcome in step.sinks)
            if new_commits:
                assert all_confirmed, "committed without every sink's confirmation"
                [committed] = new_commits
                assert committed == expected  # what was committable when the checkpoint began
                for tp, offset in committed.items():
                    assert tp in step.partitions
                    assert all(o >= offset for o in not_done_at_start[tp]), "committed past a running record"
            # And the other way round: with something to commit, confirmations and a working broker, it commits.
            assert ok == (not expected or (all_confirmed and not step.commit_fails))
            assert bool(new_commits) == (bool(expected) and all_confirmed and not step.commit_fails)
            for tp in PARTITIONS:
                if tp in tracker:
                    # The tracker advances exactly to what the broker accepted.
                    accepted = [c[tp] for c in committer.commits if tp in c]
                    assert tracker.committed(tp) == (accepted[-1] if accepted else start[tp])


# -- confirmations: work that commits no offset learns when its exports are confirmed --------------------------


class Waiting:
    """A confirmation (a conversation stage's): ``waiting`` items, the snapshot taken before each flush."""

    def __init__(self) -> None:
        self.waiting: list[str] = []
        self.confirmed: list[str] = []
        self.asked = 0

    def ask(self) -> Callable[[], None] | None:
        self.asked += 1
        if not self.waiting:
            return None
        snapshot = list(self.waiting)

        def confirmed() -> None:
            self.confirmed.extend(snapshot)
            self.waiting = [item for item in self.waiting if item not in snapshot]

        return confirmed


async def test_a_confirmation_runs_after_every_sink_confirmed_even_with_nothing_to_commit() -> None:
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()  # no record at all: no offset to commit
    waiting = Waiting()
    # An item handed over while the sink flushes belongs to the next flush, as a record done meanwhile does.
    sink = ScriptedSink("s", [False, True, True], during_flush=lambda: waiting.waiting.append("late"))
    committer = RecordingCommitter()
    checkpoint = Checkpoint(tracker, [sink], committer, confirmations=[waiting.ask])

    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)  # nothing waits: no flush at all
    assert sink.flushes == 0
    waiting.waiting.append("window-1")
    assert not await checkpoint.commit([A], timeout_s=TIMEOUT_S)  # the sink did not confirm: nothing confirmed
    assert sink.flushes == 1 and waiting.confirmed == []
    sink.during_flush = None
    assert await checkpoint.commit([A], timeout_s=TIMEOUT_S)
    assert waiting.confirmed == ["window-1", "late"]  # "late" was there before this flush began
    assert committer.attempts == 0  # and no commit was made for it
