"""A service over the engine and the stages of a few configured scorers, as the composition root builds it for
``run`` (``sidecar.app.serve.service_for``), for tests that hand it scorers and sinks of their own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sidecar.core import Sink
from sidecar.core.observers import ServiceObserver
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.engine import Engine
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.service import ScoringService
from sidecar.runtime.sources import RecordSource
from sidecar.runtime.stages import build_stages


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
        dead_letters = DeadLetterPublisher(bootstrap_servers, ingest.dead_letter_topic, encoding=ingest.encoding)
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
