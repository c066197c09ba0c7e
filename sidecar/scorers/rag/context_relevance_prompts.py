"""Prompts of the context-relevance scorer (after Mastra's, in our words, with traced content quoted as untrusted)."""

from __future__ import annotations

from sidecar.scorers.rag.context_precision_prompts import indexed_context
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = [
    "INSTRUCTIONS",
    "NO_CONTEXT_PLACEHOLDER",
    "create_analyze_prompt",
    "create_no_context_reason_prompt",
    "create_reason_prompt",
]

# What the judge is shown in place of an empty retrieval (the score is then fixed, see the scorer).
NO_CONTEXT_PLACEHOLDER = "[No context was provided for evaluation]"

INSTRUCTIONS = f"""You judge the context an AI system was given for answering a question: how relevant each \
piece was to the question, whether the answer made use of it, and what context was missing.

Relevance levels:
- "high": the piece bears directly on the question and holds information needed to answer it;
- "medium": it is related and useful, but not essential;
- "low": it touches the topic but adds little to an answer;
- "none": it is unrelated to the question.

A piece "was used" when the answer relies on its information, stated or paraphrased.
Missing context is information an accurate, complete answer would have needed that no piece provides.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_analyze_prompt(*, user_query: str, agent_response: str, context: tuple[str, ...]) -> str:
    return "\n\n".join(
        [
            "Assess how relevant and useful each numbered context piece below was for answering the question, and "
            "whether the answer used it.",
            "Question:\n" + quote_untrusted("question", user_query),
            "Response:\n" + quote_untrusted("response", agent_response),
            f"Context pieces ({len(context)}, numbered from 0):\n"
            + quote_untrusted("context", indexed_context(context)),
            'For every piece give: its number as "context_index", the piece itself as "contextPiece", a '
            '"relevanceLevel" (high, medium, low or none), "wasUsed" (true when the answer relies on it), and '
            'your "reasoning".',
            'Then list under "missingContext" what information the answer would have needed that no piece gives '
            '(an empty list when nothing is missing), and sum up under "overallAssessment".',
            'Reply with a JSON object: {"evaluations": [{"context_index": 0, "contextPiece": "...", '
            '"relevanceLevel": "high" | "medium" | "low" | "none", "wasUsed": true, "reasoning": "..."}], '
            '"missingContext": ["..."], "overallAssessment": "..."}',
        ]
    )


def create_reason_prompt(
    *,
    user_query: str,
    score: float,
    scale: float,
    evaluations_json: str,
    missing_context: tuple[str, ...],
) -> str:
    missing = "\n".join(f"- {item}" for item in missing_context) or "(none)"
    return "\n\n".join(
        [
            f"Explain a context relevance score, on a scale from 0 to {js_number(scale)}: how relevant and useful "
            "the context an AI system was given was for answering the question.",
            "Question:\n" + quote_untrusted("question", user_query),
            f"Score: {js_number(score)}",
            "Per-piece evaluations:\n" + quote_untrusted("evaluations", evaluations_json),
            "Missing context:\n" + quote_untrusted("missing_context", missing),
            "How the score is made: the mean of the pieces' relevance weights (high 1, medium 0.7, low 0.3, "
            "none 0), less a penalty for each highly relevant piece the answer did not use and for each item of "
            "missing context.",
            "Rules:\n"
            "- explain the score from the relevance levels, the unused relevant pieces and the missing context; "
            "do not recompute it;\n"
            "- one or two sentences.",
            f'Reply in plain text, starting with "The score is {js_number(score)} because".',
        ]
    )


def create_no_context_reason_prompt(*, score: float) -> str:
    return (
        "An AI system answered without any retrieved context, so there was no context to judge; such a run gets "
        f"the score {js_number(score)} by rule.\n\n"
        f'State this in one sentence of plain text, starting with "The score is {js_number(score)} because".'
    )
