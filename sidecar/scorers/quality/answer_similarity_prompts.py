"""Prompts of the answer-similarity scorer (our wording; what the judge must produce follows Mastra's)."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = [
    "INSTRUCTIONS",
    "NO_GROUND_TRUTH_REASON_PROMPT",
    "create_analyze_prompt",
    "create_extract_prompt",
    "create_reason_prompt",
]

INSTRUCTIONS = f"""You compare an agent's answer with a ground-truth answer, for regression tests that must \
catch answers drifting from what is expected.

How to compare:
- Look for the same information, not the same words: different phrasings can say the same thing.
- Find what the ground truth says that the answer leaves out.
- Find where the answer contradicts the ground truth.
- Be strict but fair: partial matches earn partial credit.

{UNTRUSTED_CONTENT_NOTICE}"""

# Mastra sends this situation to the judge as the reason step's whole prompt: we ask for the same sentence.
NO_GROUND_TRUTH_REASON_PROMPT = (
    "No ground truth was given to compare the agent's answer with, so its similarity score is 0 by default. "
    'Say so in one sentence that begins "No ground truth was provided".'
)


def create_extract_prompt(*, answer: str, ground_truth: str) -> str:
    return f"""Break each of the two texts below into semantic units: the smallest self-contained pieces of \
information (one fact, one claim, one value with its unit). Keep each unit's meaning whole; do not merge units \
that could be right or wrong independently. An empty text has no units.

The agent's answer:
{quote_untrusted("agent_answer", answer)}

The ground truth:
{quote_untrusted("ground_truth", ground_truth)}

Answer with a JSON object: {{"outputUnits": ["a unit of the answer"], "groundTruthUnits": ["a unit of the \
ground truth"]}}"""


def create_analyze_prompt(*, output_units: Sequence[str], ground_truth_units: Sequence[str]) -> str:
    answer = "\n".join(f"- {unit}" for unit in output_units)
    truth = "\n".join(f"- {unit}" for unit in ground_truth_units)
    return f"""Match the agent's answer against the ground truth, unit by unit.

For every ground-truth unit, in order, find the answer unit that best conveys it and classify the match:
- "exact": the same information, with the same key words or values;
- "semantic": the same meaning, worded differently;
- "partial": only part of the information;
- "missing": no answer unit conveys it (outputUnit is null).

Then list the answer units that add information the ground truth does not contain (extraInOutput), and every \
pair where an answer unit contradicts a ground-truth unit (contradictions), with an explanation.

The answer's units:
{quote_untrusted("answer_units", answer)}

The ground truth's units:
{quote_untrusted("ground_truth_units", truth)}

Answer with a JSON object: {{"matches": [{{"groundTruthUnit": "...", "outputUnit": "..." | null, "matchType": \
"exact" | "semantic" | "partial" | "missing", "explanation": "..."}}], "extraInOutput": ["..."], \
"contradictions": [{{"outputUnit": "...", "groundTruthUnit": "...", "explanation": "..."}}]}}"""


def create_reason_prompt(*, answer: str, ground_truth: str, score: float, scale: float, analysis_json: str) -> str:
    return f"""Explain a similarity score of {js_number(score)}, on a scale from 0 (nothing in common, or \
contradicting) to {js_number(scale)} (the same answer), for the agent's answer below against the ground truth.

The agent's answer:
{quote_untrusted("agent_answer", answer)}

The ground truth:
{quote_untrusted("ground_truth", ground_truth)}

The unit-by-unit comparison:
{quote_untrusted("comparison", analysis_json)}

Say what matched, what is missing, what contradicts the ground truth and what was added, and what would bring \
the answer closer to the ground truth. Use the given score; do not recompute it. Be concise.

Write one or two sentences beginning "The score is {js_number(score)} because"."""
