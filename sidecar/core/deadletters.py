"""Why a record or span was set aside on the dead-letter topic (the ``x-dead-letter-reason`` header)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DeadLetterReason"]


class DeadLetterReason(StrEnum):
    DECODE_ERROR = "decode_error"  # the record is not OTLP in the configured encoding
    RECORD_TOO_LARGE = "record_too_large"  # the record exceeds max_record_bytes; not decoded
    INVALID_SPAN = "invalid_span"  # a selected span with malformed ids
    TOO_LARGE = "too_large"  # a selected span over max_input_bytes: reported, never scored as 0
    UNMAPPABLE = "unmappable"  # a selected span whose messages cannot be parsed
    INTERNAL_ERROR = "internal_error"  # a bug met this record; it is set aside so the partition moves on
    INVALID_FEEDBACK = "invalid_feedback"  # a feedback record that cannot be read or joined (docs/feedback.md)
