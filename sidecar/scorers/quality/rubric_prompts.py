"""Prompts of the rubric scorer (our wording; what the judge must produce follows Mastra's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, quote_untrusted

__all__ = ["INSTRUCTIONS", "NO_RUBRIC_PROMPT", "CriterionToGrade", "create_analyze_prompt"]

INSTRUCTIONS = f"""You grade an agent's output against a rubric: a checklist of criteria the output must meet.

How to grade:
- Decide each criterion on its own; one verdict must not sway another.
- A criterion is satisfied only when the output clearly and completely meets it. If in doubt, it is not \
satisfied.
- Rely on what the output actually contains (the task is there for context). Assume nothing that is not there.
- Give no credit for effort, intentions or partial progress.
- Keep each reasoning short and specific: what is there, or what is missing.

{UNTRUSTED_CONTENT_NOTICE}"""

# No rubric resolved: the judge is asked for an empty grading (Mastra still makes this call).
NO_RUBRIC_PROMPT = (
    "There is no rubric to grade against this time. Reply with exactly this JSON object and nothing else: "
    '{"criteria": [], "overallAssessment": "Nothing to grade: no rubric was given."}'
)


@dataclass(frozen=True, slots=True)
class CriterionToGrade:
    text: str
    required: bool


def create_analyze_prompt(
    *, task: str, output: str, criteria: Sequence[CriterionToGrade], criteria_from_run: bool
) -> str:
    listed = "\n".join(f"{i}. [{'required' if c.required else 'optional'}] {c.text}" for i, c in enumerate(criteria, 1))
    # A rubric from the configuration is the operator's; one carried by the run travels with traced data.
    rubric = quote_untrusted("rubric", listed) if criteria_from_run else listed
    return f"""Grade the agent's output against each criterion of the rubric below.

The task the agent was given:
{quote_untrusted("task", task or "(no task given)")}

The rubric ({len(criteria)} criteria; "required" ones decide whether the task is complete, "optional" ones \
are graded and reported only):
{rubric}

The agent's output:
{quote_untrusted("agent_output", output or "(the output is empty)")}

Give one verdict per criterion, in the order listed: {len(criteria)} in all. Copy each criterion's text and its \
required flag unchanged.

Answer with a JSON object: {{"criteria": [{{"criterion": "the criterion's text", "satisfied": true | false, \
"required": true | false, "reasoning": "what is there or missing"}}], "overallAssessment": "one or two sentences \
on what passed and what is missing"}}"""
