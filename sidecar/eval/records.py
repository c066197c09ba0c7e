"""A file of OTLP records as ``eval`` and ``preview`` read it: JSON lines (one OTLP/JSON export per line, as the
Collector's file exporter writes them), else one OTLP protobuf export (concatenated exports merge their spans). The
runs in it are those the scorers' stages would start from the same records in the service
(``sidecar.runtime.stages.offline_runs``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sidecar.eval.dataset import DatasetError, EvalItem
from sidecar.ingest import Encoding, IngestConfig
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.stages import offline_records, offline_runs
from sidecar.settings import EvalSettings, Settings

__all__ = ["RecordFile", "ingest_for_records", "read_record_file"]


def ingest_for_records(
    settings: EvalSettings, *, resource_attributes: Iterable[str], span_attributes: Iterable[str]
) -> IngestConfig:
    """How a command reads records as the service would (the kafka block's encoding and bounds, the agent versions
    the settings name), keeping what the given scorers read of each span and its resource."""
    kafka = settings.kafka
    versions = settings.versions.version_attributes()
    base = (
        kafka.ingest_config(kafka.topics[0], versions=versions)
        if kafka is not None
        else IngestConfig(versions=versions)
    )
    return base.model_copy(
        update={
            "resource_attributes": frozenset(resource_attributes) | versions.resource_keys,
            "span_attributes": frozenset(span_attributes),
        }
    )


@dataclass(frozen=True, slots=True)
class RecordFile:
    path: Path
    records: tuple[tuple[bytes, str], ...]  # (value, where it is: file:line)
    encoding: Encoding

    def items(
        self, settings: EvalSettings, scorers: Sequence[ConfiguredScorer], ingest: IngestConfig
    ) -> list[EvalItem]:
        """Every run of each scorer in the records, as an item that scorer scores (its request built by the
        stage, not from a dataset's fields)."""
        config = ingest.model_copy(update={"encoding": self.encoding})
        read = offline_records(self.records, config)
        sessions = settings.sessions.limits() if isinstance(settings, Settings) and settings.sessions else None
        runs = offline_runs(scorers, read.records, ingest=config, sessions=sessions)
        return [
            EvalItem.of_run(run.request, run.configured.scorer.id, index=index, where=run.where)
            for index, run in enumerate(runs)
        ]


def read_record_file(path: Path) -> RecordFile:
    """The file's records (:class:`DatasetError` when it cannot be read)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(path, [f"cannot read it: {exc.strerror}"]) from None
    if data.lstrip()[:1] == b"{":
        lines = tuple((line, f"{path}:{number}") for number, line in enumerate(data.splitlines(), 1) if line.strip())
        return RecordFile(path, lines, "otlp_json")
    return RecordFile(path, ((data, str(path)),), "otlp_proto")
