"""What the output-quality kinds (docs/scorers-quality.md) share besides the verdict types
(``sidecar.scorers.verdicts``): their options' model base, and the JavaScript semantics their formulas
depend on (truthiness, ``JSON.stringify``)."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["ScorerOptions", "js_json", "js_truthy"]


class ScorerOptions(BaseModel):
    """Options of a prebuilt kind: immutable, unknown keys rejected, Mastra's camelCase accepted."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


def js_truthy(value: Any) -> bool:
    """JavaScript's truthiness: ``undefined``, ``null``, ``false``, ``0``, ``NaN`` and ``''`` are falsy;
    every object and array is truthy (even empty ones, unlike Python's ``bool``)."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    if isinstance(value, str):
        return value != ""
    return True


def _plain(value: Any) -> Any:
    # Models by their camelCase names with nulls kept, as JSON.stringify keeps them (to_json_value drops them).
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def js_json(value: Any) -> str:
    """``JSON.stringify(value)``: compact separators, non-ASCII kept as is, nulls kept."""
    return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False)
