"""The content join: LLM calls whose content comes as OTLP log events (``kafka.log_topics``), joined to their spans
before the span and trace stages read them.

Not a scope: the stage in front of the others when logs topics are configured. The record handler hands it every
record of the traces topic (it feeds the span and trace stages: ``feeds``) and every record of the logs topics
(``take_logs``). A traces record none of whose LLM call spans lacks content goes on at once. One whose LLM call spans
carry no content of their own (``conventions.log_content.awaits_content``) takes the content already held for them;
whole, it goes on at once, else it waits until the content that holds each call's answer arrives, or
``runtime.log_join.join_wait_s`` passes (then it goes on with what came: a call still without content is counted
``no_content`` by the stages, as without the join). Content waits for its span as long; past that, or past
``max_bytes`` held, it is let go, counted.

At-least-once: a record that waits holds a part of its claim; once handed on, the stages work under a claim of the
join's that releases the record's part and the part of every logs record whose content it received only when all
their work is done. So a logs record commits once the spans it completed are scored and exported, and a traces record
once its runs are. What is held at a stop or a crash is not committed: both topics are read again from their last
commit, and the content joins its spans again (their score ids are the same).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from aiokafka import TopicPartition

from sidecar.conventions.log_content import SpanKey, attach, awaits_content, content_by_span
from sidecar.conventions.selection import sampled_in
from sidecar.core.observers import ContentWaitOutcome, LogContentOutcome, ServiceObserver
from sidecar.ingest.deadletter import DeadLetter
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.runtime.claims import Claim, RecordClaim
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.join_buffer import HeldContent, JoinBuffer, JoinLimits, WaitingRecord
from sidecar.runtime.pacing import ticks
from sidecar.runtime.stages.base import Fetched, FetchedLogs, Stage, set_aside

__all__ = ["ContentJoinStage"]

log = logging.getLogger(__name__)

_TICK_S = 0.1
_EVICTION_WARNING_EVERY_S = 60.0

Waiting = WaitingRecord[TopicPartition, Fetched, RecordClaim]
Held = HeldContent[TopicPartition, RecordClaim]


class ContentJoinStage(Stage):
    def __init__(
        self,
        downstream: Sequence[Stage],
        limits: JoinLimits,
        *,
        dispatcher: RunDispatcher,
        observer: ServiceObserver,
        dead_letters: DeadLetterPublisher,
    ) -> None:
        super().__init__(())
        self._downstream = tuple(downstream)
        self._limits = limits
        self.buffer: JoinBuffer[TopicPartition, Fetched, RecordClaim] = limits.buffer()
        self._rate = max((stage.key_sample_rate() for stage in self._downstream), default=0.0)
        self._dispatcher = dispatcher
        self._observer = observer
        self._dead_letters = dead_letters
        # The claims the records handed on work under, by partition, with the parts of the logs records whose content
        # they received: a revoke drops them.
        self._units: dict[TopicPartition, dict[Claim, list[RecordClaim]]] = {}
        self._last_eviction_warning = -_EVICTION_WARNING_EVERY_S

    @property
    def name(self) -> str:
        return "content join"

    def feeds(self) -> Sequence[Stage]:
        return self._downstream

    def key_sample_rate(self) -> float:
        return self._rate

    # -- records of the traces topic -----------------------------------------------------------------------
    def take(self, record: Fetched) -> None:
        awaiting = self._awaiting(record)
        if not awaiting:
            for stage in self._downstream:
                stage.take(record)
            return
        record.claim.take()
        size = len(record.origin.value) if record.origin is not None else record.traces.ByteSize()
        entry, whole = self.buffer.add_record(record.partition, record, size, awaiting)
        if whole:
            self._hand_on(entry, now=True)
        self._within_bounds()
        self._observe()

    def _awaiting(self, record: Fetched) -> list[SpanKey]:
        rate = self._rate
        return [
            (bytes(span.trace_id), bytes(span.span_id))
            for resource_spans in record.traces.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
            if awaits_content(span) and sampled_in(rate, span.trace_id)
        ]

    # -- records of the logs topics ------------------------------------------------------------------------
    def take_logs(self, record: FetchedLogs) -> None:
        found = content_by_span(record.logs)
        if found.without_span:
            self._observer.log_content("no_span", found.without_span)
        claim = record.claim
        sampled_out = 0
        for key, content in found.by_span.items():
            if not sampled_in(self._rate, key[0]):
                sampled_out += 1
                continue
            claim.take()  # released once the spans it completes are done, or when it is let go
            completed = self.buffer.add_content(record.partition, key, content, claim)
            if completed is not None:
                self._hand_on(completed, now=False)
        if sampled_out:
            self._observer.log_content("sampled_out", sampled_out)
        self._within_bounds()
        self._observe()

    # -- handing records on --------------------------------------------------------------------------------
    def _hand_on(self, entry: Waiting, *, now: bool, unjoined: ContentWaitOutcome = "timed_out") -> None:
        """Lay the content joined to ``entry`` on its spans and hand the record to the stages under a claim that
        releases the record's part and the content's once their work is done. ``now``: within the record
        handler's turn (it sets the dead letters aside), else later (this stage does). ``unjoined``: what became
        of the spans still without their whole content."""
        record = entry.record
        if entry.spans > len(entry.awaiting):
            self._observer.content_waits("joined", entry.spans - len(entry.awaiting))
        if entry.awaiting:
            self._observer.content_waits(unjoined, len(entry.awaiting))
        laid = False
        if entry.joined:
            by_key: dict[SpanKey, list[Held]] = {}
            for held in entry.joined:
                by_key.setdefault(held.key, []).append(held)
            for resource_spans in record.traces.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        joined = by_key.get((bytes(span.trace_id), bytes(span.span_id)))
                        if joined:
                            laid = attach(span, (held.content for held in joined)) or laid
            self._observer.log_content("joined", len(entry.joined))
        parts = [held.held for held in entry.joined]
        partition = record.partition
        units = self._units.setdefault(partition, {})

        def done() -> None:
            units.pop(unit, None)
            record.claim.release()
            for part in parts:
                part.release()

        unit = Claim(done)
        units[unit] = parts
        handed = Fetched(
            partition,
            record.offset,
            record.timestamp_ms,
            record.traces,
            None if laid else record.whole,
            unit,
            origin=record.origin,
        )
        for stage in self._downstream:
            stage.take(handed)
        if handed.letters:
            if now:
                record.letters.extend(handed.letters)
            else:
                unit.take()
                task = self._dispatcher.spawn(self._set_aside(record, handed.letters), unit)
                task.add_done_callback(
                    lambda t: unit.release() if not t.cancelled() and t.exception() is None else None
                )
        unit.seal()

    async def _set_aside(self, record: Fetched, letters: list[DeadLetter]) -> None:
        """Until delivered, the record stays uncommitted (the publisher retries while the broker cannot be reached)."""
        if record.origin is not None:
            await set_aside(self._dead_letters, self._observer, record.origin, letters)

    def _let_go(self, contents: Sequence[Held], outcome: LogContentOutcome) -> None:
        for held in contents:
            held.held.release()
        if contents:
            self._observer.log_content(outcome, len(contents))

    def _within_bounds(self) -> None:
        records, contents = self.buffer.over_bound()
        if not records and not contents:
            return
        now = time.monotonic()
        if now - self._last_eviction_warning >= _EVICTION_WARNING_EVERY_S:
            self._last_eviction_warning = now
            log.warning(
                "content join full (runtime.log_join.max_bytes=%d): %d span records handed on before their content "
                "came, %d log records' content let go before their span came. More LLM calls wait for their content "
                "at once than the bound holds: raise max_bytes above the bytes per second of both topics x "
                "join_wait_s, or lower join_wait_s",
                self._limits.max_bytes, len(records), len(contents),
            )  # fmt: skip
        for entry in records:
            self._hand_on(entry, now=False, unjoined="evicted")
        self._let_go(contents, "evicted")

    def _observe(self) -> None:
        self._observer.content_join_held(self.buffer.records, self.buffer.bytes)

    # -- time ----------------------------------------------------------------------------------------------
    def background(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        return [self._tick_until(stop)]

    async def _tick_until(self, stop: asyncio.Event) -> None:
        async for _ in ticks(stop, min(_TICK_S, self._limits.join_wait_s / 4)):
            try:
                records, contents = self.buffer.due()
                for entry in records:
                    self._hand_on(entry, now=False)
                self._let_go(contents, "expired")
                self._observe()
            except Exception:  # a bug: what was taken out is read again after a restart (not committed)
                log.exception("handing on the span records whose wait for content ended failed")

    async def source_ended(self, stop: asyncio.Event) -> int:
        """Nothing more will come: every record held goes on with the content it has, before the stages' own end."""
        records, contents = self.buffer.take_all()
        for entry in records:
            self._hand_on(entry, now=False)
        self._let_go(contents, "expired")
        self._observe()
        return 0

    # -- partitions and the stop ---------------------------------------------------------------------------
    def revoked(self, partitions: set[TopicPartition]) -> None:
        """What came from the revoked partitions goes to their new owner (its records were not committed). The content
        of a logs partition still owned that was joined to them is let go: with the topics keyed alike, the range
        assignor revokes both partitions together (its claims are dropped already); otherwise holding it would
        stall that partition's commits for good."""
        orphaned = [held.held for held in self.buffer.drop_partitions(partitions)]
        for partition in partitions:
            for unit, parts in self._units.pop(partition, {}).items():
                unit.drop()
                orphaned.extend(parts)
        for part in orphaned:
            part.release()
        self._observe()

    async def abandon(self) -> None:
        for units in self._units.values():
            for unit in units:
                unit.drop()
        self._units.clear()
        self.buffer.take_all()  # their claims were dropped: nothing of them commits
