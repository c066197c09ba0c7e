"""Pieces the judged RAG scorers share: verdict vocabularies, claim extraction, a version per options.

Faithfulness, hallucination and context recall all start the way Mastra's do: the judge breaks a text
into atomic claims (``{"claims": [...]}``), then gives one verdict per claim. The verdict words are the
vocabulary each formula counts, so the schemas accept only those words (case and surrounding spaces
ignored, as Mastra's ``verdict.toLowerCase().trim()`` does): any other word is a format error, which
gets the judge one fallback attempt, never a silently uncounted verdict.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scoring.prompting import quote_untrusted

__all__ = [
    "ExtractedClaims",
    "JudgeOutput",
    "UnitScore",
    "YesNo",
    "YesNoUnsure",
    "create_claim_extraction_prompt",
    "numbered",
    "options_version",
]


def _normalised_word(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


YesNo = Annotated[Literal["yes", "no"], BeforeValidator(_normalised_word)]
YesNoUnsure = Annotated[Literal["yes", "no", "unsure"], BeforeValidator(_normalised_word)]


def _unit_interval(value: float) -> float:
    # Checked here rather than as JSON-schema bounds: some providers reject minimum/maximum in schemas.
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


UnitScore = Annotated[float, AfterValidator(_unit_interval)]


class JudgeOutput(BaseModel):
    """Base of the judge's structured outputs: immutable, camelCase on the wire, extra keys ignored."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ExtractedClaims(JudgeOutput):
    claims: tuple[str, ...]


def numbered(items: tuple[str, ...] | list[str]) -> str:
    """``1. first`` one per line: the judge can refer to items by number."""
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, start=1)) or "(none)"


def create_claim_extraction_prompt(*, text: str, label: str, source: str) -> str:
    """Ask for the claims of ``text`` (quoted as untrusted ``label``): every assertion, one per entry."""
    return "\n\n".join(
        [
            f"Break the {source} below into the individual claims it makes.",
            "A claim is one assertion of information: a fact, a number or date, a relation between "
            "entities, a prediction, an opinion stated as true, or a hedged assertion (with may, might, "
            "could, possibly). Questions and commands are not claims.",
            "How to split:\n"
            "- split sentences that assert several things into one claim each;\n"
            "- make every claim understandable on its own: replace pronouns by what they refer to;\n"
            "- keep numbers, dates, quantities and qualifiers (approximately, exactly, about) as written;\n"
            "- keep hedged claims, with their hedge.",
            'For instance, "Acme opened in 1990 and employs about 40 people; it may move next year" gives '
            '"Acme opened in 1990", "Acme employs about 40 people" and "Acme may move next year".',
            f"{source[0].upper()}{source[1:]}:\n" + quote_untrusted(label, text),
            f'If the {source} is empty or makes no claim, reply with {{"claims": []}}.',
            'Reply with a JSON object: {"claims": ["first claim", "second claim", ...]}',
        ]
    )


def options_version(options: BaseModel) -> str:
    """A scorer version that changes with the options: other options, other score ids."""
    return "1:" + hashlib.sha256(options.model_dump_json().encode()).hexdigest()[:12]
