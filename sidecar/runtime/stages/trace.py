"""``scope: trace``: agent spans scored with their descendants once their trace is done.

Each record's spans wait in a :class:`TraceBuffer` (by partition and trace id); a ticker takes out the traces that
are ready and starts their runs. A record stays held until every trace it brought spans to has been scored (or
given up on) and exported: each trace it joins takes a part of the record's claim, and the claim of a ready trace
releases those parts once its runs (and dead letters) are done. Traces still buffered at a stop are left
uncommitted: the next owner of their partitions reads them again. When a bounded source is exhausted (a
backfill's window read to its end), no span will come to a buffered trace: ``source_ended`` scores each as it is
(``window_end``), before the final checkpoint.

Whole traces also feed *followers*: work a ready trace starts beside its runs, as one more part of its claim
(stage 1 of conversations publishes the trace's turns to its topic, so the trace's records commit only once the
broker has them). With a follower every trace is buffered: a follower samples by what only the spans tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import TopicPartition

from sidecar.conventions.run_limit import limit_runs
from sidecar.conventions.selection import Selection, classify, sampled_in
from sidecar.conventions.spans import MappingResult, SpanReject, admit
from sidecar.conventions.trace_runs import TraceSpan, group_by_trace, trace_runs
from sidecar.conventions.versions import DEFAULT_VERSIONS, VersionAttributes
from sidecar.core.label_values import AGENT_NOT_READ
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ReadyReason, ScorerRunRequest
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason, RecordOrigin, spans_request
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.claims import Claim
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.limits import MAX_RUNS_PER_RECORD, runs_over_limit
from sidecar.runtime.pacing import INGEST_SLICE_S, ticks
from sidecar.runtime.stages.base import Assembly, Fetched, OfflineRecord, OfflineRun, Stage, StageFacts, StageRun
from sidecar.runtime.trace_buffer import BufferedTrace, TraceBuffer, TraceBufferLimits

__all__ = ["TraceAssembly", "TraceFollower", "TraceStage", "TraceWork", "whole_traces"]

log = logging.getLogger(__name__)

# How often the buffer is asked for ready traces (at most; a quarter of idle_s when shorter): the delay it
# adds to a trace's score, against a pass over the quiet traces per tick.
_TICK_S = 0.1
# A full, stuck buffer logs its warning at most this often (it may evict a trace every tick).
_EVICTION_WARNING_EVERY_S = 60.0


class TraceFollower(Protocol):
    """Work a ready trace starts beside its runs (stage 1 of conversations: the trace's turns published)."""

    @property
    def selection(self) -> Selection:
        """Which agent spans of the trace it reads, assembled as runs."""
        ...

    def follow(
        self, spans: Sequence[TraceSpan], runs: Sequence[ScorerRunRequest], *, complete: bool
    ) -> Coroutine[Any, Any, None] | None:
        """The work for this trace (``runs``: its agent runs under :attr:`selection`), or None: nothing to do."""
        ...


@dataclass(slots=True)
class TraceWork:
    """What a ready trace starts: its runs, the agent spans that cannot be runs, its followers' work, and what was
    skipped (per scorer: filtered, sampled out; per span: the sidecar's own, no content)."""

    runs: list[StageRun] = field(default_factory=list)
    rejects: list[SpanReject] = field(default_factory=list)
    follows: list[Coroutine[Any, Any, None]] = field(default_factory=list)
    skipped: list[tuple[ConfiguredScorer, MappingResult]] = field(default_factory=list)
    internal: int = 0
    no_content: int = 0
    unrecognised: int = 0


class TraceAssembly(Assembly):
    """Whole traces → runs: each selected agent span of a trace with its subtree (``conventions.trace_runs``),
    scorers with the same targets sharing one assembly."""

    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        *,
        resource_attributes: frozenset[str] = frozenset(),
        span_attributes: frozenset[str] = frozenset(),
        followers: Sequence[TraceFollower] = (),
        versions: VersionAttributes = DEFAULT_VERSIONS,
    ) -> None:
        self.scorers = tuple(scorers)
        self.followers = tuple(followers)
        self.resource_attributes = resource_attributes
        self._span_attributes = span_attributes  # what each run keeps of its agent span's attributes
        self.versions = versions  # where each run's agent version is read

    def of_trace(self, spans: Sequence[TraceSpan], reason: ReadyReason, *, complete: bool) -> TraceWork:
        work = TraceWork()
        assembled: dict[Selection, MappingResult] = {}
        rejects: dict[tuple[str, str], SpanReject] = {}

        def assemble(selection: Selection, span_attributes: frozenset[str]) -> MappingResult:
            result = assembled.get(selection)
            if result is None:
                result = assembled[selection] = trace_runs(
                    spans,
                    selection,
                    ready_reason=reason,
                    complete=complete,
                    span_attributes=span_attributes,
                    versions=self.versions,
                )
                for reject in result.rejects:
                    rejects.setdefault((reject.span_id, reject.reason), reject)
                work.internal = max(work.internal, result.skipped.internal)
                work.no_content = max(work.no_content, result.skipped.no_content)
                work.unrecognised = max(work.unrecognised, result.skipped.unrecognised)
            return result

        for configured in self.scorers:
            result = assemble(configured.selection, self._span_attributes)
            work.runs.extend((configured, request) for request in result.runs)
            work.skipped.append((configured, result))
        for follower in self.followers:
            follow = follower.follow(spans, assemble(follower.selection, frozenset()).runs, complete=complete)
            if follow is not None:
                work.follows.append(follow)
        work.rejects = list(rejects.values())
        return work

    def runs_of_records(self, records: Sequence[OfflineRecord]) -> list[OfflineRun]:
        runs: list[OfflineRun] = []
        for trace, reason, where in whole_traces(records, self.resource_attributes):
            work = self.of_trace(trace.decoded(), reason, complete=reason == "root_idle" and not trace.cut_short)
            runs.extend(OfflineRun(configured, request, where) for configured, request in work.runs)
            for follow in work.follows:
                follow.close()  # offline: a follower's work is not done
        return runs


def whole_traces(
    records: Sequence[OfflineRecord], resource_attributes: frozenset[str] = frozenset()
) -> list[tuple[BufferedTrace[str], ReadyReason, str]]:
    """The traces of a fixed set of records, buffered as the live stage buffers them, each with how it is ready
    now that nothing more will come (``root_idle`` when its root arrived, else ``window_end``) and where its last
    record came from. In the order their first spans arrived."""
    buffer: TraceBuffer[str] = TraceBufferLimits(max_trace_bytes=2**62).buffer(clock=lambda: 0.0)
    where: dict[bytes, str] = {}
    for index, record in enumerate(records):
        offset = record.offset if record.offset >= 0 else index
        for trace_id, spans in group_by_trace(
            record.traces, resource_attributes=resource_attributes, offset=offset, record=record.whole
        ).items():
            buffer.add("", offset, trace_id, spans)
            where[trace_id] = record.where
    out: list[tuple[BufferedTrace[str], ReadyReason, str]] = []
    while (trace := buffer.take_oldest()) is not None:
        reason: ReadyReason = "root_idle" if trace.root_arrived() else "window_end"
        out.append((trace, reason, where[trace.trace_id]))
    return out


class TraceStage(Stage):
    facts = StageFacts(scope="trace", unit="trace", backfills=True, conversation_items=False, late_spans=True)

    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        limits: TraceBufferLimits,
        *,
        dispatcher: RunDispatcher,
        capacity: Capacity,
        observer: ServiceObserver,
        dead_letters: DeadLetterPublisher,
        max_in_flight_runs: int,
        resource_attributes: frozenset[str] = frozenset(),
        span_attributes: frozenset[str] = frozenset(),
        followers: Sequence[TraceFollower] = (),
        versions: VersionAttributes = DEFAULT_VERSIONS,
        max_runs: int = MAX_RUNS_PER_RECORD,
    ) -> None:
        super().__init__(scorers)
        self.assembly = TraceAssembly(
            scorers,
            resource_attributes=resource_attributes,
            span_attributes=span_attributes,
            followers=followers,
            versions=versions,
        )
        self._highest_rate = max((s.selection.sample_rate for s in self.scorers), default=0.0)
        self._every_trace = bool(followers)
        self._limits = limits
        self.buffer: TraceBuffer[TopicPartition] = limits.buffer()
        self._dispatcher = dispatcher
        self._capacity = capacity
        self._observer = observer
        self._dead_letters = dead_letters
        self._max_in_flight_runs = max_in_flight_runs
        self._max_runs = max_runs  # per ready trace
        self._work: dict[tuple[TopicPartition, bytes], Claim] = {}
        self._following: dict[int, int] = {}  # followers' work in progress: their trace's oldest record (ms)
        self._last_eviction_warning = -_EVICTION_WARNING_EVERY_S
        capacity.bound(self.full)

    def full(self) -> bool:
        return self._limits.full(self.buffer)

    def key_sample_rate(self) -> float:
        # A follower (conversations) samples by what only the spans tell: every trace is kept.
        return 1.0 if self._every_trace else self._highest_rate

    # -- spans in ------------------------------------------------------------------------------------------
    def take(self, record: Fetched) -> None:
        """Buffer the record's spans by trace; each buffered trace the record joins holds a part of its claim."""
        traces = group_by_trace(
            record.traces,
            resource_attributes=self.assembly.resource_attributes,
            offset=record.offset,
            # A protobuf record holding one trace is buffered as it came (trace_buffer.BufferedRecord).
            record=record.whole,
        )
        buffer = self.buffer
        claim = record.claim
        late = 0
        for trace_id, spans in traces.items():
            if not (self._every_trace or sampled_in(self._highest_rate, trace_id)):
                self._count_unwanted(spans)
                continue
            if buffer.add(record.partition, record.offset, trace_id, spans, record.timestamp_ms, held=claim) == "late":
                late += len(spans)
            else:
                claim.take()
        if late:
            # A span of a trace already scored: its score stands (it is not scored again), and this says how
            # often traces are cut short. A rising count means idle_s is shorter than the agents' pauses.
            for configured in self.scorers:
                self._observer.late_spans(configured.scorer.id, late)
        self._observer.trace_buffer(len(buffer), buffer.bytes)

    def _count_unwanted(self, spans: list[TraceSpan]) -> None:
        # A trace that no trace-scope scorer samples in is never buffered, so never assembled: its agent spans
        # are counted here as span scope counts them (sampled out, or filtered by service before that).
        for item in spans:
            kind, internal, _ = classify(item.span.attributes)
            if kind is None or internal:
                continue
            for configured in self.scorers:
                if kind not in configured.selection.kinds:
                    continue
                verdict = admit(item.span, own_span=False, service=item.service, selection=configured.selection).verdict
                if verdict == "sampled_out" or verdict == "filtered":
                    self._observer.runs_skipped(configured.scorer.id, AGENT_NOT_READ, verdict, 1)

    # -- ready traces --------------------------------------------------------------------------------------
    def background(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        return [self._tick_until(stop)]

    async def _tick_until(self, stop: asyncio.Event) -> None:
        """Start the runs of the traces that are ready, at a steady pace (a trace's readiness is a matter of
        time passing, not of records arriving)."""
        buffer = self.buffer
        stuck_since: float | None = None
        async for _ in ticks(stop, min(_TICK_S, buffer.idle_s / 4)):
            try:
                # Ready traces start while runs may: the others wait in the buffer (still bounded), not as tasks.
                room = self._max_in_flight_runs - self._dispatcher.in_flight
                ready = buffer.due(limit=room) if room > 0 else []
                if ready or room <= 0 or not self.full():
                    stuck_since = None
                elif stuck_since is None:
                    stuck_since = time.monotonic()
                elif time.monotonic() - stuck_since >= buffer.idle_s:
                    ready = self._evict_oldest()
                    stuck_since = None  # intake resumes: give the next stall idle_s again
                started = time.perf_counter()
                for trace, reason in ready:
                    self._start(trace, reason)
                    if time.perf_counter() - started >= INGEST_SLICE_S:
                        await asyncio.sleep(0)  # assembly is CPU work, as ingest is
                        started = time.perf_counter()
            except Exception:  # a bug: the traces taken out are redelivered after a restart
                log.exception("starting the runs of ready traces failed")
            self._observer.trace_buffer(len(buffer), buffer.bytes)
            self._capacity.update()

    async def source_ended(self, stop: asyncio.Event) -> int:
        """The source is exhausted: start the runs of every buffered trace now, as room for runs allows (ready
        reason ``window_end``; complete only when its root arrived). Returns how many traces were started."""
        buffer = self.buffer
        started = 0
        while len(buffer) and not stop.is_set():
            room = self._max_in_flight_runs - self._dispatcher.in_flight
            if room <= 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), _TICK_S)
                continue
            for _ in range(room):
                trace = buffer.take_oldest()
                if trace is None:
                    break
                self._start(trace, "window_end")
                started += 1
            await asyncio.sleep(0)  # assembly is CPU work: let the runs just started progress
        self._observer.trace_buffer(len(buffer), buffer.bytes)
        if started:
            log.info("source read to its end: scoring the %d traces still buffered (ready reason window_end)", started)
        return started

    def _evict_oldest(self) -> list[tuple[BufferedTrace[TopicPartition], ReadyReason]]:
        # Full, intake paused, and no trace got ready for idle_s: every buffered trace waits for spans behind
        # the pause, so waiting only leads to max_wait_s. Score the oldest now, from what arrived.
        # An agent span is exported when it ends, after its children: a trace holding one has its run whole.
        oldest = self.buffer.take_oldest(prefer=_holds_agent_span)
        if oldest is None:
            return []
        now = time.monotonic()
        if now - self._last_eviction_warning >= _EVICTION_WARNING_EVERY_S:
            self._last_eviction_warning = now
            limits = self._limits
            log.warning(
                "trace buffer full (%d traces, %.0f MiB of spans; runtime.trace_buffer.max_traces=%d, "
                "max_bytes=%d) and no trace done: scoring the oldest incomplete (ready reason evicted). More "
                "traces are open at once than the buffer holds: raise max_traces/max_bytes above the trace "
                "rate × the longest trace duration",
                len(self.buffer) + 1,
                self.buffer.bytes / 2**20,
                limits.max_traces,
                limits.max_bytes,
            )
        return [(oldest, "evicted")]

    def _start(self, trace: BufferedTrace[TopicPartition], reason: ReadyReason) -> None:
        self._observer.trace_ready(reason, time.monotonic() - trace.first_seen)
        if reason != "root_idle":
            log.debug("trace %s ready (%s) with %d spans", trace.trace_id.hex(), reason, trace.span_count)
        # At a window's end a trace whose root arrived is as whole as the window holds it: it waited only because
        # idle_s had not passed yet, and nothing more will come.
        whole = reason == "root_idle" or (reason == "window_end" and trace.root_arrived())
        spans = trace.decoded()
        work = self.assembly.of_trace(spans, reason, complete=whole and not trace.cut_short)
        work.runs, over = limit_runs(work.runs, self._max_runs)
        if over:
            runs_over_limit(self._observer, f"trace {trace.trace_id.hex()}", len(work.runs) + over, over)
        self._observe(work)
        if not work.runs and not work.follows:
            self.buffer.forget(trace)  # no agent span here yet: spans after this start the trace anew
        key = (trace.partition, trace.trace_id)

        def done() -> None:
            self._work.pop(key, None)
            trace.release_held()

        claim = self._work[key] = Claim(done)
        if work.rejects:
            self._spawn_part(
                claim, self._set_aside(trace, spans, work.rejects), "setting aside its dead letters", trace
            )
        for follow in work.follows:
            task = self._spawn_part(claim, follow, "handing it to its followers (conversation turns)", trace)
            if trace.first_ms is not None:
                self._following[id(task)] = trace.first_ms
                task.add_done_callback(lambda t: self._following.pop(id(t), None))
        start = self._dispatcher.start
        for configured, request in work.runs:
            start(configured, request, claim)
        claim.seal()
        self._capacity.update()

    def _spawn_part(
        self, claim: Claim, work: Coroutine[Any, Any, None], what: str, trace: BufferedTrace[TopicPartition]
    ) -> asyncio.Task[None]:
        """Work that holds a part of the trace's claim until it succeeds: a failure keeps the trace's records
        uncommitted (read again after a restart) instead of committing them without what it should have written."""
        claim.take()
        task = self._dispatcher.spawn(work, claim)
        task.add_done_callback(_release_if_ok(claim, what, trace))
        return task

    def _observe(self, work: TraceWork) -> None:
        observer = self._observer
        for configured, result in work.skipped:
            scorer_id = configured.scorer.id
            if result.skipped.filtered:
                observer.runs_skipped(scorer_id, AGENT_NOT_READ, "filtered", result.skipped.filtered)
            if result.skipped.sampled_out:
                observer.runs_skipped(scorer_id, AGENT_NOT_READ, "sampled_out", result.skipped.sampled_out)
        if work.internal:
            observer.spans_skipped("internal", work.internal)
        if work.no_content:
            observer.spans_skipped("no_content", work.no_content)
        if work.unrecognised:
            observer.spans_skipped("unrecognised", work.unrecognised)

    async def _set_aside(
        self, trace: BufferedTrace[TopicPartition], spans: list[TraceSpan], rejects: list[SpanReject]
    ) -> None:
        """Dead letters for the agent spans of a ready trace that cannot become runs: one per reason, carrying those
        spans alone (OTLP protobuf), with the record that brought the first as its origin."""
        tp = trace.partition
        by_id = {item.span.span_id.hex(): item for item in spans}
        by_reason: dict[str, list[SpanReject]] = {}
        for reject in rejects:
            by_reason.setdefault(reject.reason, []).append(reject)
        for reason, same in by_reason.items():
            first = same[0]
            letter = DeadLetter(
                DeadLetterReason(reason), first.detail, trace_id=first.trace_id, span_id=first.span_id, spans=len(same)
            )
            items = [by_id[reject.span_id] for reject in same if reject.span_id in by_id]
            value = spans_request((item.span, item.service) for item in items) if items else b""
            offset = items[0].offset if items else -1
            origin = RecordOrigin(topic=tp.topic, partition=tp.partition, offset=offset, value=value, key=None)
            # Until delivered, the trace's records stay uncommitted (the publisher retries while the broker cannot
            # be reached).
            delivered = await self._dead_letters.publish(origin, [letter], encoding="otlp_proto")
            for sent in delivered:
                self._observer.dead_lettered(sent.reason.value)

    def oldest_pending_ms(self) -> int | None:
        """About the oldest record timestamp whose spans may still reach a follower: of the traces buffered, and of
        the followers' work in progress (None: none)."""
        pending = [ms for ms in (self.buffer.oldest_record_ms(), *self._following.values()) if ms is not None]
        return min(pending, default=None)

    # -- partitions ----------------------------------------------------------------------------------------
    def revoked(self, partitions: set[TopicPartition]) -> None:
        """The buffered traces and the runs of ready ones go to the new owner (records uncommitted)."""
        self.buffer.drop_partitions(partitions)
        for key in [key for key in self._work if key[0] in partitions]:
            self._work.pop(key).drop()
        self._observer.trace_buffer(len(self.buffer), self.buffer.bytes)

    async def abandon(self) -> None:
        for claim in self._work.values():
            claim.drop()
        self._work.clear()


def _holds_agent_span(trace: BufferedTrace[TopicPartition]) -> bool:
    return any(classify(item.span.attributes)[0] == "agent" for item in trace.decoded())


def _release_if_ok(
    claim: Claim, what: str, trace: BufferedTrace[TopicPartition]
) -> Callable[[asyncio.Task[None]], None]:
    def settle(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error(
                "trace %s on %s: %s failed (%r); its records stay uncommitted and are read again after a restart",
                trace.trace_id.hex(), trace.partition, what, error,
            )  # fmt: skip
            return
        claim.release()

    return settle
