"""Prompts of the faithfulness scorer (after Mastra's, in our words, with traced content quoted as untrusted)."""

from __future__ import annotations

from sidecar.scorers.rag.rag_common import create_claim_extraction_prompt, create_claims_reason_prompt, numbered
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_analyze_prompt", "create_extract_prompt", "create_reason_prompt"]

INSTRUCTIONS = f"""You check whether what an AI system said is backed by the context it was given.

How you work:
- First you list the claims of the system's answer, factual and hedged alike; an empty answer has none.
- Then you check each claim against the context, and only the context: what you know yourself does not count.
- A claim the context states or directly implies is supported ("yes").
- A claim the context directly contradicts is "no".
- A claim the context does not mention, cannot settle, or that is hedged (may, might, possibly) is "unsure".
- You judge factual consistency with the context, not whether the answer is relevant or complete.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_extract_prompt(*, output: str) -> str:
    return create_claim_extraction_prompt(text=output, label="response", source="response")


def create_analyze_prompt(*, claims: tuple[str, ...], context: tuple[str, ...]) -> str:
    return "\n\n".join(
        [
            "Check each claim below against the context: is it supported by the context, contradicted by it, "
            "or neither?",
            "Context:\n" + quote_untrusted("context", "\n".join(context)),
            f"Claims ({len(claims)}):\n" + quote_untrusted("claims", numbered(claims)),
            "Verdicts:\n"
            '- "yes": the context states the claim or clearly implies it;\n'
            '- "no": the context says the opposite (only a direct contradiction is a "no");\n'
            '- "unsure": the context does not mention it or cannot settle it, or the claim is hedged '
            "(may, might, possibly).\n"
            "Use nothing but the context; give one verdict per claim, in the order of the claims, with a short "
            "reason that points at the part of the context it rests on.",
            f"There are {len(claims)} claims: give exactly {len(claims)} verdicts (none when there are no claims).",
            'Reply with a JSON object: {"verdicts": [{"claim": "the claim", "verdict": "yes" | "no" | "unsure", '
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
            f"Explain a faithfulness score, on a scale from 0 to {js_number(scale)}, of an AI system's answer: "
            "the share of the answer's claims that the context supports."
        ),
        legend="yes: supported; no: contradicted; unsure: not in the context",
        explain="explain the score from the supported claims against all claims; do not recompute it",
        name="name what the context supports and what it contradicts or leaves open",
        length="one or two sentences, professional in tone",
        input=input,
        output=output,
        context=context,
        score=score,
        verdicts_json=verdicts_json,
    )
