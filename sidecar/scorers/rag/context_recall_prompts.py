"""Prompts of the context-recall scorer (after Mastra's, in our words, with traced content quoted as untrusted)."""

from __future__ import annotations

from sidecar.scorers.rag.rag_common import create_claim_extraction_prompt, numbered
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_attribution_prompt", "create_extract_prompt", "create_reason_prompt"]

INSTRUCTIONS = f"""You judge retrieval for an AI system: how much of a reference answer the retrieved context \
covers.

How you work:
- First you list the claims of the reference answer.
- Then you decide, for each claim, whether the retrieved context contains the information it states, so that an
  answer could have been written from the context alone.
- A claim is attributable ("yes") when the context states it or clearly implies it; otherwise it is "no".
- Use only the context: what you know yourself does not count.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_extract_prompt(*, ground_truth: str) -> str:
    return create_claim_extraction_prompt(text=ground_truth, label="reference_answer", source="reference answer")


def create_attribution_prompt(*, claims: tuple[str, ...], context: tuple[str, ...]) -> str:
    return "\n\n".join(
        [
            "Decide for each claim of the reference answer below whether the retrieved context holds the "
            "information it states.",
            f"Claims ({len(claims)}):\n" + quote_untrusted("claims", numbered(claims)),
            "Retrieved context:\n" + quote_untrusted("context", "\n".join(context)),
            "Verdicts:\n"
            '- "yes": the context states the claim or clearly implies it;\n'
            '- "no": the context lacks the information, or only part of it.',
            f"Give exactly one verdict per claim ({len(claims)} in all), in the order of the claims, each with a "
            "short reason pointing at the part of the context it rests on (or saying what is missing).",
            'Reply with a JSON object: {"verdicts": [{"verdict": "yes" | "no", "reason": "why"}]}',
        ]
    )


def create_reason_prompt(
    *,
    ground_truth: str,
    context: tuple[str, ...],
    score: float,
    scale: float,
    verdicts_json: str,
) -> str:
    return "\n\n".join(
        [
            f"Explain a context recall score, on a scale from 0 to {js_number(scale)}: the share of the reference "
            "answer's claims that the retrieved context covers.",
            "Reference answer:\n" + quote_untrusted("reference_answer", ground_truth),
            "Retrieved context:\n" + quote_untrusted("context", "\n".join(context)),
            f"Score: {js_number(score)}",
            "Verdicts, one per claim (yes: covered by the context; no: not covered):\n"
            + quote_untrusted("verdicts", verdicts_json),
            "Rules:\n"
            "- explain the score from the covered claims against all claims; do not recompute it;\n"
            "- name what the context covers and what it misses;\n"
            "- one or two sentences.",
            f'Reply in plain text, starting with "The score is {js_number(score)} because".',
        ]
    )
