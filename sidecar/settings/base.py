"""What every settings block shares: the frozen base, the small validators, the redaction of secrets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr
from pydantic_core import PydanticCustomError

from sidecar.core.config import FrozenConfig, empty_is_unset

__all__ = ["REDACTED", "redact"]

REDACTED = "**********"

# The settings' own names for the shared base (sidecar.core.config: exporters declare blocks on it too).
_Frozen = FrozenConfig
_empty_is_unset = empty_is_unset


def _non_empty(value: tuple[Any, ...]) -> tuple[Any, ...]:
    # After item validation (a min_length constraint would also fire when an item fails).
    if not value:
        raise PydanticCustomError("settings", "{detail}", {"detail": "must list at least one item"})
    return value


def redact(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [redact(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    return value
