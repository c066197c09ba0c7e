"""Prompts of the LLM tool-call-accuracy scorer (after Mastra's, in our words, traced content quoted)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, js_number, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_analyze_prompt", "create_reason_prompt"]

INSTRUCTIONS = f"""You judge whether an AI agent chose the right tools for what its user explicitly asked.

How you judge:
- Work out what the user actually asked for, literally.
- Judge every tool call on its own: it is appropriate only when it directly serves that explicit request.
- A call that is merely related, or "might help", but was not needed for what was asked is inappropriate.
- Name the tools the agent should have called but did not (missing tools).
- When the agent called no tools, judge that decision: asking a clarifying question about a vague request
  is good judgement (no missing tools); answering a clear, specific request without the tool that serves
  it, or stalling on a request that was already specific enough, is not (name the missing tools).

Answer with the JSON object you are asked for, nothing else. Keep each reasoning short and specific.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_analyze_prompt(
    *, user_input: str, agent_response: str, tools_called: Sequence[str], available_tools: str
) -> str:
    called = "\n".join(f"{i}. {name}" for i, name in enumerate(tools_called, start=1)) or "(no tools were called)"
    blocks = [
        "Judge the tool choices the agent made for this request.",
        "The user's request:\n" + quote_untrusted("user_request", user_input),
        "The agent's final answer:\n" + quote_untrusted("agent_response", agent_response),
        "The tool calls the agent made, in order:\n" + quote_untrusted("tool_calls", called),
        "The tools the agent could call (id: what it does):\n" + (available_tools or "(not provided)"),
        "What to report:\n"
        '- When tools were called: one entry in "evaluations" per call listed above, in the same order '
        '(a tool called twice gets two entries), with "wasAppropriate" true only if that call directly '
        "serves what the user explicitly asked.\n"
        '- When no tools were called: leave "evaluations" empty and decide whether that was right. A '
        "clarifying question about a vague request was right; a generic answer, or a delay, where a listed "
        "tool would have answered a specific request was not.\n"
        '- In both cases, list under "missingTools" the tools that should have been called and were not '
        "(an empty list when none).",
        "Answer with this JSON object:\n"
        "{\n"
        '  "evaluations": [{"toolCalled": "tool name", "wasAppropriate": true or false, "reasoning": "why"}],\n'
        '  "missingTools": ["tool name"]\n'
        "}",
    ]
    return "\n\n".join(blocks)


def create_reason_prompt(
    *,
    user_input: str,
    score: float,
    scale: float = 1,
    evaluations: Sequence[dict[str, Any]],
    missing_tools: Sequence[str],
) -> str:
    verdicts = json.dumps(list(evaluations), ensure_ascii=False)
    blocks = [
        "In one sentence, explain why the agent's tool selection got this score.",
        "The user's request:\n" + quote_untrusted("user_request", user_input),
        f"Score: {js_number(score)} out of {js_number(scale)}",
        "The judgement of each tool call:\n" + quote_untrusted("tool_evaluations", verdicts),
        "Tools that were missing:\n" + quote_untrusted("missing_tools", json.dumps(list(missing_tools))),
        "Use the score as given; do not recompute it. Answer with the one sentence only.",
    ]
    return "\n\n".join(blocks)
