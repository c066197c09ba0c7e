"""What a stage is: one scope's way from records to runs, with its state, its bounds and its lifecycle.

The engine around the stages (intake, the record handler, the dispatcher, the claims, the checkpoint) knows
stages, never scope names. Each record of the traces topic is read once (size check, decode) and handed to every
stage (:meth:`Stage.take`); a stage starts runs now (span scope), holds spans until their trace is done (trace
scope), or publishes turns and scores conversations from its own topic (session scope). Whatever a stage starts
for a record holds a part of the record's claim (``sidecar.runtime.claims``), so the record commits only once
every stage is done with it.

A stage is also what ``preview``, ``eval``, ``backfill``'s estimate and ``validate --traffic`` ask: its
:class:`Assembly` turns a fixed set of records into the runs the live stage would start from them (the same
functions, with no engine), and its :class:`StageFacts` say what one run of it scores, whether a backfill can
replay it and which ``eval`` items it takes.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from aiokafka import TopicPartition
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.core import Flushable
from sidecar.core.runs import Scope, ScorerRunRequest
from sidecar.ingest.deadletter import DeadLetter
from sidecar.runtime.claims import RecordClaim
from sidecar.runtime.clients import ClientOptions
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.stopping import StopReport

__all__ = [
    "Assembly",
    "Fetched",
    "OfflineRecord",
    "OfflineRun",
    "Stage",
    "StageContext",
    "StageFacts",
    "StageRun",
]

StageRun = tuple[ConfiguredScorer, ScorerRunRequest]


@dataclass(slots=True)
class Fetched:
    """One record of the traces topic, read once (size checked, decoded) and handed to every stage. ``claim`` holds
    the record back from its commit: a stage takes a part of it for each piece of work it starts. ``letters``: what
    cannot be scored, set aside by the record handler once every stage has looked (one per span and reason)."""

    partition: TopicPartition
    offset: int
    timestamp_ms: int | None
    traces: ExportTraceServiceRequest
    # The record's bytes when it is OTLP protobuf (a trace alone in it is buffered as it came), else None.
    whole: bytes | None
    claim: RecordClaim
    letters: list[DeadLetter] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OfflineRecord:
    """A record read by a command (``preview``, ``eval --records``, ``backfill``'s sample), decoded, with where it
    came from (``topic/partition@offset``, ``file:line``)."""

    traces: ExportTraceServiceRequest
    whole: bytes | None  # the record's bytes when it is OTLP protobuf
    where: str
    offset: int = -1


@dataclass(frozen=True, slots=True)
class OfflineRun:
    """A run a stage would start from a set of records, with where its last record came from."""

    configured: ConfiguredScorer
    request: ScorerRunRequest
    where: str


class Assembly(ABC):
    """The pure half of a stage: records → runs, with no engine (no claims, no tasks, no clock). The live stage
    calls the same functions on each record, trace or window; commands call :meth:`runs_of_records` on a fixed
    set of records, which is then all there is: every trace whose root arrived is done, every conversation is
    quiet."""

    @abstractmethod
    def runs_of_records(self, records: Sequence[OfflineRecord]) -> list[OfflineRun]:
        """Every run the stage would start from ``records`` (in order: the records' order, then the spans')."""


@dataclass(frozen=True, slots=True)
class StageFacts:
    """What commands read of a stage without building it."""

    scope: Scope
    # What one run of the stage scores (``validate --traffic`` counts runs per trace or per conversation).
    unit: Literal["span", "trace", "conversation"]
    # Whether ``backfill`` can replay it over a past window of the traces topic (a conversation's turns live in the
    # stage's own topic, written as traffic arrives: a past window of the traces topic is not a conversation).
    backfills: bool
    # Whether it scores ``eval`` items that are conversations (``turns``) rather than one request and its answer.
    conversation_items: bool
    # Whether its scorers count spans that arrive for a trace already scored (``late_spans``).
    late_spans: bool


@dataclass(frozen=True, slots=True)
class StageContext:
    """What a stage may need from the running service when it starts (not when it is built: these exist only once
    the broker answered): the clients' options, for a stage reading a topic of its own, and how far in record time
    the service's intake has read every partition it owns."""

    clients: ClientOptions
    read_to_ms: Callable[[], Awaitable[int | None]]


class Stage(ABC):
    """One scope's live stage. Built by the composition root (``sidecar.app``) with the engine's parts and handed
    to the service, which calls, in order: :meth:`start`, :meth:`take` for every record, the coroutines of
    :meth:`background` while it consumes, :meth:`revoked` on each revoke, :meth:`source_ended` when a bounded
    source is read to its end, :meth:`stopping` once intake stopped, :meth:`confirmation` before each
    checkpoint's flush, :meth:`finish` after the final checkpoint, then :meth:`drop_all` and :meth:`closing`.
    Everything but :meth:`take` has a default that does nothing."""

    facts: ClassVar[StageFacts]

    def __init__(self, scorers: Sequence[ConfiguredScorer]) -> None:
        self.scorers = tuple(scorers)

    @property
    def name(self) -> str:
        """What log lines and task names call the stage: its scope's word (a stage of no scope names itself)."""
        return self.facts.scope

    # -- records -------------------------------------------------------------------------------------------
    @abstractmethod
    def take(self, record: Fetched) -> None:
        """Start what ``record`` brings to this stage; every piece of work takes a part of ``record.claim``. No
        await: the record handler seals the claim once every stage has taken its parts."""

    def key_sample_rate(self) -> float:
        """The highest rate at which this stage samples a trace by its id: a record whose key names a trace sampled
        out at that rate holds nothing for it (1: a key cannot tell, e.g. conversations are sampled by their id)."""
        return max((s.selection.sample_rate for s in self.scorers), default=0.0)

    # -- the service's lifecycle ---------------------------------------------------------------------------
    async def start(self, context: StageContext) -> None:  # noqa: B027 (a hook: most stages need none)
        """The broker answered: start what the stage reads or writes of its own."""

    def background(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        """The stage's own loops (a ticker), run while the service consumes, until ``stop``."""
        return []

    @property
    def ready(self) -> bool:
        """Whether the stage's own readers joined their groups (``/readyz``)."""
        return True

    def revoked(self, partitions: set[TopicPartition]) -> None:  # noqa: B027 (a hook: most stages need none)
        """A revoke of partitions of the traces topic: what the stage holds of them goes to their new owner."""

    async def source_ended(self, stop: asyncio.Event) -> int:
        """A bounded source (a backfill's window) was read to its end: score what is still held, as it is.
        Returns how many units (traces, conversations) that started."""
        return 0

    async def stopping(self, report: StopReport) -> None:  # noqa: B027 (a hook: most stages need none)
        """Intake stopped: stop the stage's own readers."""

    def confirmation(self) -> Callable[[], None] | None:
        """For the checkpoint, before it flushes the sinks: what to do once they confirmed every export handed over
        before this moment (``None``: nothing waits)."""
        return None

    async def finish(self, timeout_s: float, report: StopReport) -> None:  # noqa: B027 (a hook: most stages need none)
        """After the final checkpoint: write what it confirmed."""

    async def abandon(self) -> None:  # noqa: B027 (a hook: most stages need none)
        """The stop: cancel the work still running; none of it completes a record."""

    def closing(self) -> Mapping[str, Awaitable[Any]]:
        """The stage's closing steps, run side by side with the service's own."""
        return {}

    def flushables(self) -> Sequence[Flushable]:
        """What the stage writes that the checkpoint must flush before it commits (a topic of its own)."""
        return ()
