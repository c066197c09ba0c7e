"""Which producer errors mean the broker will never take a record as sent (its size, its topic): resending it
would block every later commit forever, so whoever sends sets it aside, counted, instead. Any other error (the
broker unreachable, a leader moving) is worth another try."""

from __future__ import annotations

from typing import Final

from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

__all__ = ["PERMANENT_ERRORS"]

PERMANENT_ERRORS: Final[tuple[type[BaseException], ...]] = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    RecordListTooLargeError,
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
)
