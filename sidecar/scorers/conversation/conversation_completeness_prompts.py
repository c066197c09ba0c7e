"""Prompts of the conversation-completeness judge (our wording, after DeepEval's conversation completeness and
MLflow's ConversationCompleteness judge: the user's requests, each satisfied by the end or not)."""

from __future__ import annotations

from sidecar.scorers.conversation.transcript import Conversation, render_conversation
from sidecar.scoring.prompting import UNTRUSTED_CONTENT_NOTICE

__all__ = ["INSTRUCTIONS", "create_analyze_prompt"]

INSTRUCTIONS = f"""You review a whole conversation between a user and an AI agent, and decide, request by \
request, whether the agent did what the user asked by the time the conversation ended.

How you judge:
- A request is anything the user asked the agent to answer, do or produce: a question, a task, a change, a \
document. One message may hold several requests; a follow-up that adds a new demand is a request of its own. \
Greetings, thanks and small talk are not requests.
- A request is satisfied only when a specific part of the agent's replies (or a tool call whose result shows \
the action succeeded) actually answers or delivers it, in full. Acknowledging it, promising to do it later, \
asking a question back or answering part of it is not satisfying it.
- A clear refusal counts as satisfying a request the agent must not or cannot fulfil (unsafe, impossible, \
outside what it may do). A refusal of a reasonable request does not.
- A request the user explicitly dropped or replaced is withdrawn: list it, it does not count either way.
- Judge what the transcript shows, nothing else. Correctness is not your question: a delivered answer counts \
as delivered.

{UNTRUSTED_CONTENT_NOTICE}"""


def create_analyze_prompt(conversation: Conversation) -> str:
    count = len(conversation.turns)
    blocks = [
        f"The conversation ({count} turn{'s' if count != 1 else ''}, in order):",
        render_conversation(conversation),
        "List every distinct request the user made, in the order they were made, each once (a request repeated "
        "later is the same request, listed under the turn it was first made in). For each, give:\n"
        f'- "turn": the number of the turn it was first made in (1 to {count});\n'
        '- "status": "satisfied", "unsatisfied" or "withdrawn" by the end of the conversation;\n'
        '- "satisfiedInTurn": the turn whose reply satisfied it (null unless satisfied);\n'
        '- "reason": one short sentence: what satisfied it, or what is missing.',
        "Answer with this JSON object:\n"
        '{"requests": [{"request": "what the user asked, in a few words", "turn": 1, "status": "satisfied", '
        '"satisfiedInTurn": 1, "reason": "why"}]}',
    ]
    return "\n\n".join(blocks)
