"""Prompts of the hallucination scorer (after Mastra's, in our words, with traced content quoted as untrusted)."""

from __future__ import annotations

from sidecar.scorers.rag.rag_common import create_claim_extraction_prompt, create_claims_reason_prompt, numbered
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_analyze_prompt", "create_extract_prompt", "create_reason_prompt"]

INSTRUCTIONS = f"""You find hallucinations: claims in an AI system's answer that its context does not back.

How you work:
- First you list the claims of the answer, factual and hedged alike; an empty answer has none, so no hallucination.
- Then you check each claim against the context, and only the context: what you know yourself does not count.
- A claim is a hallucination when it contradicts the context, or asserts something the context does not support.
- Hedged wording (may, might, possibly) about something the context states is not a hallucination; hedged wording
  about something the context does not state is.
- Not hallucinations: a less precise date than the context's (the year for a month), a reasonable rounding of a
  number, leaving details out without changing what is said.
- Judgements of value ("leading", "pioneering", "made history") are hallucinations unless the context says so.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_extract_prompt(*, output: str) -> str:
    return create_claim_extraction_prompt(text=output, label="response", source="response")


def create_analyze_prompt(*, claims: tuple[str, ...], context: tuple[str, ...]) -> str:
    return "\n\n".join(
        [
            "Decide for each claim below whether it is a hallucination: a claim that contradicts the context, or "
            "that asserts something the context does not support.",
            f"Claims ({len(claims)}):\n" + quote_untrusted("claims", numbered(claims)),
            f"Context ({len(context)} statements):\n" + quote_untrusted("context", "\n".join(context)),
            "Not hallucinations:\n"
            "- a less precise date than the context gives (the year for a month);\n"
            "- a reasonable approximation of a number the context gives;\n"
            "- leaving details out without changing what is said;\n"
            "- hedged wording about facts the context states.\n"
            "Hallucinations:\n"
            "- anything that contradicts the context;\n"
            "- assertions the context does not support, hedged or not;\n"
            "- judgements of value the context does not state.",
            "Verdicts:\n"
            '- "yes": the claim is a hallucination;\n'
            '- "no": the context supports it.\n'
            "Use nothing but the context; give one verdict per claim, in the order of the claims, with a short "
            "reason naming what the context does or does not say.",
            "With no claims, answer with an empty list of verdicts.",
            'Reply with a JSON object: {"verdicts": [{"statement": "the claim", "verdict": "yes" | "no", '
            '"reason": "why"}]}',
        ]
    )


def create_reason_prompt(
    *,
    input: str,
    output: str,
    context: tuple[str, ...],
    score: float,
    scale: float,
    verdicts_json: str,
) -> str:
    return create_claims_reason_prompt(
        task=(
            f"Explain a hallucination score, on a scale from 0 to {js_number(scale)} where higher means more "
            "hallucination, of an AI system's answer: the share of its claims that the context does not back."
        ),
        legend="yes: hallucinated; no: backed by the context",
        explain="explain the score from the hallucinated claims against all claims; do not recompute it",
        name="name what contradicts or goes beyond the context, and what the context backs",
        length="one or two sentences",
        input=input,
        output=output,
        context=context,
        score=score,
        verdicts_json=verdicts_json,
    )
