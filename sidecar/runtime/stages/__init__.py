"""The stages, one per scope (``span``, ``trace``, ``session``): the only place that maps the word a configuration
writes under ``targets.scope`` to what the engine does with it.

- :func:`facts_of`: what a scope's stage scores per run, whether a backfill can replay it, which ``eval`` items it
  takes (for ``validate --traffic``, ``backfill``, ``eval``, ``preview`` and the metrics);
- :func:`offline_runs`: the runs the stages would start from a fixed set of records (``preview``, ``eval
  --records``, ``backfill``'s sample), through each stage's own assembly;
- :func:`build_stages`: the live stages of a service, built by the composition root and handed to the service.

A new stage of a scope is a module here with its :class:`~.base.Stage`, its :class:`~.base.Assembly` and its facts,
and a line in :data:`STAGES`. The content join (``content``) is a stage that scores no scope: it stands in front of
the span and trace stages when logs topics are configured, and feeds them. A stage of no scope (``feedback``: human
verdicts joined to the sidecar's scores, which starts no runs) is built by :func:`build_stages` when configured;
offline commands have nothing to ask it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sidecar.core.runs import Scope
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig, read_record
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.engine import Engine
from sidecar.runtime.feedback import FeedbackLimits, JoinedScorer
from sidecar.runtime.feedback.topics import RecordWriter
from sidecar.runtime.sessions import SessionLimits, TurnPublishing, TurnTopic
from sidecar.runtime.stages.base import (
    Assembly,
    Fetched,
    FetchedLogs,
    OfflineRecord,
    OfflineRun,
    Stage,
    StageContext,
    StageFacts,
    StageRun,
    set_aside,
)
from sidecar.runtime.stages.content import ContentJoinStage
from sidecar.runtime.stages.feedback import FeedbackStage
from sidecar.runtime.stages.session import SessionAssembly, SessionStage
from sidecar.runtime.stages.span import SpanAssembly, SpanStage
from sidecar.runtime.stages.trace import TraceAssembly, TraceFollower, TraceStage

__all__ = [
    "STAGES",
    "Assembly",
    "Fetched",
    "FetchedLogs",
    "OfflineRecord",
    "OfflineRecords",
    "OfflineRun",
    "Stage",
    "StageContext",
    "StageFacts",
    "StageRun",
    "build_stages",
    "facts_of",
    "joined_scorer",
    "offline_records",
    "offline_runs",
    "set_aside",
]

STAGES: dict[Scope, type[Stage]] = {"span": SpanStage, "trace": TraceStage, "session": SessionStage}


def facts_of(scope: Scope | ConfiguredScorer) -> StageFacts:
    """The facts of the stage that scores ``scope`` (a scope's word, or a configured scorer's)."""
    word = scope.scope if isinstance(scope, ConfiguredScorer) else scope
    return STAGES[word].facts


@dataclass(frozen=True, slots=True)
class OfflineRecords:
    records: list[OfflineRecord]
    undecodable: int  # records that could not be read (too large, not OTLP in the configured encoding)


def offline_records(values: Iterable[tuple[bytes, str]], ingest: IngestConfig) -> OfflineRecords:
    """Records a command read (value, where it came from), read as the service reads them (``read_record``)."""
    records: list[OfflineRecord] = []
    undecodable = 0
    whole = ingest.encoding == "otlp_proto"
    for offset, (value, where) in enumerate(values):
        read = read_record(value, ingest)
        if read.traces is None:
            undecodable += read.letter is not None
            continue
        records.append(OfflineRecord(read.traces, value if whole else None, where, offset))
    return OfflineRecords(records, undecodable)


def joined_scorer(configured: ConfiguredScorer) -> JoinedScorer:
    """What the feedback join knows of a scorer: whether a conversation is its subject, its scale and version."""
    scorer = configured.scorer
    conversations = facts_of(configured).unit == "conversation"
    return JoinedScorer(scorer.id, conversations, configured.scale, scorer.fingerprint, scorer.version)


def _by_scope(scorers: Sequence[ConfiguredScorer]) -> dict[Scope, list[ConfiguredScorer]]:
    grouped: dict[Scope, list[ConfiguredScorer]] = {}
    for configured in scorers:
        grouped.setdefault(configured.scope, []).append(configured)
    return grouped


def offline_runs(
    scorers: Sequence[ConfiguredScorer],
    records: Sequence[OfflineRecord],
    *,
    ingest: IngestConfig,
    sessions: SessionLimits | None = None,
) -> list[OfflineRun]:
    """Every run the stages of ``scorers`` would start from ``records``, through the same assembly as the live
    stages (all there is: traces done once their root arrived, conversations quiet); ``ingest`` says what each run
    keeps of its span and its resource."""
    grouped = _by_scope(scorers)
    resource, span, versions = ingest.resource_attributes, ingest.span_attributes, ingest.versions
    assemblies: dict[Scope, Callable[[list[ConfiguredScorer]], Assembly]] = {
        "span": lambda chosen: SpanAssembly(
            chosen, resource_attributes=resource, span_attributes=span, versions=versions
        ),
        "trace": lambda chosen: TraceAssembly(
            chosen, resource_attributes=resource, span_attributes=span, versions=versions
        ),
        "session": lambda chosen: SessionAssembly(chosen, sessions or SessionLimits(), ingest.versions),
    }
    runs: list[OfflineRun] = []
    for scope, chosen in grouped.items():
        runs.extend(assemblies[scope](chosen).runs_of_records(records))
    return runs


def build_stages(
    scorers: Sequence[ConfiguredScorer],
    engine: Engine,
    *,
    dead_letters: DeadLetterPublisher,
    ingest: IngestConfig,
    sessions: SessionLimits | None = None,
    turn_topic: TurnTopic | None = None,
    feedback: FeedbackLimits | None = None,
    feedback_topics: tuple[RecordWriter, RecordWriter] | None = None,
) -> tuple[Stage, ...]:
    """The live stages of ``scorers``: span runs at once; whole traces for trace scorers and for stage 1 of
    conversations (which follows the whole-trace stage); conversations from their own topic; human feedback joined
    to the scores (``feedback_topics``: the state and pairs topics' writers)."""
    grouped = _by_scope(scorers)
    stages: list[Stage] = []
    observer, dispatcher = engine.observer, engine.dispatcher
    if "span" in grouped:
        stages.append(
            SpanStage(
                grouped["span"],
                dispatcher=dispatcher,
                observer=observer,
                resource_attributes=ingest.resource_attributes,
                span_attributes=ingest.span_attributes,
                versions=ingest.versions,
                max_runs=engine.limits.max_runs_per_record,
            )
        )
    conversation = grouped.get("session", [])
    turns: TurnPublishing | None = None
    if conversation:
        if sessions is None or turn_topic is None:
            raise ValueError("scope: session needs the sessions block and the internal topic's publisher")
        turns = TurnPublishing(conversation, sessions, turn_topic, observer)
    followers: tuple[TraceFollower, ...] = (turns,) if turns is not None else ()
    traces: TraceStage | None = None
    if "trace" in grouped or followers:
        traces = TraceStage(
            grouped.get("trace", []),
            engine.limits.trace_buffer,
            dispatcher=dispatcher,
            capacity=engine.capacity,
            observer=observer,
            dead_letters=dead_letters,
            max_in_flight_runs=engine.limits.max_in_flight_runs,
            resource_attributes=ingest.resource_attributes,
            span_attributes=ingest.span_attributes,
            followers=followers,
            versions=ingest.versions,
            max_runs=engine.limits.max_runs_per_record,
        )
        stages.append(traces)
    if ingest.log_topics and stages:
        # LLM calls whose content comes as log events: the span and trace stages read their records once it came.
        join = ContentJoinStage(
            stages,
            engine.limits.log_join,
            dispatcher=dispatcher,
            observer=observer,
            dead_letters=dead_letters,
        )
        stages = [join, *stages]
    if turns is not None:
        assert traces is not None and sessions is not None and turn_topic is not None
        stages.append(
            SessionStage(
                conversation,
                sessions,
                turns=turns,
                topic=turn_topic,
                traces=traces,
                dispatcher=dispatcher,
                observer=observer,
                runtime=engine.limits,
            )
        )
    if feedback is not None:
        if feedback_topics is None:
            raise ValueError("feedback needs the writers of its state and pairs topics")
        state, pairs = feedback_topics
        joined = {c.scorer.id: joined_scorer(c) for c in scorers}
        stages.append(
            FeedbackStage(
                feedback,
                joined,
                state=state,
                pairs=pairs,
                dead_letters=dead_letters,
                observer=observer,
                runtime=engine.limits,
            )
        )
    return tuple(stages)
