"""Stage 2's windows on their own: closing on each partition's clock, the bounds, restores, markers, duplicate and
late turns (the broker-level behaviour is in test_sessions_e2e.py)."""

from __future__ import annotations

from sidecar.conventions.session_turns import TurnSummary
from sidecar.runtime.sessions.limits import SessionLimits
from sidecar.runtime.sessions.windows import SessionWindows, Window

S = 1000  # ms
NS = 1_000_000  # per ms


def turn(conversation: str, n: int, *, start_ms: int | None = None, text: str = "hello") -> tuple[TurnSummary, bytes]:
    start = (start_ms if start_ms is not None else n * 10 * S) * NS
    summary = TurnSummary(
        conversation_id=conversation,
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 2 * S * NS,
        user=text,
        answer=text,
        scorers=("s",),
    )
    return summary, summary.encode()


def windows(**limits: object) -> SessionWindows[str]:
    buffer: SessionWindows[str] = SessionWindows(SessionLimits(**{"idle_s": 60.0, **limits}))  # type: ignore[arg-type]
    buffer.assign("p0")
    buffer.restored("p0")
    return buffer


def add(buffer: SessionWindows[str], conversation: str, n: int, at_ms: int, **kw: object) -> str:
    summary, data = turn(conversation, n, **kw)  # type: ignore[arg-type]
    return buffer.add_turn("p0", at_ms, summary, data)


def taken(buffer: SessionWindows[str]) -> list[Window[str]]:
    out = []
    while (window := buffer.take()) is not None:
        out.append(window)
    return out


def test_a_window_closes_once_its_partition_clock_passes_idle_s_after_its_last_turn() -> None:
    buffer = windows()
    assert add(buffer, "c1", 1, 0) == "buffered"
    assert add(buffer, "c1", 2, 30 * S) == "buffered"
    assert add(buffer, "c2", 3, 40 * S) == "buffered"
    assert buffer.close_due("p0", 89 * S) == 0  # c1's last turn at 30 s: quiet for 59 s only
    assert buffer.close_due("p0", 90 * S) == 1
    [window] = taken(buffer)
    assert (window.conversation, window.reason, len(window.turns)) == ("c1", "idle", 2)
    assert window.ordered_ids()[0] == f"{1:032x}:{1:016x}"  # the first turn names the window
    assert buffer.bytes == len(turn("c2", 3)[1])  # only c2's turn is held now


def test_a_turn_published_idle_s_after_the_last_closes_the_window_on_its_own_timestamp() -> None:
    # How a restore cuts the same windows as the live process: from record timestamps alone.
    buffer = windows()
    add(buffer, "c1", 1, 0)
    assert add(buffer, "c1", 2, 61 * S, start_ms=200 * S) == "buffered"
    [first] = taken(buffer)
    assert first.reason == "idle" and list(first.turns) == [f"{1:032x}:{1:016x}"]
    assert buffer.open_windows == 1


def test_the_bounds_cut_a_window_and_say_why() -> None:
    buffer = windows(max_turns=3)
    for n in range(1, 5):
        add(buffer, "c1", n, n * S)
    [cut] = taken(buffer)
    assert cut.reason == "max_turns" and len(cut.turns) == 3  # the fourth turn opened the next window

    size = len(turn("c2", 1)[1])
    buffer = windows(max_session_bytes=2 * size + 1)
    for n in range(1, 4):
        add(buffer, "c2", n, n * S)
    [large] = taken(buffer)
    assert large.reason == "too_large" and len(large.turns) == 2

    buffer = windows(max_duration_s=100.0)
    for n in range(0, 20):
        add(buffer, "c3", n, n * 10 * S)  # never quiet for idle_s
    [long] = taken(buffer)
    assert long.reason == "max_duration" and len(long.turns) == 10
    assert buffer.close_due("p0", 199 * S) == 0
    assert buffer.close_due("p0", 200 * S) == 1  # the next window reaches its own max_duration on the clock
    assert taken(buffer)[0].reason == "max_duration"


def test_a_full_buffer_evicts_the_conversation_whose_last_turn_is_oldest() -> None:
    size = sum(len(turn(c, n)[1]) for c, n in (("old", 1), ("new", 2), ("old", 3)))
    buffer = windows(max_bytes=size, max_session_bytes=size)
    add(buffer, "old", 1, 0)
    add(buffer, "new", 2, 5 * S)
    add(buffer, "old", 3, 10 * S)  # "old" is now the most recent
    assert buffer.evict() is None  # at the bound, not past it
    add(buffer, "other", 4, 20 * S)
    evicted = buffer.evict()
    assert evicted is not None and (evicted.conversation, evicted.reason) == ("new", "evicted")
    assert buffer.evict() is None  # one closed window waits for its runs: no further eviction meanwhile
    assert [w.conversation for w in taken(buffer)] == ["new"]


def test_nothing_closes_during_a_restore_and_a_marker_takes_out_what_was_scored() -> None:
    buffer: SessionWindows[str] = SessionWindows(SessionLimits(idle_s=60.0))
    buffer.assign("p0")
    first = [turn("c1", n) for n in (1, 2)]
    for n, (summary, data) in enumerate(first):
        buffer.add_turn("p0", n * S, summary, data)
    # A later turn past idle_s: the window of turns 1-2 closed (held: the restore has not ended).
    late_summary, late_data = turn("c1", 3, start_ms=500 * S)
    buffer.add_turn("p0", 200 * S, late_summary, late_data)
    assert buffer.close_due("p0", 10_000 * S) == 0 and buffer.take() is None
    # Its marker: the window of turns 1-2 was scored and confirmed before; it is not scored again.
    removed = buffer.add_marker("p0", "c1", [first[0][0].turn_id, first[1][0].turn_id])
    assert sorted(removed) == sorted(t.turn_id for t, _ in first)
    # A copy of a scored turn (stage 1 published it again) is a duplicate, not a new window.
    assert buffer.add_turn("p0", 201 * S, *first[0]) == "duplicate"
    assert buffer.restored("p0") == (1, 1)  # one open conversation left: turn 3
    assert buffer.take() is None
    assert buffer.close_due("p0", 261 * S) == 1
    [window] = taken(buffer)
    assert list(window.turns) == [late_summary.turn_id]


def test_duplicate_and_late_turns() -> None:
    buffer = windows()
    summary, data = turn("c1", 1)
    assert buffer.add_turn("p0", 0, summary, data) == "buffered"
    assert buffer.add_turn("p0", 1 * S, summary, data) == "duplicate"
    assert buffer.close_due("p0", 70 * S) == 1
    taken(buffer)
    assert buffer.add_turn("p0", 80 * S, summary, data) == "duplicate"  # of a window already scored
    # A turn whose agent started within idle_s of the scored window's last turn, published after it closed
    # (stage 1 read its trace late): late, in a window of its own.
    assert add(buffer, "c1", 2, 90 * S, start_ms=20 * S) == "late"
    # A turn long after (the user came back): a new window, not late.
    assert add(buffer, "c9", 3, 0) == "buffered"
    buffer.close_due("p0", 70 * S)
    taken(buffer)
    assert add(buffer, "c9", 4, 100 * S, start_ms=500 * S) == "buffered"


def test_a_revoked_partition_forgets_its_windows() -> None:
    buffer = windows()
    add(buffer, "c1", 1, 0)
    add(buffer, "c2", 2, 0)
    buffer.close_due("p0", 61 * S)
    assert buffer.drop("p0") == 2
    assert buffer.bytes == 0 and buffer.take() is None and buffer.open_windows == 0
