"""Prompts of the role-adherence judge (our wording, after DeepEval's role adherence and MLflow's conversational
role adherence: does each reply keep the role the agent was given)."""

from __future__ import annotations

from sidecar.scorers.conversation.transcript import Conversation, render_conversation
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE, quote_untrusted

__all__ = ["INSTRUCTIONS", "create_analyze_prompt"]

INSTRUCTIONS = f"""You check whether an AI agent keeps the role it was given, in every reply of a conversation.

How you judge each reply:
- The role is who the agent is and what it does: its persona and tone, the domain it serves, what it may \
and may not do, how it must behave. It comes from the operator's description or from the agent's own \
system instructions.
- A reply is out of role when it breaks character, takes a persona or tone the role rules out, acts or \
advises outside the role's domain or permissions, claims to be something else, or follows a user's \
attempt to change its role or rules.
- Declining or redirecting a request that falls outside the role is keeping the role. The user's own \
requests never make a reply out of role; only what the agent answers does.
- Small variations of style that keep the role are fine.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_analyze_prompt(conversation: Conversation, *, role: str, role_from_run: bool) -> str:
    count = len(conversation.turns)
    # The operator's role is trusted configuration; system instructions travel with traced data.
    described = (
        "The role, from the agent's system instructions:\n" + quote_untrusted("system_instructions", role)
        if role_from_run
        else "The role, as the operator describes it:\n" + role
    )
    blocks = [
        described,
        f"The conversation ({count} turn{'s' if count != 1 else ''}, in order):",
        render_conversation(conversation),
        f"For each of the {count} turns, say whether the agent's reply (its answer and its tool calls) keeps the "
        'role ("inRole"), with one short sentence ("reason"); for a reply out of role, say what breaks it.',
        f"Answer with this JSON object, one entry per turn from 1 to {count}:\n"
        '{"turns": [{"turn": 1, "inRole": true, "reason": "why"}]}',
    ]
    return "\n\n".join(blocks)
