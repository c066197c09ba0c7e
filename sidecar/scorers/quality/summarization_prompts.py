"""Prompts of the summarization scorer (our wording; what the judge must produce follows Mastra's).

The coverage prompt never carries the source text: the judge must answer each question from the summary
alone, or it could answer from information the summary left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_coverage_prompt", "create_reason_prompt", "create_source_judgement_prompt"]

INSTRUCTIONS = f"""You assess summaries on two counts: whether every claim a summary makes is supported by the \
text it summarises, and whether the summary keeps the information that text states. Judge strictly from the \
texts you are given, never from your own knowledge.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_source_judgement_prompt(*, source: str, summary: str, max_questions: int) -> str:
    return f"""Compare a summary with its source text, in two parts.

First, the claims. Split the summary into its individual factual claims. For each claim, decide whether the \
source supports it: "supported" is true only when the source states it or plainly implies it; it is false when \
the source contradicts the claim or says nothing about it. Give a short reason for each. A summary that makes no \
claims (an empty one, say) has an empty list of claims.

Then, the questions. Write at most {max_questions} closed questions that the source answers with "yes" and \
that together cover its most important information (who, what, when, where, how many). Each question must be \
answerable from the source alone. A source that states nothing gives no questions.

The source text:
{quote_untrusted("source", source)}

The summary:
{quote_untrusted("summary", summary)}

Answer with a JSON object: {{"alignment": [{{"claim": "a claim of the summary", "supported": true | false, \
"reason": "why"}}], "questions": ["a question about the source"]}}"""


def create_coverage_prompt(*, summary: str, questions: Sequence[str]) -> str:
    listed = "\n".join(f"{i}. {question}" for i, question in enumerate(questions, 1))
    return f"""For each question below, decide whether the summary alone answers it. "answered" is true only when \
the summary itself states the information the question asks about; do not use anything you know from elsewhere, \
and do not guess. Give one verdict per question, in the order given ({len(questions)} in all), repeating the \
question, with a short reason.

The summary:
{quote_untrusted("summary", summary)}

The questions ({len(questions)}):
{quote_untrusted("questions", listed)}

Answer with a JSON object: {{"coverage": [{{"question": "the question", "answered": true | false, \
"reason": "why"}}]}}"""


def create_reason_prompt(
    *,
    source: str,
    summary: str,
    score: float,
    scale: float,
    alignment_score: float,
    coverage_score: float,
    unsupported_claims: Sequence[str],
    missing_questions: Sequence[str],
) -> str:
    unsupported = "\n".join(f"- {claim}" for claim in unsupported_claims) or "(none)"
    missing = "\n".join(f"- {question}" for question in missing_questions) or "(none)"
    return f"""Explain a summarization score of {js_number(score)} out of {js_number(scale)}. The score is the \
lower of two measures, so the weaker one sets it:
- alignment {js_number(alignment_score)}: the share of the summary's claims that the source supports;
- coverage {js_number(coverage_score)}: the share of the source's key questions that the summary answers.

The source text:
{quote_untrusted("source", source)}

The summary:
{quote_untrusted("summary", summary)}

Claims of the summary the source does not support:
{quote_untrusted("unsupported_claims", unsupported)}

Questions about the source the summary leaves unanswered:
{quote_untrusted("missing_questions", missing)}

Say which measure set the score and why, naming the unsupported claims or the missing information. Use the given \
numbers; do not recompute them. Be concise.

Write one or two sentences beginning "The score is {js_number(score)} because"."""
