"""What the content join holds (``runtime.join_buffer``): span records and content waiting for each other, in either
order, within ``join_wait_s`` and ``max_bytes``; every record and every piece of content comes out exactly once."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.conventions.log_content import SpanContent
from sidecar.runtime.join_buffer import JoinBuffer, JoinLimits


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _buffer(wait_s: float = 5.0, max_bytes: int = 1000) -> tuple[JoinBuffer[int, str, str], Clock]:
    clock = Clock()
    return JoinLimits(join_wait_s=wait_s, max_bytes=max_bytes).buffer(clock), clock


def _content(size: int = 10, *, complete: bool = True) -> SpanContent:
    return SpanContent(complete=complete, size=size)


K1, K2 = (b"t" * 16, b"a" * 8), (b"t" * 16, b"b" * 8)


def test_content_first_then_its_span_is_whole_at_once() -> None:
    buffer, _ = _buffer()
    assert buffer.add_content(0, K1, _content(), "log-1") is None
    entry, whole = buffer.add_record(0, "spans", 100, [K1])
    assert whole and [held.held for held in entry.joined] == ["log-1"] and buffer.bytes == 0


def test_span_first_waits_for_the_content_that_holds_the_answer() -> None:
    buffer, _ = _buffer()
    entry, whole = buffer.add_record(0, "spans", 100, [K1, K2])
    assert not whole and buffer.bytes == 100
    assert buffer.add_content(0, K1, _content(complete=False), "request") is None  # the request's events only
    assert buffer.add_content(0, K1, _content(), "answer") is None  # K2 still waits
    done = buffer.add_content(0, K2, _content(), "other")
    assert done is entry and not done.awaiting and done.spans == 2
    assert [held.held for held in done.joined] == ["request", "answer", "other"] and buffer.bytes == 0


def test_waits_end_at_join_wait_s_and_the_bound_lets_the_oldest_go() -> None:
    buffer, clock = _buffer(wait_s=5.0, max_bytes=150)
    buffer.add_record(0, "old", 100, [K1])
    clock.now = 3.0
    buffer.add_content(1, K2, _content(size=40), "lonely")
    clock.now = 5.0
    records, contents = buffer.due()
    assert [e.record for e in records] == ["old"] and contents == []
    clock.now = 8.0  # its 5 s from 3 are over
    records, contents = buffer.due()
    assert records == [] and [held.held for held in contents] == ["lonely"] and buffer.bytes == 0
    buffer.add_record(0, "a", 100, [K1])
    buffer.add_content(0, K2, _content(size=100), "big")
    records, contents = buffer.over_bound()
    assert [e.record for e in records] == ["a"] and contents == [] and buffer.bytes == 100


def test_a_revoke_forgets_what_came_from_its_partitions() -> None:
    buffer, _ = _buffer()
    buffer.add_record(0, "p0", 100, [K1])
    buffer.add_content(1, K2, _content(), "p1")
    buffer.drop_partitions({0, 1})
    assert len(buffer) == 0 and buffer.bytes == 0


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.lists(st.integers(0, 4), min_size=1, max_size=3), st.integers(1, 200)),
        st.tuples(st.just("content"), st.integers(0, 4), st.integers(1, 200), st.booleans()),
        st.tuples(st.just("tick"), st.floats(0, 3)),
        st.tuples(st.just("bound")),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(_ops)
def test_everything_held_comes_out_once_and_the_bound_holds(ops: list[tuple[Any, ...]]) -> None:
    buffer, clock = _buffer(wait_s=2.0, max_bytes=300)
    out_records: list[int] = []
    out_contents: list[int] = []
    added_records = 0
    added_contents = 0

    def record_out(entries: Any) -> None:
        for entry in entries:
            out_records.append(entry.record)
            out_contents.extend(held.held for held in entry.joined)

    for op in ops:
        if op[0] == "record":
            keys = [(b"t" * 16, bytes([k]) * 8) for k in set(op[1])]
            entry, whole = buffer.add_record(0, added_records, op[2], keys)
            added_records += 1
            if whole:
                assert not entry.awaiting
                record_out([entry])
        elif op[0] == "content":
            done = buffer.add_content(
                0, (b"t" * 16, bytes([op[1]]) * 8), _content(op[2], complete=op[3]), added_contents
            )
            added_contents += 1
            if done is not None:
                assert not done.awaiting
                record_out([done])
        elif op[0] == "tick":
            clock.now += op[1]
            records, contents = buffer.due()
            record_out(records)
            out_contents.extend(held.held for held in contents)
        else:
            records, contents = buffer.over_bound()
            record_out(records)
            out_contents.extend(held.held for held in contents)
            assert buffer.bytes <= 300
        assert buffer.bytes >= 0
    records, contents = buffer.take_all()
    record_out(records)
    out_contents.extend(held.held for held in contents)
    assert sorted(out_records) == list(range(added_records))
    assert sorted(out_contents) == list(range(added_contents))
    assert buffer.bytes == 0 and len(buffer) == 0
