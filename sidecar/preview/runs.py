"""Where ``preview`` takes its runs: the newest records of the configured topic (read without a consumer group:
nothing joined, nothing committed), a file of OTLP records, or an ``eval`` dataset. Records become runs through the
scorer's stage, as the service makes them (``sidecar.runtime.stages.offline_runs``): its targets, its scope, the
attributes it reads; whole traces and conversations from what the records hold."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from sidecar.core import ScorerRunRequest
from sidecar.eval.dataset import DatasetError, load_dataset
from sidecar.eval.records import ingest_for_records, read_record_file
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.attempt import request_context_of
from sidecar.runtime.clients import start_assigned_consumer
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.sources import topic_partitions
from sidecar.runtime.stages import facts_of, offline_records, offline_runs
from sidecar.runtime.startup import StartupFailure
from sidecar.runtime.tansu import read_log_ends
from sidecar.settings import EvalSettings, Settings

__all__ = ["PreviewRun", "PreviewSourceError", "RecordsRead", "runs_from_dataset", "runs_from_file", "runs_from_topic"]

# Records read per partition for N runs: agent runs are a share of a topic's records (one trace may span
# several records), so a window of a few times N, bounded.
_RECORDS_PER_RUN = 3
_MIN_WINDOW = 20
_MAX_WINDOW = 2000
_READ_DEADLINE_S = 20.0


class PreviewSourceError(ValueError):
    """A source that cannot be read (a missing file, a broker that does not answer): exit status 2."""


@dataclass(frozen=True, slots=True)
class PreviewRun:
    request: ScorerRunRequest
    request_context: Mapping[str, Any] | None = None
    ground_truth: Any = None
    where: str = ""  # where it came from: topic/partition@offset, file:line, dataset item


@dataclass(frozen=True, slots=True)
class RecordsRead:
    runs: tuple[PreviewRun, ...]
    records: int  # records (or dataset items) read
    undecodable: int = 0


def _ingest(settings: EvalSettings, configured: ConfiguredScorer, keep_resource: Iterable[str]) -> IngestConfig:
    return ingest_for_records(
        settings, resource_attributes=keep_resource, span_attributes=configured.facts.span_attributes
    )


def _runs_of_records(
    records: list[tuple[bytes, str]], config: IngestConfig, configured: ConfiguredScorer, n: int, settings: EvalSettings
) -> RecordsRead:
    """The newest ``n`` runs the scorer would score in ``records`` (value, where it came from)."""
    read = offline_records(records, config)
    # Every selected span: preview shows runs; sampling only decides which of them the service would score.
    every = replace(configured, selection=configured.selection.model_copy(update={"sample_rate": 1.0}))
    sessions = settings.sessions.limits() if isinstance(settings, Settings) and settings.sessions else None
    found = [
        PreviewRun(run.request, request_context_of(run.request), where=run.where)
        for run in offline_runs([every], read.records, ingest=config, sessions=sessions)
    ]
    found.sort(key=lambda run: run.request.target.end_time_unix_nano)
    return RecordsRead(tuple(found[-n:]), len(records), read.undecodable)


async def runs_from_topic(
    settings: EvalSettings, configured: ConfiguredScorer, n: int, keep_resource: Iterable[str]
) -> RecordsRead:
    """The newest runs on the configured topics: each partition assigned and read from a little before its end,
    with no consumer group (``group_id=None``, auto-commit off), so no group is joined and no offset committed."""
    kafka = settings.kafka
    if kafka is None:
        raise PreviewSourceError("--from-topic needs a kafka section in the configuration (or use --file, --dataset)")
    config = _ingest(settings, configured, keep_resource)
    window = min(_MAX_WINDOW, max(_MIN_WINDOW, _RECORDS_PER_RUN * n))
    try:
        consumer = await start_assigned_consumer(
            kafka.bootstrap_servers_str,
            {"client_id": f"{kafka.client_id}-preview", **kafka.security.client_options()},
            timeout_s=kafka.startup_timeout_s,
            purpose="preview",
        )
    except StartupFailure as exc:  # refused, unknown host, timeout: one line, not a traceback
        raise PreviewSourceError(str(exc)) from None
    try:
        records = await _read_tails(consumer, kafka.topics, window)
    finally:
        await consumer.stop()
    return _runs_of_records(records, config, configured, n, settings)


async def _read_tails(consumer: AIOKafkaConsumer, topics: Iterable[str], window: int) -> list[tuple[bytes, str]]:
    partitions = topic_partitions(consumer, topics)
    if not partitions:
        raise PreviewSourceError(f"no such topic on the broker: {', '.join(topics)}")
    # Where each partition's tail starts: ``window`` records before its end, the end read as Tansu needs it.
    starts = await consumer.beginning_offsets(partitions)
    ends = await read_log_ends(consumer, partitions, starts)
    consumer.assign(partitions)
    for tp in partitions:
        consumer.seek(tp, max(starts[tp], ends[tp] - window))
    waiting = set(partitions)
    records: list[tuple[bytes, str]] = []
    deadline = time.monotonic() + _READ_DEADLINE_S
    while waiting and time.monotonic() < deadline:
        batches = await consumer.getmany(*waiting, timeout_ms=500)
        for tp, batch in batches.items():
            records.extend((r.value, f"{tp.topic}/{tp.partition}@{r.offset}") for r in batch if r.value is not None)
        for tp in list(waiting):
            highwater = consumer.highwater(tp)
            if highwater is not None and await consumer.position(tp) >= highwater:
                waiting.discard(tp)
    return records


def runs_from_file(
    path: Path, settings: EvalSettings, configured: ConfiguredScorer, n: int, keep_resource: Iterable[str]
) -> RecordsRead:
    """Runs from a file of OTLP records: JSON lines (one OTLP/JSON export per line, as the Collector's file
    exporter writes them), else one OTLP protobuf export."""
    try:
        read = read_record_file(path)
    except DatasetError as exc:
        raise PreviewSourceError(f"{path}: {'; '.join(exc.problems)}") from None
    config = _ingest(settings, configured, keep_resource).model_copy(update={"encoding": read.encoding})
    return _runs_of_records(list(read.records), config, configured, n, settings)


def runs_from_dataset(path: Path, n: int, configured: ConfiguredScorer) -> RecordsRead:
    """The first ``n`` items of an ``eval`` dataset the scorer scores, as ``eval`` scores them: conversations
    (items with ``turns``) for a scope session scorer, one-turn items for the others."""
    items = load_dataset(path)
    session = facts_of(configured).conversation_items
    runs = tuple(
        PreviewRun(
            item.request(),
            item.run_request_context(),
            item.ground_truth,
            where=f"{path}:{item.line}" + (f" ({item.id})" if item.id else ""),
        )
        for item in items
        if item.is_conversation == session
    )
    return RecordsRead(runs[:n], len(items))
