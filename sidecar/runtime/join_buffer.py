"""What the content join holds: span records waiting for their LLM calls' content, and content waiting for its span.

Two topics bring one call's span and its content (``sidecar.conventions.log_content``) in no set order: whichever
arrives first waits for the other, for ``join_wait_s`` at most, and everything held counts against ``max_bytes``.
A span record waits while one of its spans awaits content; it is whole once every such span received content that
holds the call's answer. Content waits by (trace id, span id) for its span. Past its deadline a record goes on as
it is and content is let go; past the bytes bound the oldest of either goes first. Pure bookkeeping, with a clock:
the stage (``sidecar.runtime.stages.content``) holds the records' claims and forwards the records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sidecar.conventions.log_content import SpanContent, SpanKey

__all__ = ["HeldContent", "JoinBuffer", "JoinLimits", "WaitingRecord"]

P = TypeVar("P", bound=Hashable)  # a partition
R = TypeVar("R")  # a record of spans
H = TypeVar("H")  # what holds a logs record back (a part of its claim)


@dataclass(frozen=True, slots=True)
class JoinLimits:
    # How long a span record waits for its content, and content for its span.
    join_wait_s: float = 5.0
    # Bytes held: span records waiting and content (16 MiB). Past it the oldest goes on (a record, as it came) or
    # is let go (content).
    max_bytes: int = 16 * 1024 * 1024

    def buffer(self, clock: Callable[[], float] = time.monotonic) -> JoinBuffer[P, R, H]:
        return JoinBuffer(self, clock)


@dataclass(slots=True)
class HeldContent(Generic[P, H]):
    partition: P  # of the logs record it came from
    key: SpanKey
    content: SpanContent
    held: H
    deadline: float


@dataclass(slots=True)
class WaitingRecord(Generic[P, R, H]):
    partition: P
    record: R
    size: int  # the record's bytes and the content joined to it
    deadline: float
    awaiting: set[SpanKey] = field(default_factory=set)  # spans still without the content that holds their answer
    joined: list[HeldContent[P, H]] = field(default_factory=list)
    spans: int = 0  # spans that awaited content when it arrived

    def contents_of(self, key: SpanKey) -> list[SpanContent]:
        return [held.content for held in self.joined if held.key == key]


class JoinBuffer(Generic[P, R, H]):
    def __init__(self, limits: JoinLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        # Insertion order is deadline order: every entry waits the same join_wait_s from when it arrived.
        self._records: dict[int, WaitingRecord[P, R, H]] = {}
        self._awaited: dict[SpanKey, int] = {}  # span → the record waiting for its content
        self._contents: dict[int, HeldContent[P, H]] = {}
        self._by_span: dict[SpanKey, list[int]] = {}
        self._ids = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._records) + len(self._contents)

    @property
    def records(self) -> int:
        return len(self._records)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # -- arrivals ------------------------------------------------------------------------------------------
    def add_record(
        self, partition: P, record: R, size: int, awaiting: Iterable[SpanKey]
    ) -> tuple[WaitingRecord[P, R, H], bool]:
        """A span record whose spans ``awaiting`` have no content of their own: the content held for them joins it.
        Returns the entry and whether it is whole now (then it is not held: the caller forwards it at once)."""
        keys = set(awaiting)
        deadline = self._clock() + self.limits.join_wait_s
        entry: WaitingRecord[P, R, H] = WaitingRecord(partition, record, size, deadline, keys, spans=len(keys))
        for key in list(entry.awaiting):
            for content_id in self._by_span.pop(key, ()):
                held = self._contents.pop(content_id)
                self.bytes -= held.content.size
                entry.joined.append(held)
                entry.size += held.content.size
                if held.content.complete:
                    entry.awaiting.discard(key)
        if not entry.awaiting:
            return entry, True
        record_id = self._next_id()
        self._records[record_id] = entry
        for key in entry.awaiting:
            self._awaited[key] = record_id
        self.bytes += entry.size
        return entry, False

    def add_content(self, partition: P, key: SpanKey, content: SpanContent, held: H) -> WaitingRecord[P, R, H] | None:
        """Content of span ``key``: joined to the record waiting for it (returned when that record is whole now, and
        no longer held), else held until its span comes."""
        entry = HeldContent(partition, key, content, held, self._clock() + self.limits.join_wait_s)
        self.bytes += content.size
        record_id = self._awaited.get(key)
        if record_id is None:
            content_id = self._next_id()
            self._contents[content_id] = entry
            self._by_span.setdefault(key, []).append(content_id)
            return None
        waiting = self._records[record_id]
        waiting.joined.append(entry)
        waiting.size += content.size
        if not content.complete:
            return None
        waiting.awaiting.discard(key)
        del self._awaited[key]
        if waiting.awaiting:
            return None
        self._forget_record(record_id)
        return waiting

    # -- departures ----------------------------------------------------------------------------------------
    def _forget_record(self, record_id: int) -> WaitingRecord[P, R, H]:
        entry = self._records.pop(record_id)
        for key in entry.awaiting:
            if self._awaited.get(key) == record_id:
                del self._awaited[key]
        self.bytes -= entry.size
        return entry

    def _forget_content(self, content_id: int) -> HeldContent[P, H]:
        held = self._contents.pop(content_id)
        ids = self._by_span.get(held.key)
        if ids is not None:
            ids.remove(content_id)
            if not ids:
                del self._by_span[held.key]
        self.bytes -= held.content.size
        return held

    def due(self) -> tuple[list[WaitingRecord[P, R, H]], list[HeldContent[P, H]]]:
        """The records and content whose wait is over (then no longer held)."""
        now = self._clock()
        records = [self._forget_record(i) for i in _until(self._records, now)]
        contents = [self._forget_content(i) for i in _until(self._contents, now)]
        return records, contents

    def over_bound(self) -> tuple[list[WaitingRecord[P, R, H]], list[HeldContent[P, H]]]:
        """The oldest entries, until what is held is within ``max_bytes`` again (then no longer held)."""
        records: list[WaitingRecord[P, R, H]] = []
        contents: list[HeldContent[P, H]] = []
        while self.bytes > self.limits.max_bytes and (self._records or self._contents):
            oldest_record = next(iter(self._records.items()), None)
            oldest_content = next(iter(self._contents.items()), None)
            if oldest_content is None or (
                oldest_record is not None and oldest_record[1].deadline <= oldest_content[1].deadline
            ):
                assert oldest_record is not None
                records.append(self._forget_record(oldest_record[0]))
            else:
                contents.append(self._forget_content(oldest_content[0]))
        return records, contents

    def take_all(self) -> tuple[list[WaitingRecord[P, R, H]], list[HeldContent[P, H]]]:
        """Everything held, oldest first (nothing more will come)."""
        records = [self._forget_record(i) for i in list(self._records)]
        contents = [self._forget_content(i) for i in list(self._contents)]
        return records, contents

    def drop_partitions(self, partitions: set[P]) -> list[HeldContent[P, H]]:
        """Forget what came from ``partitions`` (revoked: their records' claims are dropped, their new owner reads
        them again). Returns the content joined to the records forgotten, which may come from other partitions."""
        joined: list[HeldContent[P, H]] = []
        for record_id in [i for i, e in self._records.items() if e.partition in partitions]:
            joined.extend(self._forget_record(record_id).joined)
        for content_id in [i for i, e in self._contents.items() if e.partition in partitions]:
            self._forget_content(content_id)
        return joined


def _until(entries: dict[int, WaitingRecord[P, R, H]] | dict[int, HeldContent[P, H]], now: float) -> list[int]:
    """The ids of the entries due by ``now``: the first ones, since entries are in deadline order."""
    due: list[int] = []
    for entry_id, entry in entries.items():
        if entry.deadline > now:
            break
        due.append(entry_id)
    return due
