"""Prompts of the knowledge-retention judge (our wording, after DeepEval's knowledge retention and MLflow's
KnowledgeRetention judge: does each reply keep what the user said earlier)."""

from __future__ import annotations

from sidecar.scorers.conversation.transcript import Conversation, render_conversation
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE

__all__ = ["INSTRUCTIONS", "create_analyze_prompt"]

INSTRUCTIONS = f"""You check whether an AI agent remembers what its user told it earlier in a conversation.

How you judge each of the agent's replies after the first turn:
- What counts is information the user gave in earlier turns: names, numbers, dates, places, preferences, \
constraints, decisions, the details of their problem. What the agent said does not count.
- "retained": the reply uses that information where it matters, or nothing said earlier matters for this \
turn (not every reply must mention earlier facts).
- "forgot": the reply asks again for something the user already gave, or ignores an earlier fact or \
constraint it needed (for example suggests what the user ruled out).
- "contradicted": the reply contradicts or distorts what the user said (a wrong name, date or amount, a \
preference reversed).
- Judge each reply with what the user said before it, from the transcript only.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_analyze_prompt(conversation: Conversation) -> str:
    count = len(conversation.turns)
    blocks = [
        f"The conversation ({count} turns, in order):",
        render_conversation(conversation),
        f"Judge the agent's reply (its answer and its tool calls) in each turn from 2 to {count}: give "
        '"verdict" ("retained", "forgot" or "contradicted"), "earlier": what the user said earlier that matters '
        'for this reply, with its turn ("" when nothing does), and "reason": one short sentence.',
        f"Answer with this JSON object, one entry per turn from 2 to {count}:\n"
        '{"turns": [{"turn": 2, "verdict": "retained", "earlier": "turn 1: order number 1234", "reason": "why"}]}',
    ]
    return "\n\n".join(blocks)
