"""What the LLM-judged scorers share: their options' and judge outputs' model bases, the verdict
vocabularies, and the JavaScript semantics their formulas depend on (truthiness, ``JSON.stringify``).

Mastra's schemas type every verdict as a free string and its formulas compare ``verdict.trim().toLowerCase()``
with ``'yes'`` (or ``'unsure'``). We keep that leniency (``" Yes"`` counts as yes) but nothing else: a verdict
outside the vocabulary is a format error, so the judge gets its one fallback attempt instead of the verdict
silently counting as "no".
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["JudgeOutput", "ScorerOptions", "YesNo", "YesNoUnsure", "js_json", "js_truthy"]


class ScorerOptions(BaseModel):
    """Options of a prebuilt kind: immutable, unknown keys rejected, Mastra's camelCase accepted."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class JudgeOutput(BaseModel):
    """What a prompt step asks the judge for: camelCase on the wire (as in Mastra's schemas), immutable."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


def _trimmed_lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


YesNo = Annotated[Literal["yes", "no"], BeforeValidator(_trimmed_lower)]
YesNoUnsure = Annotated[Literal["yes", "no", "unsure"], BeforeValidator(_trimmed_lower)]


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
