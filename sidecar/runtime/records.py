"""One record from fetch to runs: tracked, ingested once for every scorer, its dead letters delivered, what it
held counted, its span runs started and its spans handed to the trace scope, and the record held until all
of that is done (the ledger). A record whose key names a trace that every scorer samples out is counted and
done without being decoded (sidecar.ingest.key_sampling), once a decoded record has shown that keys name the
trace a record holds; the first decoded record that shows otherwise turns that off for the process."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from sidecar.conventions.run_limit import limit_runs
from sidecar.core.observers import IngestSkipReason, ServiceObserver
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason, RecordOrigin
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.key_sampling import KeySampler, trace_id_from_key
from sidecar.ingest.pipeline import IngestConfig, MultiProcessedRecord, process_record_multi
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.ledger import RecordLedger
from sidecar.runtime.limits import MAX_RUNS_PER_RECORD, runs_over_limit
from sidecar.runtime.trace_scope import TraceScope

__all__ = ["RecordHandler"]

log = logging.getLogger(__name__)

_INGEST_SKIPS: tuple[IngestSkipReason, ...] = ("internal", "filtered", "sampled_out", "no_content")
_TOO_LARGE = frozenset({DeadLetterReason.TOO_LARGE.value, DeadLetterReason.RECORD_TOO_LARGE.value})


class RecordHandler:
    def __init__(
        self,
        ingest: IngestConfig,
        scorers: Sequence[ConfiguredScorer],
        *,
        ledger: RecordLedger[TopicPartition],
        dispatcher: RunDispatcher,
        capacity: Capacity,
        observer: ServiceObserver,
        publisher: DeadLetterPublisher,
        traces: TraceScope | None,
        key_sampling: bool = True,
        max_runs: int = MAX_RUNS_PER_RECORD,
    ) -> None:
        self._ingest = ingest
        self._scorers = tuple(scorers)
        # Trace- and session-scope scorers map nothing per record: their runs are assembled when a trace is ready
        # (a session's, from the turns its ready traces give).
        self._selections = tuple(s.selection if s.scope == "span" else None for s in scorers)
        self._ledger = ledger
        self._dispatcher = dispatcher
        self._capacity = capacity
        self._observer = observer
        self._publisher = publisher
        self._traces = traces
        self._max_runs = max_runs
        # A session scorer samples conversations, which a record's key does not name: it keeps every record.
        sampler = KeySampler(1.0 if s.scope == "session" else s.selection.sample_rate for s in scorers)
        self._sampler = sampler if key_sampling and sampler.useful else None
        # Why: a key of 32 hex characters is the trace id only if the producer made it so (the Collector's
        # partition_traces_by_id); a uuid4().hex key, or a trace id keying a record of several traces, looks the
        # same, and trusting it would commit sampled-in spans unscored. So no record is skipped undecoded until
        # a decoded record has shown that its key is the trace id of every span it holds (the first record with
        # such a key, since until then every record is decoded), and every record decoded later with such a key
        # is checked again: the first that holds spans of another trace turns key sampling off for the process.
        # One confirmation is enough for a producer whose keys are never the trace id (uuid4().hex); a producer
        # that keys some records rightly and others not can still lose records skipped before one of the others
        # is decoded (docs/ingest.md).
        self._keys_confirmed = False

    async def handle(self, tp: TopicPartition, record: Any) -> None:
        value: bytes | None = record.value
        offset: int = record.offset
        if not self._ledger.track(tp, offset):
            # A record this assignment already holds (a fetch from before a seek): the first copy counts.
            log.warning("skipping %s/%d@%d: already in flight", tp.topic, tp.partition, offset)
            return
        sampler = self._sampler
        key_trace_id = trace_id_from_key(record.key) if sampler is not None else None
        if (
            sampler is not None
            and key_trace_id is not None
            and self._keys_confirmed
            and sampler.samples_out(key_trace_id)
        ):
            self._observer.record_consumed(tp.topic, 0)
            self._observer.record_sampled_out(tp.topic)
            self._ledger.hold(tp, offset, 0, 0)
            return
        traces = self._traces
        try:
            processed = process_record_multi(
                value,
                self._ingest,
                self._selections,
                group_traces=traces is not None,
                offset=offset,
                trace_ids=key_trace_id is not None,
            )
        except Exception as exc:  # a bug, not bad input: set the record aside, keep the partition moving
            log.exception("ingest failed on %s/%d@%d", tp.topic, tp.partition, offset)
            letter = DeadLetter(DeadLetterReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:300])
            processed = MultiProcessedRecord(dead_letters=(letter,), runs=tuple(() for _ in self._selections))
        if key_trace_id is not None:
            self._check_key(tp, offset, key_trace_id, processed.trace_ids)
        if processed.dead_letters:
            origin = RecordOrigin(
                topic=tp.topic,
                partition=tp.partition,
                offset=offset,
                value=value or b"",
                key=record.key,
                headers=tuple((k, bytes(v)) for k, v in record.headers or ()),
            )
            for letter in await self._publisher.publish(origin, processed.dead_letters):
                self._observer.dead_lettered(letter.reason.value)
        self._observe(tp.topic, processed)
        work = [
            (configured, request)
            for configured, requests in zip(self._scorers, processed.runs, strict=True)
            for request in requests
        ]
        work, over = limit_runs(work, self._max_runs)
        if over:
            runs_over_limit(self._observer, f"record {tp.topic}/{tp.partition}@{offset}", len(work) + over, over)
        # No await from here on: a trace this record joins cannot be released before the record is held.
        joined = (
            traces.join(tp, offset, processed.traces, record.timestamp)
            if traces is not None and processed.traces
            else 0
        )
        claim = self._ledger.hold(tp, offset, len(work) + joined, len(value) if value is not None else 0)
        if claim is None:
            return
        for configured, request in work:
            self._dispatcher.start(configured, request, claim)
        self._capacity.update()

    def _check_key(self, tp: TopicPartition, offset: int, key_trace_id: bytes, trace_ids: frozenset[bytes]) -> None:
        """Whether a decoded record's key is the trace id of every span it holds: yes confirms keys as trace ids,
        no turns key sampling off for the process. A record holding no span (a tombstone, a dead letter) says
        nothing."""
        if not trace_ids:
            return
        if trace_ids == {key_trace_id}:
            self._keys_confirmed = True
            return
        self._sampler = None
        shown = ", ".join(sorted(t.hex() for t in trace_ids)[:3]) + (", ..." if len(trace_ids) > 3 else "")
        log.warning(
            "key sampling is off for this process: record %s/%d@%d is keyed %s but holds spans of %d trace(s) (%s),"
            " so record keys are not the id of the one trace each record holds (the Collector's"
            " partition_traces_by_id) and every record is now decoded; set kafka.key_sampling: false to silence this",
            tp.topic,
            tp.partition,
            offset,
            key_trace_id.hex(),
            len(trace_ids),
            shown,
        )

    def _observe(self, topic: str, processed: MultiProcessedRecord) -> None:
        observer = self._observer
        observer.record_consumed(topic, processed.spans_seen)
        for configured, skipped in zip(self._scorers, processed.skipped, strict=True):
            scorer_id = configured.scorer.id
            if skipped.filtered:
                observer.runs_skipped(scorer_id, "unknown", "filtered", skipped.filtered)
            if skipped.sampled_out:
                observer.runs_skipped(scorer_id, "unknown", "sampled_out", skipped.sampled_out)
        # Ingest-level skips are counted once per span, whichever scorers' selections saw them.
        for reason in _INGEST_SKIPS:
            n = max((getattr(skipped, reason) for skipped in processed.skipped), default=0)
            if n:
                observer.spans_skipped(reason, n)
        too_large = sum(1 for letter in processed.dead_letters if letter.reason.value in _TOO_LARGE)
        if too_large:
            observer.runs_skipped("", "unknown", "too_large", too_large)
