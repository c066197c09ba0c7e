"""Ingest: Kafka records of OTLP traces read (size check, decode) once each, and dead letters for what cannot be.

Public API: :func:`decode_traces` (bytes → ``TracesData``), :func:`read_record` (the pure size check and decode of
one record) and the dead-letter producer in :mod:`sidecar.ingest.kafka`. What each scope makes of the spans is its
stage's (``sidecar.runtime.stages``).
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
from sidecar.ingest.pipeline import IngestConfig, ReadRecord, read_record

__all__ = [
    "DeadLetter",
    "DeadLetterCounter",
    "DeadLetterReason",
    "Encoding",
    "IngestConfig",
    "ReadRecord",
    "RecordOrigin",
    "TraceDecodeError",
    "decode_traces",
    "letter_record",
    "one_per_reason",
    "read_record",
]
