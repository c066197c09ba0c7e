"""What the judged RAG kinds (docs/scorers-context.md) share besides the verdict types
(``sidecar.scorers.verdicts``): claim extraction, numbered lists, a version per options.

Faithfulness, hallucination and context recall all start the way Mastra's do: the judge breaks a text
into atomic claims (``{"claims": [...]}``), then gives one verdict per claim.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel

from sidecar.scorers.verdicts import JudgeOutput
from sidecar.scoring.prompting import js_number, quote_untrusted

__all__ = [
    "ExtractedClaims",
    "create_claim_extraction_prompt",
    "create_claims_reason_prompt",
    "numbered",
    "options_version",
]


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


def create_claims_reason_prompt(
    *,
    task: str,
    legend: str,
    explain: str,
    name: str,
    length: str,
    input: str,
    output: str,
    context: tuple[str, ...],
    score: float,
    verdicts_json: str,
) -> str:
    """Ask for the reason of a score over the answer's claims judged against the context (faithfulness,
    hallucination): ``task`` says what the score measures, ``legend`` what each verdict means; the rules say how
    to ``explain`` the score, what to ``name``, to rely on the verdicts and the context only, and the reason's
    ``length``."""
    rules = (explain, name, "rely on the verdicts and the context, never on your own knowledge", length)
    return "\n\n".join(
        [
            task,
            "Context:\n" + quote_untrusted("context", "\n".join(context)),
            "Question:\n" + quote_untrusted("question", input),
            "Response:\n" + quote_untrusted("response", output),
            f"Score: {js_number(score)}",
            f"Verdicts, one per claim ({legend}):\n" + quote_untrusted("verdicts", verdicts_json),
            "Rules:\n" + ";\n".join(f"- {rule}" for rule in rules) + ".",
            f'Reply in plain text, starting with "The score is {js_number(score)} because".',
        ]
    )


def options_version(options: BaseModel) -> str:
    """A scorer version that changes with the options: other options, other score ids."""
    return "1:" + hashlib.sha256(options.model_dump_json().encode()).hexdigest()[:12]
