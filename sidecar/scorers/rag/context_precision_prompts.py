"""Prompts of the context-precision scorer (after Mastra's, in our words, with traced content quoted as untrusted)."""

from __future__ import annotations

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_analyze_prompt", "create_reason_prompt", "indexed_context"]

INSTRUCTIONS = f"""You judge retrieval for an AI system: which of the context pieces it was given were useful for \
producing its answer to the question.

How you work:
- Judge every piece on its own, in the order given, against the question and the answer together.
- A piece is useful ("yes") when it directly informs or supports what the answer says in reply to the question.
- Being on the same topic is not enough: a piece the answer could do without is "no".
- Empty pieces and error messages are "no".
- Be strict and give a short reason for each verdict.

{UNTRUSTED_CONTENT_NOTICE}"""


def indexed_context(context: tuple[str, ...]) -> str:
    """``[0] first piece`` one per line: the index the judge reports as ``context_index``."""
    return "\n".join(f"[{i}] {piece}" for i, piece in enumerate(context))


def create_analyze_prompt(*, input: str, output: str, context: tuple[str, ...]) -> str:
    return "\n\n".join(
        [
            "Decide, for each numbered context piece below, whether it was useful for producing the answer to "
            "the question.",
            "Question:\n" + quote_untrusted("question", input),
            "Response:\n" + quote_untrusted("response", output),
            f"Context pieces ({len(context)}, numbered from 0 in retrieval order):\n"
            + quote_untrusted("context", indexed_context(context)),
            "Verdicts:\n"
            '- "yes": the piece directly informs or supports the answer to this question;\n'
            '- "no": it does not (unrelated, only loosely related, empty, or an error).',
            f"Give exactly one verdict per piece ({len(context)} in all), with the piece's number as "
            '"context_index" and a short reason quoting the part of the piece that decided it.',
            'Reply with a JSON object: {"verdicts": [{"context_index": 0, "verdict": "yes" | "no", "reason": "why"}]}',
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
    return "\n\n".join(
        [
            f"Explain a context precision score, on a scale from 0 to {js_number(scale)}: the mean average "
            "precision of the retrieved context pieces, which is high when the useful pieces come first.",
            "Question:\n" + quote_untrusted("question", input),
            "Response:\n" + quote_untrusted("response", output),
            "Context pieces, in retrieval order:\n" + quote_untrusted("context", indexed_context(context)),
            f"Score: {js_number(score)}",
            "Verdicts (yes: useful; no: not useful):\n" + quote_untrusted("verdicts", verdicts_json),
            "Rules:\n"
            "- explain the score from how many pieces were useful and where they stand in the order; do not "
            "recompute it;\n"
            "- say which pieces helped and which did not;\n"
            "- one or two sentences.",
            f'Reply in plain text, starting with "The score is {js_number(score)} because".',
        ]
    )
