"""Ingest: Kafka records of OTLP traces → scorer runs and dead letters.

Public API: :func:`decode_traces` (bytes → ``TracesData``), :func:`process_record` (the pure
decode → select → map step for one record) and the thin Kafka layer in :mod:`sidecar.ingest.kafka`.
"""

from sidecar.ingest.deadletter import (
    DeadLetter,
    DeadLetterCounter,
    DeadLetterReason,
    RecordOrigin,
    letter_record,
    one_per_reason,
)
from sidecar.ingest.decode import Encoding, TraceDecodeError, decode_traces
from sidecar.ingest.pipeline import IngestConfig, ProcessedRecord, process_record

__all__ = [
    "DeadLetter",
    "DeadLetterCounter",
    "DeadLetterReason",
    "Encoding",
    "IngestConfig",
    "ProcessedRecord",
    "RecordOrigin",
    "TraceDecodeError",
    "decode_traces",
    "letter_record",
    "one_per_reason",
    "process_record",
]
