"""``scope: span``: each selected span scored at once, from its own attributes.

A record's spans are mapped once per distinct selection (scorers with the same targets share one mapping), and
every run starts on the dispatcher at once, holding a part of the record's claim. A span that cannot become a run
(malformed ids, too large, unmappable) is set aside once, whichever selections saw it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.conventions.run_limit import limit_runs
from sidecar.conventions.selection import Selection
from sidecar.conventions.spans import SkipCounts, spans_to_runs
from sidecar.conventions.versions import DEFAULT_VERSIONS, VersionAttributes
from sidecar.core.label_values import AGENT_NOT_READ
from sidecar.core.observers import IngestSkipReason, ServiceObserver
from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.limits import MAX_RUNS_PER_RECORD, runs_over_limit
from sidecar.runtime.stages.base import Assembly, Fetched, OfflineRecord, OfflineRun, Stage, StageFacts, StageRun

__all__ = ["SpanAssembly", "SpanRuns", "SpanStage"]

_INGEST_SKIPS: tuple[IngestSkipReason, ...] = ("internal", "filtered", "sampled_out", "no_content", "unrecognised")


@dataclass(slots=True)
class SpanRuns:
    """What one record brings to span scope: the runs, the spans set aside, and the skips (per scorer: filtered
    and sampled out; per span, whichever selections saw it: the sidecar's own, no content)."""

    runs: list[StageRun] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    skipped: list[tuple[ConfiguredScorer, SkipCounts]] = field(default_factory=list)

    def ingest_skips(self) -> dict[IngestSkipReason, int]:
        """Spans set aside before any scorer, counted once per span (the most any selection set aside)."""
        return {
            reason: n
            for reason in _INGEST_SKIPS
            if (n := max((getattr(counts, reason) for _, counts in self.skipped), default=0))
        }


class SpanAssembly(Assembly):
    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        *,
        resource_attributes: frozenset[str] = frozenset(),
        span_attributes: frozenset[str] = frozenset(),
        versions: VersionAttributes = DEFAULT_VERSIONS,
    ) -> None:
        self.scorers = tuple(scorers)
        by_selection: dict[Selection, list[ConfiguredScorer]] = {}
        for configured in self.scorers:
            by_selection.setdefault(configured.selection, []).append(configured)
        self._by_selection = tuple((selection, tuple(group)) for selection, group in by_selection.items())
        self._resource_attributes = resource_attributes
        self._span_attributes = span_attributes
        self._versions = versions  # where each run's agent version is read

    def of_record(self, traces: ExportTraceServiceRequest) -> SpanRuns:
        out = SpanRuns()
        seen: set[tuple[str, str, str]] = set()
        for selection, group in self._by_selection:
            result = spans_to_runs(
                traces,
                selection,
                resource_attributes=self._resource_attributes,
                span_attributes=self._span_attributes,
                versions=self._versions,
            )
            for configured in group:
                out.runs.extend((configured, request) for request in result.runs)
                out.skipped.append((configured, result.skipped))
            for reject in result.rejects:
                key = (reject.trace_id, reject.span_id, reject.reason)
                if key not in seen:
                    seen.add(key)
                    letter = DeadLetter(
                        DeadLetterReason(reject.reason), reject.detail, trace_id=reject.trace_id, span_id=reject.span_id
                    )
                    out.letters.append(letter)
        return out

    def runs_of_records(self, records: Sequence[OfflineRecord]) -> list[OfflineRun]:
        return [
            OfflineRun(configured, request, record.where)
            for record in records
            for configured, request in self.of_record(record.traces).runs
        ]


class SpanStage(Stage):
    facts = StageFacts(scope="span", unit="span", backfills=True, conversation_items=False, late_spans=False)

    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        *,
        dispatcher: RunDispatcher,
        observer: ServiceObserver,
        resource_attributes: frozenset[str] = frozenset(),
        span_attributes: frozenset[str] = frozenset(),
        versions: VersionAttributes = DEFAULT_VERSIONS,
        max_runs: int = MAX_RUNS_PER_RECORD,
    ) -> None:
        super().__init__(scorers)
        self.assembly = SpanAssembly(
            scorers, resource_attributes=resource_attributes, span_attributes=span_attributes, versions=versions
        )
        self._dispatcher = dispatcher
        self._observer = observer
        self._max_runs = max_runs  # per record

    def take(self, record: Fetched) -> None:
        found = self.assembly.of_record(record.traces)
        record.letters.extend(found.letters)
        observer = self._observer
        for configured, counts in found.skipped:
            if counts.filtered:
                observer.runs_skipped(configured.scorer.id, AGENT_NOT_READ, "filtered", counts.filtered)
            if counts.sampled_out:
                observer.runs_skipped(configured.scorer.id, AGENT_NOT_READ, "sampled_out", counts.sampled_out)
        for reason, n in found.ingest_skips().items():
            observer.spans_skipped(reason, n)
        runs, over = limit_runs(found.runs, self._max_runs)
        if over:
            where = f"record {record.partition.topic}/{record.partition.partition}@{record.offset}"
            runs_over_limit(observer, where, len(runs) + over, over)
        start = self._dispatcher.start
        claim = record.claim
        for configured, request in runs:
            start(configured, request, claim)
