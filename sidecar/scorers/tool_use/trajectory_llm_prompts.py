"""Prompts of the LLM trajectory scorer (after Mastra's, in our words, traced content quoted)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_analyze_prompt", "create_reason_prompt"]

INSTRUCTIONS = f"""You judge the path an AI agent took to fulfil a request: the sequence of its actions (tool calls
and other steps), not only its final answer.

How you judge:
- Look at each step and at the sequence as a whole.
- A good path is complete, efficient and logical: every step it needs, no redundant or unneeded step, and
  steps that depend on others come after them.
- A redundant step lowers the quality of a path even when the final answer is right.
- A missing critical step is a serious fault.

Answer with the JSON object you are asked for, nothing else. Keep each reasoning short and specific.

{UNTRUSTED_CONTENT_NOTICE}"""

_WITH_EXPECTED = """Judge the path against the expected one:
1. Presence: did the agent take every expected step?
2. Order: were the steps in a sensible order? The expected order is a guide, not a rule.
3. Extra steps: which steps did the agent take that the expected path does not need?
4. Missing steps: which expected steps are absent from what the agent did?
5. Quality: was each step that matches an expected one carried out properly?
For every step the agent took, decide whether it matches an expected step, whether it was necessary, and
whether it was in the right place in the sequence."""

_WITHOUT_EXPECTED = """No expected path is given: judge the path by the task itself.
1. Completeness: did the agent take every step the request needs?
2. Efficiency: were any steps redundant or unneeded?
3. Order: were the steps in a sensible order given what depends on what?
4. Appropriateness: did each step suit the task?"""


def create_analyze_prompt(
    *, user_input: str, agent_response: str, actual_trajectory: str, expected_trajectory: str | None
) -> str:
    blocks = [
        "Judge whether the agent took a suitable sequence of actions for this request.",
        "The user's request:\n" + quote_untrusted("user_request", user_input),
        "The agent's final answer:\n" + quote_untrusted("agent_response", agent_response),
        "The steps the agent took, in order:\n"
        + quote_untrusted("trajectory", actual_trajectory or "(no steps were taken)"),
    ]
    if expected_trajectory:
        blocks.append("The expected steps (the ideal path):\n" + expected_trajectory)
        blocks.append(_WITH_EXPECTED)
    else:
        blocks.append(_WITHOUT_EXPECTED)
    blocks.append(
        'Report one entry in "stepEvaluations" per step the agent took, in order: "wasNecessary" (the task '
        'needed this step) and "wasInOrder" (it sits in a sensible place in the sequence). List the steps '
        'that should have been taken but were not under "missingSteps", and the unneeded or redundant ones '
        'under "extraSteps" (empty lists when none).\n\n'
        "Answer with this JSON object:\n"
        "{\n"
        '  "stepEvaluations": [{"stepName": "step name", "wasNecessary": true or false, '
        '"wasInOrder": true or false, "reasoning": "why"}],\n'
        '  "missingSteps": ["step name"],\n'
        '  "extraSteps": ["step name"],\n'
        '  "overallAssessment": "a short overall judgement of the path"\n'
        "}"
    )
    return "\n\n".join(blocks)


def create_reason_prompt(
    *,
    user_input: str,
    score: float,
    scale: float = 1,
    step_evaluations: Sequence[dict[str, Any]],
    missing_steps: Sequence[str],
    extra_steps: Sequence[str],
) -> str:
    blocks = [
        "In one sentence, explain why the agent's path got this score.",
        "The user's request:\n" + quote_untrusted("user_request", user_input),
        f"Score: {js_number(score)} out of {js_number(scale)}",
        "The judgement of each step:\n"
        + quote_untrusted("step_evaluations", json.dumps(list(step_evaluations), ensure_ascii=False)),
        "Missing steps:\n" + quote_untrusted("missing_steps", json.dumps(list(missing_steps), ensure_ascii=False)),
        "Extra or unneeded steps:\n"
        + quote_untrusted("extra_steps", json.dumps(list(extra_steps), ensure_ascii=False)),
        "Use the score as given; do not recompute it. Answer with the one sentence only.",
    ]
    return "\n\n".join(blocks)
