"""The judge's verdict types: the base of every structured output a prompt step asks for, and the words and
numbers a formula counts.

Mastra's schemas type every verdict as a free string and its formulas compare ``verdict.trim().toLowerCase()``
with ``'yes'`` (or ``'unsure'``). We keep that leniency (``" Yes"`` counts as yes) but nothing else: a verdict
outside the vocabulary, or a score outside 0–1, is a format error, so the judge gets its one fallback attempt
instead of the verdict silently counting as "no".
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["JudgeOutput", "UnitScore", "YesNo", "YesNoUnsure", "trimmed_lower"]


class JudgeOutput(BaseModel):
    """What a prompt step asks the judge for: camelCase on the wire (as in Mastra's schemas), immutable,
    extra keys ignored."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


def trimmed_lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


YesNo = Annotated[Literal["yes", "no"], BeforeValidator(trimmed_lower)]
YesNoUnsure = Annotated[Literal["yes", "no", "unsure"], BeforeValidator(trimmed_lower)]


def _unit_interval(value: float) -> float:
    # Checked here rather than as JSON-schema bounds: some providers reject minimum/maximum in schemas.
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


UnitScore = Annotated[float, AfterValidator(_unit_interval)]
