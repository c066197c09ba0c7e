"""A sample of the window's records, read before the backfill starts: how many runs each chosen scorer finds per
record (before sampling, which the estimator applies), and some of those runs to measure the judge calls on.

Records are read in a few evenly spaced stretches of every partition, so that a window whose traffic changes
over time is not judged by its first minutes alone. They become runs through the scorers' stages, as the service
makes them (``sidecar.runtime.stages.offline_runs``): whole-trace scorers' runs from the sample's traces, as the
trace stage assembles them once done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from aiokafka import AIOKafkaConsumer, TopicPartition

from sidecar.backfill.plan import WindowPlan
from sidecar.core import ScorerRunRequest
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.stages import offline_records, offline_runs

__all__ = ["WindowSample", "read_sample"]

_STRETCHES = 4  # evenly spaced places read in each partition
_READ_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class WindowSample:
    records: int  # records read
    runs: dict[str, int]  # scorer id -> runs found in them (before sampling)
    requests: dict[str, list[ScorerRunRequest]] = field(default_factory=dict)  # some of those runs, by scorer

    def runs_per_record(self, scorer: str) -> float:
        return self.runs.get(scorer, 0) / self.records if self.records else 0.0


async def read_sample(
    consumer: AIOKafkaConsumer,
    plan: WindowPlan,
    ingest: IngestConfig,
    scorers: Sequence[ConfiguredScorer],
    *,
    max_records: int,
) -> WindowSample:
    """Up to ``max_records`` records of the window (``consumer``: no group, free to assign and seek)."""
    values = await _read(consumer, plan, max_records)
    # Sampling is applied by the estimator (the configured rate): count every run the selection admits.
    every = [replace(s, selection=s.selection.model_copy(update={"sample_rate": 1.0})) for s in scorers]
    read = offline_records(((value, f"@{offset}") for offset, value in values if value is not None), ingest)
    runs: dict[str, list[ScorerRunRequest]] = {s.scorer.id: [] for s in scorers}
    for run in offline_runs(every, read.records, ingest=ingest):
        runs[run.configured.scorer.id].append(run.request)
    return WindowSample(len(values), {k: len(v) for k, v in runs.items()}, runs)


async def _read(consumer: AIOKafkaConsumer, plan: WindowPlan, max_records: int) -> list[tuple[int, bytes | None]]:
    """(offset, value) of up to ``max_records`` records, in stretches spread over every partition's range."""
    partitions = [p for p in plan.partitions if p.records]
    if not partitions or max_records <= 0:
        return []
    share = max(1, max_records // len(partitions))
    wanted: dict[TopicPartition, list[tuple[int, int]]] = {}  # partition -> [start, end) stretches, in order
    for p in partitions:
        take = min(share, p.records)
        stretches = min(_STRETCHES, take)
        length = take // stretches
        step = p.records // stretches
        wanted[p.partition] = [(p.start + i * step, p.start + i * step + length) for i in range(stretches)]
    values: list[tuple[int, bytes | None]] = []
    for tp, ranges in wanted.items():
        consumer.assign([tp])  # one at a time: the consumer fetches ahead on every partition it is assigned
        for start, end in ranges:
            values.extend(await _read_range(consumer, tp, start, end))
    return values


async def _read_range(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int
) -> list[tuple[int, bytes | None]]:
    consumer.seek(tp, start)
    read: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + _READ_TIMEOUT_S
    position = start
    while position < end and time.monotonic() < deadline:
        batches = await consumer.getmany(tp, timeout_ms=200)
        for record in batches.get(tp, []):
            if record.offset < position:
                continue  # a batch fetched from before the seek point
            if record.offset >= end:
                position = end
                break
            read.append((record.offset, record.value))
            position = record.offset + 1
    return read
