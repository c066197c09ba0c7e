"""Prompts of the user-frustration judge (our wording, after MLflow's UserFrustration judge: did the user become
frustrated, and did the conversation end with the user satisfied)."""

from __future__ import annotations

from sidecar.scorers.conversation.transcript import Conversation, render_conversation
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE

__all__ = ["INSTRUCTIONS", "create_analyze_prompt"]

INSTRUCTIONS = f"""You read a whole conversation between a user and an AI agent and follow the user's mood: in \
which of their messages the user shows frustration, and whether they end the conversation satisfied.

How you judge:
- Frustration is what the user's own words show: annoyance, impatience, complaints about the agent ("you \
already asked me that", "this is useless", "that is not what I asked"), repeating a request because it was \
ignored, sarcasm, threats to leave or to escalate, capitals or exclamation marks used in anger. A neutral \
correction or a plain follow-up question is not frustration.
- Judge each user message on its own, in the context of what came before it.
- The user ends satisfied only when their own last messages say so or clearly imply it (thanks for a solved \
problem, relief, acceptance of the outcome). A polite or helpful last answer from the agent does not make \
the user satisfied; a user who simply stops writing has not said they are.
- Judge only what the transcript shows; assume nothing about the user beyond it.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_analyze_prompt(conversation: Conversation) -> str:
    count = len(conversation.turns)
    blocks = [
        f"The conversation ({count} turn{'s' if count != 1 else ''}, in order):",
        render_conversation(conversation),
        f"For each of the {count} turns, say whether the user's message in that turn shows frustration, with the "
        'words that show it ("evidence": a short quote, or "" when there is none). Then say whether the user ends '
        'the conversation satisfied ("endedSatisfied").',
        "Answer with this JSON object, one entry per turn from 1 to "
        f"{count}:\n"
        '{"turns": [{"turn": 1, "frustrated": false, "evidence": ""}], "endedSatisfied": true}',
    ]
    return "\n\n".join(blocks)
