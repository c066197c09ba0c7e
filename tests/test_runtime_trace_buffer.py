"""The trace buffer: readiness by root + idle, max wait and per-trace bound; late spans; revocation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import Span, TracesData

from sidecar.conventions.trace_runs import TraceSpan, group_by_trace
from sidecar.runtime.trace_buffer import BufferedTrace, TraceBuffer

TRACE = bytes(range(16))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Record:
    """What holds back a record that brought spans (a stand-in for its claim's part)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.released = 0

    def release(self) -> None:
        self.released += 1


def offsets_held(trace: BufferedTrace[object]) -> set[int]:
    return {held.offset for held in trace.held if isinstance(held, Record)}


def span(span_id: int, parent: int | None = None, *, size: int = 0, remote_parent: bool = False) -> TraceSpan:
    proto = Span(
        trace_id=TRACE,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent is not None else b"",
        name="x" * size,
        flags=0x300 if remote_parent else 0x100,
    )
    return TraceSpan(proto, "svc")


def test_ready_once_the_root_arrived_and_the_trace_went_quiet() -> None:
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=2, max_wait_s=60, clock=clock)
    assert buffer.add(0, 10, TRACE, [span(2, parent=1), span(3, parent=2)], held=Record(10)) == "buffered"
    clock.now += 5
    assert buffer.due() == []  # children only: the root has not ended yet
    assert buffer.add(0, 11, TRACE, [span(1)], held=Record(11)) == "buffered"
    clock.now += 1.9
    assert buffer.due() == []  # quiet for less than idle_s
    clock.now += 0.2
    [(trace, reason)] = buffer.due()
    assert reason == "root_idle" and offsets_held(trace) == {10, 11} and len(trace.spans) == 3
    held = list(trace.held)
    trace.release_held()
    assert [r.released for r in held if isinstance(r, Record)] == [1, 1] and not trace.held
    assert len(buffer) == 0 and buffer.bytes == 0
    # The trace was scored: a span arriving now is late, not a new trace.
    assert buffer.add(0, 12, TRACE, [span(4, parent=1)]) == "late"


def test_a_remote_parent_marks_the_local_root_and_a_single_orphan_does_too() -> None:
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=1, max_wait_s=60, clock=clock)
    buffer.add(0, 1, TRACE, [span(5, parent=99, remote_parent=True)])
    other = bytes(range(1, 17))
    orphan = TraceSpan(
        Span(trace_id=other, span_id=(7).to_bytes(8, "big"), parent_span_id=(98).to_bytes(8, "big")), None
    )
    buffer.add(0, 2, other, [orphan])
    clock.now += 1
    assert sorted(reason for _, reason in buffer.due()) == ["root_idle", "root_idle"]


def test_max_wait_and_the_per_trace_bound() -> None:
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=1, max_wait_s=30, max_trace_bytes=200, clock=clock)
    buffer.add(0, 1, TRACE, [span(2, parent=1)])  # the root never comes
    big = bytes(range(2, 18))
    buffer.add(0, 2, big, [TraceSpan(Span(trace_id=big, span_id=b"\x01" * 8, name="y" * 300), None)])
    [(evicted, reason)] = buffer.due()
    assert evicted.trace_id == big and reason == "evicted"
    clock.now += 29
    assert buffer.due() == []
    assert buffer.next_due_in() == 1.0
    clock.now += 1
    [(trace, reason)] = buffer.due()
    assert trace.trace_id == TRACE and reason == "max_wait"


def test_revoked_partitions_are_forgotten() -> None:
    buffer: TraceBuffer[str] = TraceBuffer(clock=Clock())
    other = bytes(range(1, 17))
    buffer.add("p0", 1, TRACE, [span(1)])
    buffer.add("p1", 1, other, [TraceSpan(Span(trace_id=other, span_id=b"\x02" * 8), None)])
    [dropped] = buffer.drop_partitions(["p0"])
    assert dropped.trace_id == TRACE and len(buffer) == 1
    assert buffer.add("p1", 2, TRACE, [span(1)]) == "buffered"  # not scored: not late either


@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 8), st.integers(0, 40)), max_size=40))
def test_bytes_and_records_add_up_and_each_span_counts_once(arrivals: list[tuple[int, int, int]]) -> None:
    buffer: TraceBuffer[int] = TraceBuffer(clock=Clock(), max_trace_bytes=10**9)
    seen: dict[int, TraceSpan] = {}
    for offset, (span_id, parent, size) in enumerate(arrivals):
        item = seen.setdefault(span_id, span(span_id, parent or None, size=size))
        buffer.add(0, offset, TRACE, [item], held=Record(offset))
    assert buffer.bytes == sum(item.span.ByteSize() for item in seen.values())
    for trace in buffer.drop_partitions([0]):
        assert len(trace.spans) == len(seen) and offsets_held(trace) == set(range(len(arrivals)))
    assert buffer.bytes == 0


def test_a_full_buffer_gives_up_the_oldest_trace_holding_what_prefer_accepts() -> None:
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=2, max_wait_s=60, clock=clock)
    ids = [bytes([i]) * 16 for i in range(1, 4)]
    for offset, trace_id in enumerate(ids):
        buffer.add(0, offset, trace_id, [span(offset + 10, parent=1)])
    taken = buffer.take_oldest(prefer=lambda t: t.trace_id == ids[1])
    assert taken is not None and taken.trace_id == ids[1] and len(buffer) == 2
    oldest = buffer.take_oldest(prefer=lambda t: False)  # nothing preferred: the oldest
    assert oldest is not None and oldest.trace_id == ids[0]
    assert buffer.take_oldest() is not None and buffer.take_oldest() is None


def test_a_trace_taken_out_without_a_run_starts_anew_and_is_marked_cut_short() -> None:
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=2, max_wait_s=60, clock=clock)
    buffer.add(0, 1, TRACE, [span(3, parent=2)])
    taken = buffer.take_oldest()
    assert taken is not None and not taken.cut_short
    buffer.forget(taken)  # the runtime found no agent span in it
    assert buffer.add(0, 2, TRACE, [span(2, parent=1), span(1)], held=Record(2)) == "buffered"  # not late
    clock.now += 3
    [(again, reason)] = buffer.due()
    assert reason == "root_idle" and again.cut_short and offsets_held(again) == {2}
    assert buffer.add(0, 3, TRACE, [span(4, parent=1)]) == "late"  # scored this time


def test_revoking_a_partition_forgets_what_was_scored_there() -> None:
    """Its records are read again (by this consumer if the partition comes back): not late, assembled anew."""
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=1, max_wait_s=60, clock=clock)
    buffer.add(0, 1, TRACE, [span(1)])
    clock.now += 2
    assert len(buffer.due()) == 1
    buffer.drop_partitions([0])
    assert buffer.add(0, 1, TRACE, [span(1)]) == "buffered"


def test_the_same_trace_id_on_two_partitions_is_two_traces() -> None:
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=1, max_wait_s=60, clock=Clock())
    buffer.add(0, 1, TRACE, [span(1)])
    buffer.add(1, 1, TRACE, [span(2, parent=1)])
    assert len(buffer) == 2
    assert [t.partition for t in buffer.drop_partitions([1])] == [1] and len(buffer) == 1


def record(*spans: Span, service: str = "svc") -> bytes:
    """An OTLP export request of ``spans`` under one resource, encoded as the Collector writes a record."""
    request = TracesData()
    resource_spans = request.resource_spans.add()
    attribute = resource_spans.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", service
    resource_spans.scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def grouped(data: bytes, offset: int) -> dict[bytes, list[TraceSpan]]:
    return group_by_trace(TracesData.FromString(data), offset=offset, record=data)


def test_a_record_holding_one_trace_is_kept_whole_and_decodes_to_its_spans() -> None:
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=1, max_wait_s=60, clock=clock)
    first = record(span(2, parent=1).span, span(3, parent=2).span)
    second = record(span(1).span, span(3, parent=2).span)  # the Collector's retry brings span 3 again
    lone = Span(trace_id=bytes(range(1, 17)), span_id=b"\x05" * 8)
    shared = record(span(4, parent=1).span, lone)  # two traces in one record
    for offset, data in enumerate((first, second, shared)):
        for trace_id, spans in grouped(data, offset).items():
            buffer.add(0, offset, trace_id, spans, held=Record(offset))
    # The record kept whole counts its bytes; the others count their new spans' bytes.
    singles = (span(1).span, span(4, parent=1).span, lone)
    assert buffer.bytes == len(first) + sum(single.ByteSize() for single in singles)
    clock.now += 2
    trace = {trace.trace_id: trace for trace, _ in buffer.due()}[TRACE]
    assert len(trace.whole) == 1 and [int.from_bytes(s.span_id, "big") for s in trace.spans] == [1, 4]
    decoded = {int.from_bytes(item.span.span_id, "big"): item for item in trace.decoded()}
    # Each span once, in the order the spans arrived, whichever way they were kept.
    assert [int.from_bytes(item.span.span_id, "big") for item in trace.decoded()] == [2, 3, 1, 4]
    assert (decoded[2].service, decoded[2].offset, decoded[2].span.parent_span_id) == ("svc", 0, (1).to_bytes(8, "big"))
    assert (decoded[4].service, decoded[4].offset) == ("svc", 2)
    assert trace.span_count == 4 and offsets_held(trace) == {0, 1, 2}


def test_a_trace_kept_in_whole_records_finds_its_root_as_single_spans_do() -> None:
    """An older SDK: flags say nothing of remote parents; the entry span hangs under a caller's span."""
    clock = Clock()
    buffer: TraceBuffer[int] = TraceBuffer(idle_s=1, max_wait_s=60, clock=clock)
    children = [
        Span(trace_id=TRACE, span_id=(i).to_bytes(8, "big"), parent_span_id=(1).to_bytes(8, "big")) for i in (2, 3)
    ]
    entry = Span(trace_id=TRACE, span_id=(1).to_bytes(8, "big"), parent_span_id=(99).to_bytes(8, "big"))
    [(trace_id, spans)] = grouped(record(*children), 0).items()
    buffer.add(0, 0, trace_id, spans)
    clock.now += 2
    assert buffer.due() == []  # two spans whose parent is missing: not one entry span
    [(trace_id, spans)] = grouped(record(entry), 1).items()
    buffer.add(0, 1, trace_id, spans)
    clock.now += 2
    [(trace, reason)] = buffer.due()
    assert reason == "root_idle" and len(trace.whole) == 2 and trace.span_count == 3
