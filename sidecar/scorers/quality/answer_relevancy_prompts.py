"""Prompts of the answer-relevancy scorer (our wording; what the judge must produce follows Mastra's)."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_extract_prompt", "create_reason_prompt", "create_score_prompt"]

INSTRUCTIONS = f"""You assess answer relevancy: how far each part of a response addresses what the user asked.

What matters:
- Relevance means addressing the question; correctness is not your concern here.
- A response can be relevant in part: some statements answer, others only touch the subject.
- Statements about the kind of information that was asked for are partly relevant.
- Empty content and error messages are never relevant.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_extract_prompt(response: str) -> str:
    return f"""Break the response below into statements, so that each can be judged on its own.

How to split:
- Split a sentence that joins distinct facts or claims (often with "and"), or that piles several descriptions \
onto one subject.
- Do not split more than that: keep information that belongs together in one statement.
- A one-word answer is one statement. An error message is one statement. An empty response has no statements.

For instance, "Sure. The museum opens at nine and closes at five." gives three statements: "Sure.", "The museum \
opens at nine." and "The museum closes at five."

The response:
{quote_untrusted("response", response)}

Answer with a JSON object: {{"statements": ["first statement", "second statement"]}} (an empty list for an \
empty response)."""


def create_score_prompt(question: str, statements: Sequence[str]) -> str:
    numbered = "\n".join(f"{i}. {statement}" for i, statement in enumerate(statements, 1))
    return f"""Judge how relevant each statement is to the user's question. Give exactly one result per statement, \
in the order given: {len(statements)} in all (an empty list when there are no statements).

Results:
- "yes": the statement answers the question directly: it gives the kind of answer asked for (a place for \
"where", a person for "who") or states the relationship the question is about, and could stand alone as an answer.
- "unsure": the statement is partly relevant: it talks about the kind of information asked for, hints at the \
answer without stating it, names related entities or properties of the subject that bear on the question, or \
answers the question wrongly. A wrong answer to the right question is "unsure", never "yes" and never "no".
- "no": the statement has no meaningful connection to what is asked: it is unrelated, empty or meaningless, or \
gives facts about the subject that do not bear on the question (asked "When does the museum open?", "The museum \
has a fine sculpture garden" is "no").

Relevance only: do not judge whether a statement is true. Mentioning the subject is not enough on its own; the \
statement must connect to what the question asks.

The question:
{quote_untrusted("question", question)}

The statements ({len(statements)}):
{quote_untrusted("statements", numbered)}

Answer with a JSON object: {{"results": [{{"result": "yes" | "unsure" | "no", "reason": "why"}}]}}"""


def create_reason_prompt(*, question: str, response: str, score: float, scale: float, results_json: str) -> str:
    return f"""Explain an answer relevancy score of {js_number(score)}, on a scale from 0 (irrelevant) to \
{js_number(scale)} (fully relevant).

The question:
{quote_untrusted("question", question)}

The response:
{quote_untrusted("response", response)}

The verdict on each statement of the response:
{quote_untrusted("verdicts", results_json)}

Rules:
- Use the given score; do not recompute it.
- Explain it from the mix of direct answers and partly relevant context; say what was relevant and what was not.
- Do not judge factual correctness.
- If there were no statements to judge, say why.
- Be concise.

Write one or two sentences beginning "The score is {js_number(score)} because"."""
