"""One record from fetch to the stages: its claim opened, read once (size check, decode), handed to every stage,
what cannot be scored set aside, and its claim sealed, so that it commits once every stage is done with it.

A record whose key names a trace that every stage samples out is counted and done without being decoded
(sidecar.ingest.key_sampling), once a decoded record has shown that keys name the trace a record holds; the first
decoded record that shows otherwise turns that off for the process."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from sidecar.core.observers import ServiceObserver
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason, RecordOrigin
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.key_sampling import KeySampler, trace_id_from_key
from sidecar.ingest.logs import read_logs_record
from sidecar.ingest.pipeline import IngestConfig, read_record, trace_ids_of
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.claims import Claims, RecordClaim
from sidecar.runtime.stages import Fetched, FetchedLogs, Stage, set_aside

__all__ = ["RecordHandler"]

log = logging.getLogger(__name__)


class RecordHandler:
    def __init__(
        self,
        ingest: IngestConfig,
        stages: Sequence[Stage],
        *,
        claims: Claims[TopicPartition],
        capacity: Capacity,
        observer: ServiceObserver,
        dead_letters: DeadLetterPublisher,
        key_sampling: bool = True,
    ) -> None:
        self._ingest = ingest
        self._stages = tuple(stages)
        self._claims = claims
        self._capacity = capacity
        self._observer = observer
        self._dead_letters = dead_letters
        self._proto = ingest.encoding == "otlp_proto"
        self._log_topics = ingest.log_topics
        # The stages another one feeds (the content join hands on the records it held) are not handed records here.
        fed = {id(fed) for stage in self._stages for fed in stage.feeds()}
        self._takers = tuple(stage for stage in self._stages if id(stage) not in fed)
        sampler = KeySampler(stage.key_sample_rate() for stage in self._stages)
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
        claim = self._claims.open(tp, offset, len(value) if value is not None else 0)
        if claim is None:
            # A record this assignment already holds (a fetch from before a seek): the first copy counts.
            log.warning("skipping %s/%d@%d: already in flight", tp.topic, tp.partition, offset)
            return
        if tp.topic in self._log_topics:
            await self._handle_logs(tp, record, claim)
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
            claim.seal()
            return
        letters: list[DeadLetter]
        try:
            read = read_record(value, self._ingest)
            traces = read.traces
            self._observer.record_consumed(tp.topic, read.spans)
            letters = [read.letter] if read.letter is not None else []
            if traces is not None:
                if key_trace_id is not None:
                    self._check_key(tp, offset, key_trace_id, trace_ids_of(traces))
                whole = value if self._proto else None
                fetched = Fetched(tp, offset, record.timestamp, traces, whole, claim, origin=_origin(tp, record))
                for stage in self._takers:
                    stage.take(fetched)
                letters = fetched.letters
        except Exception as exc:  # a bug, not bad input: set the record aside, keep the partition moving
            log.exception("ingest failed on %s/%d@%d", tp.topic, tp.partition, offset)
            letters = [DeadLetter(DeadLetterReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:300])]
        if letters:
            # Counted once delivered; a revoke while the broker acknowledged them leaves the record to its new owner,
            # which sets them aside again (its claim was dropped: sealing it below does nothing).
            await set_aside(self._dead_letters, self._observer, _origin(tp, record), letters)
        claim.seal()
        self._capacity.update()

    async def _handle_logs(self, tp: TopicPartition, record: Any, claim: RecordClaim) -> None:
        """A record of the logs topics: read once (size check, decode), handed to every stage (the content join holds
        the content it brings until its spans come)."""
        letters: list[DeadLetter]
        try:
            read = read_logs_record(record.value, self._ingest)
            self._observer.record_consumed(tp.topic, 0)
            letters = [read.letter] if read.letter is not None else []
            if read.logs is not None:
                fetched = FetchedLogs(tp, record.offset, read.logs, claim)
                for stage in self._stages:
                    stage.take_logs(fetched)
        except Exception as exc:  # a bug, not bad input: set the record aside, keep the partition moving
            log.exception("ingest failed on %s/%d@%d", tp.topic, tp.partition, record.offset)
            letters = [DeadLetter(DeadLetterReason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:300])]
        if letters:
            await set_aside(self._dead_letters, self._observer, _origin(tp, record), letters)
        claim.seal()
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


def _origin(tp: TopicPartition, record: Any) -> RecordOrigin:
    return RecordOrigin(
        topic=tp.topic,
        partition=tp.partition,
        offset=record.offset,
        value=record.value or b"",
        key=record.key,
        headers=tuple((k, bytes(v)) for k, v in record.headers or ()),
    )
