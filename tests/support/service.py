"""A service over the engine and the stages of a few configured scorers, as the composition root builds it for
``run`` (``sidecar.app.serve.service_for``), for tests that hand it scorers and sinks of their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from sidecar.core import ScoredRun, Sink
from sidecar.core.observers import ServiceObserver
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.engine import Engine
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.service import ScoringService
from sidecar.runtime.sources import RecordSource
from sidecar.runtime.stages import build_stages
from tests.support.custom_scorer import create_constant_scorer
from tests.support.sidecar_process import committed_total


def scoring_service(
    *,
    bootstrap_servers: str,
    group_id: str,
    ingest: IngestConfig,
    scorers: Sequence[ConfiguredScorer],
    sinks: Sequence[Sink],
    topics: Sequence[str] = (),
    observer: ServiceObserver | None = None,
    limits: RuntimeLimits | None = None,
    consumer_options: dict[str, Any] | None = None,
    source: RecordSource | None = None,
    key_sampling: bool = True,
    dead_letters: DeadLetterPublisher | None = None,
) -> ScoringService:
    engine = Engine.build(sinks, observer=observer, limits=limits)
    if dead_letters is None:
        dead_letters = DeadLetterPublisher(
            bootstrap_servers, ingest.dead_letter_topic, encoding=ingest.encoding, observer=engine.observer
        )
    return ScoringService(
        engine=engine,
        stages=build_stages(scorers, engine, dead_letters=dead_letters, ingest=ingest),
        ingest=ingest,
        dead_letters=dead_letters,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        topics=topics,
        consumer_options=consumer_options,
        source=source,
        key_sampling=key_sampling,
    )


class Captured:
    """A sink that keeps every finished run (and confirms every flush)."""

    name = "captured"

    def __init__(self) -> None:
        self.runs: list[ScoredRun] = []
        self.outstanding = 0

    async def start(self) -> None:
        return None

    async def submit(self, run: ScoredRun) -> None:
        self.runs.append(run)

    async def flush(self, timeout_s: float) -> bool:
        return True

    async def close(self) -> None:
        return None


async def drain_through_service(
    bootstrap: str,
    ingest: IngestConfig,
    group: str,
    expect_runs: int,
    expect_committed: int,
    partitions: int = 1,
    observer: ServiceObserver | None = None,
) -> list[ScoredRun]:
    """The records of ``ingest.topic`` through the service (span scope, a code scorer), until ``expect_runs`` runs
    ended and ``expect_committed`` offsets are committed."""
    sink = Captured()
    service = scoring_service(
        bootstrap_servers=bootstrap,
        group_id=group,
        ingest=ingest,
        scorers=[ConfiguredScorer(create_constant_scorer())],
        sinks=[sink],
        observer=observer,
        limits=RuntimeLimits(commit_interval_s=0.1),
        consumer_options={"fetch_max_wait_ms": 50, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            done = len(sink.runs) >= expect_runs
            if done and await committed_total(bootstrap, group, ingest.topic, partitions) >= expect_committed:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{len(sink.runs)} of {expect_runs} runs")
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
    return sink.runs
