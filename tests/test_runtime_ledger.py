"""The record ledger: a record is done (committable) exactly when every piece of work holding it has ended,
whichever scope that work belongs to, and work that outlives a revoke never completes a record."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sidecar.runtime.ledger import Claim, RecordLedger
from sidecar.runtime.offsets import PartitionKey

TP = PartitionKey("spans", 0)


@given(st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_a_record_commits_only_once_all_its_parts_ended_in_any_order(parts: list[int], rnd: object) -> None:
    ledger: RecordLedger[PartitionKey] = RecordLedger()
    claims: list[tuple[int, Claim]] = []
    for offset, n in enumerate(parts):
        assert ledger.track(TP, offset)
        claim = ledger.hold(TP, offset, n, size=10)
        if claim is not None:
            claims.extend((offset, claim) for _ in range(n))
    assert ledger.held_bytes == 10 * sum(1 for n in parts if n)
    rnd.shuffle(claims)  # type: ignore[attr-defined]
    remaining = {offset: n for offset, n in enumerate(parts)}
    for offset, claim in claims:
        claim.part_done()
        remaining[offset] -= 1
        first_undone = next((o for o in range(len(parts)) if remaining[o] > 0), len(parts))
        # The committable position is the lowest record with work left (or past the last one).
        assert ledger.offsets.position(TP) == first_undone
    assert ledger.held == 0 and ledger.held_bytes == 0


def test_a_unit_of_work_releases_each_record_that_brought_it_spans() -> None:
    ledger: RecordLedger[PartitionKey] = RecordLedger()
    for offset in (0, 1, 2):
        ledger.track(TP, offset)
    # Records 0 and 1 brought spans of one trace (one part each); record 2 also holds a span run.
    ledger.hold(TP, 0, 1, size=1)
    ledger.hold(TP, 1, 1, size=1)
    run = ledger.hold(TP, 2, 2, size=1)
    assert run is not None

    def release_records() -> None:
        for offset in (0, 1, 2):
            ledger.release(TP, offset)

    trace = Claim(2, release_records)
    trace.part_done()
    assert ledger.offsets.position(TP) == 0  # the trace still has a run going
    trace.part_done()
    assert ledger.offsets.position(TP) == 2  # record 2 still waits for its own span run
    run.part_done()
    assert ledger.offsets.position(TP) == 3


def test_work_dropped_by_a_revoke_never_completes_the_record_tracked_again_at_that_offset() -> None:
    ledger: RecordLedger[PartitionKey] = RecordLedger()
    ledger.track(TP, 5)
    old = ledger.hold(TP, 5, 1, size=100)
    assert old is not None
    assert ledger.forget([TP]) == 1
    assert ledger.held_bytes == 0 and not old.live
    # The partition comes back and the record is fetched again; the old run ends afterwards.
    ledger.track(TP, 5)
    new = ledger.hold(TP, 5, 1, size=100)
    old.part_done()
    assert ledger.offsets.position(TP) == 5 and new is not None and new.live
    new.part_done()
    assert ledger.offsets.position(TP) == 6


def test_a_record_holding_nothing_is_done_at_once_and_a_repeat_fetch_is_refused() -> None:
    ledger: RecordLedger[PartitionKey] = RecordLedger()
    assert ledger.track(TP, 0)
    assert ledger.hold(TP, 0, 0, size=50) is None
    assert ledger.offsets.position(TP) == 1 and ledger.held_bytes == 0
    assert not ledger.track(TP, 0)
