"""Claims: a record is done (committable) exactly when every piece of work holding it has ended, whichever stage
that work belongs to, and work that outlives a revoke never completes a record fetched again after it."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from sidecar.runtime.claims import Claim, Claims
from sidecar.runtime.offsets import PartitionKey

TP = PartitionKey("spans", 0)


@given(st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_a_record_commits_only_once_all_its_parts_ended_in_any_order(parts: list[int], rnd: random.Random) -> None:
    claims: Claims[PartitionKey] = Claims()
    held: list[tuple[int, Claim]] = []
    for offset, n in enumerate(parts):
        claim = claims.open(TP, offset, size=10)
        assert claim is not None
        claim.take(n)
        claim.seal()
        held.extend((offset, claim) for _ in range(n))
    assert claims.held_bytes == 10 * sum(1 for n in parts if n)
    rnd.shuffle(held)
    remaining = dict(enumerate(parts))
    for offset, claim in held:
        claim.release()
        remaining[offset] -= 1
        first_undone = next((o for o in range(len(parts)) if remaining[o] > 0), len(parts))
        # The committable position is the lowest record with work left (or past the last one).
        assert claims.offsets.position(TP) == first_undone
    assert claims.held == 0 and claims.held_bytes == 0


def test_an_open_claim_holds_its_record_until_sealed_even_with_no_work() -> None:
    claims: Claims[PartitionKey] = Claims()
    claim = claims.open(TP, 0, size=5)
    assert claim is not None
    claim.take()
    claim.release()  # the work ended before the others were added: not done while unsealed
    assert claims.offsets.position(TP) == 0 and claims.held_bytes == 5
    claim.seal()
    assert claims.offsets.position(TP) == 1 and claims.held_bytes == 0


def test_a_unit_of_work_releases_each_record_that_brought_it_spans() -> None:
    claims: Claims[PartitionKey] = Claims()
    records = [claims.open(TP, offset, size=1) for offset in (0, 1, 2)]
    assert all(records)
    first, second, third = (c for c in records if c is not None)
    # Records 0 and 1 brought spans of one trace; record 2 too, and it also holds a span run.
    for record in (first, second, third):
        record.take()
    third.take()
    for record in (first, second, third):
        record.seal()

    def release_records() -> None:
        for record in (first, second, third):
            record.release()

    trace = Claim(release_records)
    trace.take(2)  # two runs of the trace
    trace.seal()
    trace.release()
    assert claims.offsets.position(TP) == 0  # the trace still has a run going
    trace.release()
    assert claims.offsets.position(TP) == 2  # record 2 still waits for its own span run
    third.release()
    assert claims.offsets.position(TP) == 3


def test_work_dropped_by_a_revoke_never_completes_the_record_fetched_again_at_that_offset() -> None:
    claims: Claims[PartitionKey] = Claims()
    old = claims.open(TP, 5, size=100)
    assert old is not None
    old.take()
    old.seal()
    assert claims.revoke([TP]) == 1
    assert claims.held_bytes == 0 and not old.live
    # The partition comes back and the record is fetched again; the old run ends afterwards.
    new = claims.open(TP, 5, size=100)
    assert new is not None
    new.take()
    new.seal()
    old.release()
    assert claims.offsets.position(TP) == 5 and new.live
    new.release()
    assert claims.offsets.position(TP) == 6


def test_a_claim_opened_before_a_revoke_and_sealed_after_a_reassignment_completes_nothing() -> None:
    # The record handler opened the claim, then waited (a slow dead-letter acknowledgement); meanwhile the
    # partition was revoked, assigned again and the record fetched again under the new generation.
    claims: Claims[PartitionKey] = Claims()
    stale = claims.open(TP, 7, size=10)
    assert stale is not None
    claims.revoke([TP])
    fresh = claims.open(TP, 7, size=10)
    assert fresh is not None and fresh.generation == stale.generation + 1
    fresh.take()
    fresh.seal()
    stale.take()
    stale.release()
    stale.seal()  # the handler resumes: nothing raises, nothing completes
    assert claims.offsets.position(TP) == 7 and fresh.live and claims.held == 1
    fresh.release()
    assert claims.offsets.position(TP) == 8 and claims.held == 0


def test_a_repeat_fetch_is_refused_and_a_record_holding_nothing_is_done_at_its_seal() -> None:
    claims: Claims[PartitionKey] = Claims()
    claim = claims.open(TP, 0, size=50)
    assert claim is not None
    claim.seal()
    assert claims.offsets.position(TP) == 1 and claims.held_bytes == 0
    assert claims.open(TP, 0, size=50) is None


def test_a_dropped_claim_never_finishes_whatever_happens_after() -> None:
    done: list[str] = []
    claim = Claim(lambda: done.append("done"))
    claim.take()
    claim.drop()
    claim.release()
    claim.seal()
    assert not done and not claim.live
