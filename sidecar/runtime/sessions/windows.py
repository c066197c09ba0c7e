"""Stage 2's windows: the turns of each conversation, by partition of the internal topic, until a window closes.

A conversation's turns all reach one partition (stage 1 partitions by conversation id), so one owner holds each
conversation. Each turn is kept as the bytes it arrived as (a decoded run is several times larger,
docs/sessions.md) and decoded only when its window is scored. Time is the turns' own: a turn's record timestamp
is its agent span's end, read per partition.

A window **closes**:

- ``idle``: no turn for ``idle_s``: on the partition's clock (the caller's: the wall clock once the partition is
  caught up, else the newest record timestamp read from it, so that a partition read behind never closes a
  window whose next turn is waiting unread; never past what stage 1 has read), or when a turn arrives that much
  later;
- ``max_duration``: ``max_duration_s`` after its first turn; ``max_turns``: its turn count reached;
  ``too_large``: the next turn would take its summaries past ``max_session_bytes`` (that turn opens the next
  window; a single turn past the bound closes its window at once);
- ``evicted``: the process holds ``max_bytes`` of turns and no closed window waits for its runs: the window whose
  last turn is oldest is scored now, from what it has.

Closing at an arriving turn is decided from record timestamps alone, so reading a partition again from its
beginning (a **restore**, after an assignment) cuts the same windows. During a restore nothing is scored: the
windows that close are held until the partition's restore ends, and a window's **marker** (its scores
confirmed) met on the way takes its turns out, so a window scored before is not scored again. A turn already
buffered, or of a window closed lately, is a **duplicate** (stage 1 published it twice: a crash between its
publish and its commit); a turn that arrives after its window closed idle, and started within ``idle_s`` of
that window's last turn, is **late**: it opens a new window.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from sidecar.conventions.session_turns import TurnSummary
from sidecar.core.runs import SessionCloseReason
from sidecar.runtime.sessions.limits import SessionLimits

__all__ = ["BufferedTurn", "SessionWindows", "TurnOutcome", "Window"]

P = TypeVar("P", bound=Hashable)  # a partition of the internal topic

TurnOutcome = Literal["buffered", "duplicate", "late"]

# Closed windows remembered per process to recognise duplicate and late turns (each keeps its turn ids).
_REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class BufferedTurn:
    data: bytes  # the turn's summary as it arrived
    start_ns: int  # its agent span's start and end
    end_ns: int


@dataclass(eq=False, slots=True)
class Window(Generic[P]):
    conversation: str
    partition: P
    first_ts: int  # record timestamps (ms) of its first and newest turns
    last_ts: int
    turns: dict[str, BufferedTurn] = field(default_factory=dict)  # by turn id ("trace id:span id")
    bytes: int = 0
    reason: SessionCloseReason | None = None  # once closed

    def ordered_ids(self) -> list[str]:
        """Its turn ids in conversation order (agent span start, then turn id): the first names the window."""
        return sorted(self.turns, key=lambda turn_id: (self.turns[turn_id].start_ns, turn_id))


@dataclass(frozen=True, slots=True)
class _Closed:
    last_end_ns: int
    reason: SessionCloseReason
    turn_ids: frozenset[str]


@dataclass(slots=True)
class _Partition(Generic[P]):
    open: dict[str, Window[P]] = field(default_factory=dict)  # by conversation, in the order they opened
    by_activity: OrderedDict[str, None] = field(default_factory=OrderedDict)  # least recently active first
    restoring: bool = True
    held: list[Window[P]] = field(default_factory=list)  # closed during the restore
    stream_ms: int = 0  # the newest record timestamp read


class SessionWindows(Generic[P]):
    def __init__(self, limits: SessionLimits) -> None:
        self._limits = limits
        self._idle_ms = int(limits.idle_s * 1000)
        self._max_duration_ms = int(limits.max_duration_s * 1000)
        self._parts: dict[P, _Partition[P]] = {}
        self.closed: deque[Window[P]] = deque()  # closed, waiting for their runs to start
        self._recent: OrderedDict[tuple[P, str], _Closed] = OrderedDict()
        self.bytes = 0  # of the turns held: open windows, held and closed ones
        self.closed_bytes = 0

    # -- partitions ----------------------------------------------------------------------------------------
    def assign(self, partition: P) -> None:
        """A partition assigned: its restore begins (nothing of it closes until :meth:`restored`)."""
        self.drop(partition)
        self._parts[partition] = _Partition()

    def restored(self, partition: P) -> tuple[int, int]:
        """Its restore ended: the windows closed meanwhile wait for their runs. Returns (open windows, turns)."""
        part = self._parts.get(partition)
        if part is None:
            return 0, 0
        part.restoring = False
        for window in part.held:
            self._to_closed(window)
        part.held.clear()
        return len(part.open), sum(len(w.turns) for w in part.open.values())

    def restoring(self, partition: P) -> bool:
        part = self._parts.get(partition)
        return part is not None and part.restoring

    def stream_ms(self, partition: P) -> int:
        part = self._parts.get(partition)
        return part.stream_ms if part is not None else 0

    @property
    def partitions(self) -> Iterable[P]:
        return self._parts.keys()

    def drop(self, partition: P) -> int:
        """Forget a revoked partition's windows (its new owner rebuilds them); returns the turns dropped."""
        part = self._parts.pop(partition, None)
        dropped = 0
        if part is not None:
            for window in (*part.open.values(), *part.held):
                dropped += len(window.turns)
                self.bytes -= window.bytes
        kept: deque[Window[P]] = deque()
        for window in self.closed:
            if window.partition == partition:
                dropped += len(window.turns)
                self.bytes -= window.bytes
                self.closed_bytes -= window.bytes
            else:
                kept.append(window)
        self.closed = kept
        for key in [key for key in self._recent if key[0] == partition]:
            del self._recent[key]
        return dropped

    # -- records -------------------------------------------------------------------------------------------
    def add_turn(self, partition: P, timestamp_ms: int, turn: TurnSummary, data: bytes) -> TurnOutcome:
        part = self._part(partition)
        part.stream_ms = max(part.stream_ms, timestamp_ms)
        conversation, turn_id = turn.conversation_id, turn.turn_id
        window = part.open.get(conversation)
        recent = self._recent.get((partition, conversation))
        if (window is not None and turn_id in window.turns) or (recent is not None and turn_id in recent.turn_ids):
            return "duplicate"
        size = len(data)
        if window is not None:
            reason = self._closes_before(window, timestamp_ms, size)
            if reason is not None:
                self._close(part, window, reason)
                window = None
        late = False
        if window is None:
            recent = self._recent.get((partition, conversation))
            late = (
                recent is not None
                and recent.reason == "idle"
                and turn.start_time_unix_nano < recent.last_end_ns + self._idle_ms * 1_000_000
            )
            window = part.open[conversation] = Window(conversation, partition, timestamp_ms, timestamp_ms)
        window.turns[turn_id] = BufferedTurn(data, turn.start_time_unix_nano, turn.end_time_unix_nano)
        window.bytes += size
        self.bytes += size
        window.first_ts = min(window.first_ts, timestamp_ms)  # turns of several stage-1 partitions interleave
        window.last_ts = max(window.last_ts, timestamp_ms)
        part.by_activity[conversation] = None
        part.by_activity.move_to_end(conversation)
        if len(window.turns) >= self._limits.max_turns:
            self._close(part, window, "max_turns")
        elif window.bytes >= self._limits.max_session_bytes:
            self._close(part, window, "too_large")
        return "late" if late else "buffered"

    def _closes_before(self, window: Window[P], timestamp_ms: int, size: int) -> SessionCloseReason | None:
        """Why ``window`` closed before a turn of ``size`` bytes published at ``timestamp_ms``, if it did."""
        if timestamp_ms - window.last_ts >= self._idle_ms:
            return "idle"
        if timestamp_ms - window.first_ts >= self._max_duration_ms:
            return "max_duration"
        if window.bytes + size > self._limits.max_session_bytes:
            return "too_large"
        return None

    def add_marker(self, partition: P, conversation: str, turn_ids: Iterable[str]) -> list[str]:
        """A window of ``conversation`` was scored and confirmed before: its turns still buffered are taken out
        (and their ids returned, for their tombstones), and later copies of them are duplicates."""
        part = self._part(partition)
        ids = frozenset(turn_ids)
        removed: list[str] = []
        for window in [w for w in (part.open.get(conversation), *part.held) if w is not None]:
            if window.conversation != conversation:
                continue
            for turn_id in ids & window.turns.keys():
                turn = window.turns.pop(turn_id)
                window.bytes -= len(turn.data)
                self.bytes -= len(turn.data)
                removed.append(turn_id)
            if not window.turns:
                if window.reason is None:
                    del part.open[conversation]
                    del part.by_activity[conversation]
                else:
                    part.held.remove(window)
        key = (partition, conversation)
        known = self._recent.get(key)
        self._remember(key, _Closed(known.last_end_ns, known.reason, known.turn_ids | ids) if known else None, ids)
        return removed

    def remove_turn(self, partition: P, conversation: str, turn_id: str) -> bool:
        """A turn's tombstone: the turn is done; taken out of its open window if it is still there."""
        part = self._parts.get(partition)
        window = part.open.get(conversation) if part is not None else None
        if part is None or window is None or turn_id not in window.turns:
            return False
        turn = window.turns.pop(turn_id)
        window.bytes -= len(turn.data)
        self.bytes -= len(turn.data)
        if not window.turns:
            del part.open[conversation]
            del part.by_activity[conversation]
        return True

    # -- closing -------------------------------------------------------------------------------------------
    def close_due(self, partition: P, now_ms: int) -> int:
        """Close the windows of a partition (not restoring) that ``now_ms`` on its clock ends; returns how many."""
        part = self._parts.get(partition)
        if part is None or part.restoring:
            return 0
        due: list[tuple[Window[P], SessionCloseReason]] = []
        for conversation in part.by_activity:
            window = part.open[conversation]
            if now_ms - window.last_ts < self._idle_ms:
                break  # the rest were active more recently
            due.append((window, "idle"))
        idle = {id(window) for window, _ in due}
        for window in part.open.values():
            if now_ms - window.first_ts < self._max_duration_ms:
                break  # the rest opened later
            if id(window) not in idle:
                due.append((window, "max_duration"))
        for window, reason in due:
            self._close(part, window, reason)
        return len(due)

    def evict(self) -> Window[P] | None:
        """Over ``max_bytes`` with no closed window waiting for its runs: close the window whose last turn is
        oldest (of the partitions not restoring) as ``evicted``, and return it; ``None`` when none is due."""
        if self.bytes <= self._limits.max_bytes or self.closed:
            return None
        oldest: tuple[_Partition[P], Window[P]] | None = None
        for part in self._parts.values():
            if part.restoring or not part.by_activity:
                continue
            window = part.open[next(iter(part.by_activity))]
            if oldest is None or window.last_ts < oldest[1].last_ts:
                oldest = (part, window)
        if oldest is None:
            return None
        self._close(oldest[0], oldest[1], "evicted")
        return oldest[1]

    def take(self) -> Window[P] | None:
        """The next closed window to score (its bytes leave the buffer)."""
        if not self.closed:
            return None
        window = self.closed.popleft()
        self.bytes -= window.bytes
        self.closed_bytes -= window.bytes
        return window

    @property
    def open_windows(self) -> int:
        return sum(len(part.open) + len(part.held) for part in self._parts.values()) + len(self.closed)

    # -- inside --------------------------------------------------------------------------------------------
    def _part(self, partition: P) -> _Partition[P]:
        part = self._parts.get(partition)
        if part is None:  # a record of a partition never announced: read as assigned and restored
            part = self._parts[partition] = _Partition(restoring=False)
        return part

    def _close(self, part: _Partition[P], window: Window[P], reason: SessionCloseReason) -> None:
        del part.open[window.conversation]
        del part.by_activity[window.conversation]
        window.reason = reason
        last_end = max((turn.end_ns for turn in window.turns.values()), default=0)
        key = (window.partition, window.conversation)
        self._remember(key, _Closed(last_end, reason, frozenset(window.turns)), frozenset())
        if part.restoring:
            part.held.append(window)
        else:
            self._to_closed(window)

    def _to_closed(self, window: Window[P]) -> None:
        self.closed.append(window)
        self.closed_bytes += window.bytes

    def _remember(self, key: tuple[P, str], closed: _Closed | None, ids: frozenset[str]) -> None:
        self._recent[key] = closed if closed is not None else _Closed(0, "idle", ids)
        self._recent.move_to_end(key)
        if len(self._recent) > _REMEMBERED:
            self._recent.popitem(last=False)
