"""``scope: trace``: agent spans scored with their descendants once their trace is done.

Each record's spans wait in a :class:`TraceBuffer` (by partition and trace id); a ticker takes out the traces
that are ready and starts their runs. A record stays held until every trace it brought spans to has been
scored (or given up on) and exported: the record's claim counts one part per such trace, and the claim of a
ready trace releases that part of each of its records when its runs (and dead letters) are done. Traces
still buffered at a stop are left uncommitted: the next owner of their partitions reads them again. When a
bounded source is exhausted (a backfill's window read to its end), no span will come to a buffered trace:
``score_the_rest`` scores each as it is (``window_end``), before the final checkpoint.

Conversations (``scope: session``) start here too: a ready trace's turns are handed to stage 1
(``runtime.sessions.turns``), whose publishing to the internal topic is one more part of the trace's claim, so
the trace's records are committed only once its turns are acknowledged. With session scorers every trace is
buffered (their sampling is by conversation id, which only the trace's spans tell).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from aiokafka import TopicPartition

from sidecar.conventions.run_limit import limit_runs
from sidecar.conventions.selection import Selection, classify, sampled_in
from sidecar.conventions.session_turns import TurnSummary
from sidecar.conventions.spans import MappingResult, SpanReject, admit
from sidecar.conventions.trace_runs import TraceSpan, trace_runs
from sidecar.core import ScorerRunRequest
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ReadyReason
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason, RecordOrigin, spans_request
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.ledger import Claim, RecordLedger
from sidecar.runtime.limits import MAX_RUNS_PER_RECORD, runs_over_limit
from sidecar.runtime.pacing import INGEST_SLICE_S
from sidecar.runtime.sessions.turns import TurnPublishing
from sidecar.runtime.trace_buffer import BufferedTrace, TraceBuffer, TraceBufferLimits

__all__ = ["TraceScope"]

log = logging.getLogger(__name__)

# How often the buffer is asked for ready traces (at most; a quarter of idle_s when shorter): the delay it
# adds to a trace's score, against a pass over the quiet traces per tick.
_TICK_S = 0.1
_DEAD_LETTER_RETRY_S = 5.0
# A full, stuck buffer logs its warning at most this often (it may evict a trace every tick).
_EVICTION_WARNING_EVERY_S = 60.0


class TraceScope:
    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        limits: TraceBufferLimits,
        *,
        ledger: RecordLedger[TopicPartition],
        dispatcher: RunDispatcher,
        capacity: Capacity,
        observer: ServiceObserver,
        max_in_flight_runs: int,
        dead_letter_topic: str,
        span_attributes: frozenset[str] = frozenset(),
        turns: TurnPublishing | None = None,
        max_runs: int = MAX_RUNS_PER_RECORD,
    ) -> None:
        self._scorers = tuple(scorers)
        self._highest_rate = max((s.selection.sample_rate for s in self._scorers), default=0.0)
        self._turns = turns
        self._limits = limits
        self.buffer: TraceBuffer[TopicPartition] = limits.buffer()
        self._ledger = ledger
        self._dispatcher = dispatcher
        self._capacity = capacity
        self._observer = observer
        self._max_in_flight_runs = max_in_flight_runs
        self._max_runs = max_runs  # per ready trace
        self._dead_letter_topic = dead_letter_topic
        self._span_attributes = span_attributes  # what each run keeps of its agent span's attributes
        self.publisher: DeadLetterPublisher | None = None  # once the producer has started
        self._work: dict[tuple[TopicPartition, bytes], Claim] = {}
        self._publishing: dict[int, int] = {}  # turns being handed to their topic: their trace's oldest record (ms)
        self._last_eviction_warning = -_EVICTION_WARNING_EVERY_S
        capacity.bound(self.full)

    def full(self) -> bool:
        return self._limits.full(self.buffer)

    # -- spans in ------------------------------------------------------------------------------------------
    def join(
        self, tp: TopicPartition, offset: int, traces: Mapping[bytes, list[TraceSpan]], timestamp_ms: int | None = None
    ) -> int:
        """Buffer a record's spans by trace (``timestamp_ms``: the record's); returns how many buffered traces the
        record now waits for."""
        buffer = self.buffer
        joined = late = 0
        for trace_id, spans in traces.items():
            if not self._wanted(trace_id):
                self._count_unwanted(spans)
                continue
            if buffer.add(tp, offset, trace_id, spans, timestamp_ms) == "late":
                late += len(spans)
            else:
                joined += 1
        if late:
            # A span of a trace already scored: its score stands (it is not scored again), and this says how
            # often traces are cut short. A rising count means idle_s is shorter than the agents' pauses.
            for configured in self._scorers:
                self._observer.late_spans(configured.scorer.id, late)
        self._observer.trace_buffer(len(buffer), buffer.bytes)
        return joined

    def _wanted(self, trace_id: bytes) -> bool:
        # Sampling is by trace id: a trace every trace-scope scorer samples out is not buffered at all (unless it
        # may be a conversation's turn).
        # A lower rate keeps a subset of what a higher one keeps: the highest decides, with one hash.
        return self._turns is not None or sampled_in(self._highest_rate, trace_id)

    def _count_unwanted(self, spans: list[TraceSpan]) -> None:
        # A trace that no trace-scope scorer samples in is never buffered, so never assembled: its agent spans
        # are counted here as span scope counts them (sampled out, or filtered by service before that).
        for item in spans:
            kind, internal = classify(item.span.attributes)
            if kind is None or internal:
                continue
            for configured in self._scorers:
                if kind not in configured.selection.kinds:
                    continue
                verdict = admit(item.span, own_span=False, service=item.service, selection=configured.selection).verdict
                if verdict == "sampled_out" or verdict == "filtered":
                    self._observer.runs_skipped(configured.scorer.id, "unknown", verdict, 1)

    # -- ready traces --------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Start the runs of the traces that are ready, at a steady pace (a trace's readiness is a matter of
        time passing, not of records arriving)."""
        buffer = self.buffer
        tick = min(_TICK_S, buffer.idle_s / 4)
        stuck_since: float | None = None
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), tick)
            if stop.is_set():
                break
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

    async def score_the_rest(self, stop: asyncio.Event) -> int:
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
        runs, rejects, turns = self._assemble(trace, reason)
        runs, over = limit_runs(runs, self._max_runs)
        if over:
            runs_over_limit(self._observer, f"trace {trace.trace_id.hex()}", len(runs) + over, over)
        if not runs and not turns:
            self.buffer.forget(trace)  # no agent span here yet: spans after this start the trace anew
        parts = len(runs) + (1 if rejects else 0) + (1 if turns else 0)
        if parts == 0:
            self._release_records(trace)
            return
        key = (trace.partition, trace.trace_id)

        def done() -> None:
            del self._work[key]
            self._release_records(trace)

        claim = self._work[key] = Claim(parts, done)
        if rejects:
            task = self._dispatcher.spawn(self._set_aside(trace, rejects), claim)
            task.add_done_callback(_part_done_if_ok(claim, "setting aside its dead letters", trace))
        if turns:
            assert self._turns is not None
            task = self._dispatcher.spawn(self._turns.publish(turns), claim)
            if trace.first_ms is not None:
                self._publishing[id(task)] = trace.first_ms
            task.add_done_callback(lambda t: self._publishing.pop(id(t), None))
            task.add_done_callback(_part_done_if_ok(claim, "publishing its conversation turns", trace))
        for configured, request in runs:
            self._dispatcher.start(configured, request, claim)
        self._capacity.update()

    def _assemble(
        self, trace: BufferedTrace[TopicPartition], reason: ReadyReason
    ) -> tuple[list[tuple[ConfiguredScorer, ScorerRunRequest]], list[SpanReject], list[TurnSummary]]:
        runs: list[tuple[ConfiguredScorer, ScorerRunRequest]] = []
        rejects: dict[tuple[str, str], SpanReject] = {}
        skipped: dict[str, int] = {}
        # At a window's end a trace whose root arrived is as whole as the window holds it: it waited only because
        # idle_s had not passed yet, and nothing more will come.
        whole = reason == "root_idle" or (reason == "window_end" and trace.root_arrived())
        complete = whole and not trace.cut_short
        assembled: dict[Selection, MappingResult] = {}  # scorers with the same targets share one assembly
        spans: list[TraceSpan] | None = None
        for configured in self._scorers:
            result = assembled.get(configured.selection)
            if result is None:
                result = assembled[configured.selection] = trace_runs(
                    spans if spans is not None else (spans := trace.decoded()),
                    configured.selection,
                    ready_reason=reason,
                    complete=complete,
                    span_attributes=self._span_attributes,
                )
            runs.extend((configured, request) for request in result.runs)
            for reject in result.rejects:
                rejects.setdefault((reject.span_id, reject.reason), reject)
            scorer_id = configured.scorer.id
            if result.skipped.filtered:
                self._observer.runs_skipped(scorer_id, "unknown", "filtered", result.skipped.filtered)
            if result.skipped.sampled_out:
                self._observer.runs_skipped(scorer_id, "unknown", "sampled_out", result.skipped.sampled_out)
            for skip in ("internal", "no_content"):
                skipped[skip] = max(skipped.get(skip, 0), getattr(result.skipped, skip))
        turns: list[TurnSummary] = []
        if self._turns is not None:
            selection = self._turns.selection
            result = assembled.get(selection)
            if result is None:
                result = trace_runs(
                    spans if spans is not None else (spans := trace.decoded()),
                    selection,
                    ready_reason=reason,
                    complete=complete,
                )
            for reject in result.rejects:
                rejects.setdefault((reject.span_id, reject.reason), reject)
            turns = self._turns.turns(spans if spans is not None else trace.decoded(), result.runs, complete=complete)
        for skip, n in skipped.items():
            if n:
                self._observer.spans_skipped(skip, n)  # type: ignore[arg-type]
        return runs, list(rejects.values()), turns

    async def _set_aside(self, trace: BufferedTrace[TopicPartition], rejects: list[SpanReject]) -> None:
        """Dead letters for the agent spans of a ready trace that cannot become runs: one per reason, carrying those
        spans alone (OTLP protobuf), with the record that brought the first as its origin."""
        publisher = self.publisher
        assert publisher is not None
        tp = trace.partition
        by_id = {item.span.span_id.hex(): item for item in trace.decoded()}
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
            # Until delivered, the trace's records stay uncommitted: retried, not given up.
            while True:
                try:
                    delivered = await publisher.publish(origin, [letter], encoding="otlp_proto")
                    break
                except Exception as exc:
                    log.warning(
                        "dead letter for span %s (%s) not delivered to %s: %s; its trace's records stay "
                        "uncommitted, retrying in %ss",
                        first.span_id,
                        letter.reason.value,
                        self._dead_letter_topic,
                        exc,
                        _DEAD_LETTER_RETRY_S,
                    )
                    await asyncio.sleep(_DEAD_LETTER_RETRY_S)
            for sent in delivered:
                self._observer.dead_lettered(sent.reason.value)

    def _release_records(self, trace: BufferedTrace[TopicPartition]) -> None:
        for offset in trace.records:
            self._ledger.release(trace.partition, offset)

    def oldest_pending_ms(self) -> int | None:
        """About the oldest record timestamp whose spans may still make a turn not yet handed to its topic: of the
        traces buffered, and of the turns being published (None: none)."""
        pending = [ms for ms in (self.buffer.oldest_record_ms(), *self._publishing.values()) if ms is not None]
        return min(pending, default=None)

    # -- partitions ----------------------------------------------------------------------------------------
    def drop_partitions(self, lost: set[TopicPartition]) -> None:
        """A revoke: the buffered traces and the runs of ready ones go to the new owner (records uncommitted)."""
        self.buffer.drop_partitions(lost)
        for key in [key for key in self._work if key[0] in lost]:
            self._work.pop(key).drop()
        self._observer.trace_buffer(len(self.buffer), self.buffer.bytes)

    def drop_all(self) -> None:
        for claim in self._work.values():
            claim.drop()
        self._work.clear()


def _holds_agent_span(trace: BufferedTrace[TopicPartition]) -> bool:
    return any(classify(item.span.attributes)[0] == "agent" for item in trace.decoded())


def _part_done_if_ok(
    claim: Claim, what: str, trace: BufferedTrace[TopicPartition]
) -> Callable[[asyncio.Task[None]], None]:
    """The claim's part is done only once its work succeeded: a failure keeps the trace's records uncommitted (read
    again after a restart) instead of committing them without what the work should have written."""

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
        claim.part_done()

    return settle
