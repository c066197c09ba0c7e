"""Kafka records of the logs topics (the Collector's ``otlp_logs``) → OTLP ``LogsData``: the size check and the
decode, as ``pipeline.read_record`` does for traces. Which log records hold content, and of which span, is the
conventions' business (``sidecar.conventions.log_content``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

from sidecar.ingest.deadletter import DeadLetter, DeadLetterReason
from sidecar.ingest.decode import Encoding, hex_ids_to_base64, objects
from sidecar.ingest.pipeline import IngestConfig

__all__ = ["LogDecodeError", "ReadLogs", "decode_logs", "read_logs_record"]


class LogDecodeError(ValueError):
    """The record is not one OTLP logs export in the configured encoding."""


def decode_logs(data: bytes, encoding: Encoding = "otlp_proto") -> LogsData:
    """One record value: a ``LogsData`` / ``ExportLogsServiceRequest`` (the same wire format). Raises
    :class:`LogDecodeError` and nothing else on bad input; a non-empty record without resource logs is one too
    (protobuf reads random bytes as unknown fields)."""
    logs = LogsData()
    try:
        if encoding == "otlp_proto":
            logs.ParseFromString(data)
        else:
            document = json.loads(data)
            if not isinstance(document, dict):
                raise LogDecodeError("OTLP/JSON record is not an object")
            _ids_to_base64(document)
            json_format.ParseDict(document, logs, ignore_unknown_fields=True)
    except LogDecodeError:
        raise
    except (
        DecodeError,
        json_format.ParseError,
        ValueError,
        TypeError,
        AttributeError,
        KeyError,
        RecursionError,
    ) as exc:
        raise LogDecodeError(f"invalid OTLP logs ({encoding}): {exc.__class__.__name__}: {exc}"[:300]) from exc
    if data and not logs.resource_logs:
        raise LogDecodeError("record holds no resource logs")
    return logs


def _ids_to_base64(document: dict[str, Any]) -> None:
    for resource_logs in objects(document.get("resourceLogs", document.get("resource_logs"))):
        for scope_logs in objects(resource_logs.get("scopeLogs", resource_logs.get("scope_logs"))):
            for record in objects(scope_logs.get("logRecords", scope_logs.get("log_records"))):
                hex_ids_to_base64(record)


@dataclass(frozen=True, slots=True)
class ReadLogs:
    """A record's log records (``None``: a tombstone, or a record that cannot be read: ``letter`` says why)."""

    logs: LogsData | None = None
    letter: DeadLetter | None = None

    @property
    def log_records(self) -> int:
        logs = self.logs
        if logs is None:
            return 0
        return sum(len(scope.log_records) for resource in logs.resource_logs for scope in resource.scope_logs)


def read_logs_record(value: bytes | None, config: IngestConfig) -> ReadLogs:
    """The record's logs, or the dead letter that says why they cannot be read (the traces' size bound and
    encoding). Raises nothing on bad input."""
    if value is None:
        return ReadLogs()
    if len(value) > config.max_record_bytes:
        detail = f"record is {len(value)} bytes > {config.max_record_bytes}"
        return ReadLogs(letter=DeadLetter(DeadLetterReason.RECORD_TOO_LARGE, detail))
    try:
        return ReadLogs(logs=decode_logs(value, config.encoding))
    except LogDecodeError as exc:
        return ReadLogs(letter=DeadLetter(DeadLetterReason.DECODE_ERROR, str(exc)[:300]))
