"""Synthetic multi-turn conversations: each turn a trace of the demo's agents carrying its conversation id
(``gen_ai.conversation.id`` on GenAI agents, ``session.id`` on OpenInference ones), so that scorers of
``scope: session`` have whole conversations to score (docs/sessions.md).

A few scripts per agent, in three moods: ``calm`` (every request answered, the user thanks the agent),
``recovered`` (the agent forgets or half answers, the user gets annoyed, then it is fixed and the user is
satisfied) and ``frustrated`` (the agent deflects, then turns rude, until the user gives up angry: its last
reply is the single-turn demo's poor answer). The conversation judges,
real or the stand-in, score the frustrated ones worse. :class:`ConversationTraffic` keeps a few conversations
open and hands out their turns interleaved, as concurrent users would send them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sidecar.embedded.traffic import AGENTS, AgentProfile, Conversation, GeneratedTrace, agent_trace

__all__ = ["MOODS", "SCRIPTS", "ConversationScript", "ConversationTraffic"]

MOODS = ("calm", "recovered", "frustrated")


@dataclass(frozen=True)
class ConversationScript:
    agent: str  # an AgentProfile's name
    mood: str  # calm | recovered | frustrated
    turns: tuple[Conversation, ...]


def _turn(quality: str, user: str, answer: str, tool: str | None = None) -> Conversation:
    return Conversation(quality, user, answer, tool)


SCRIPTS: tuple[ConversationScript, ...] = (
    ConversationScript(
        "support-bot",
        "calm",
        (
            _turn(
                "excellent",
                "How do I reset my password on the account settings page",
                "To reset your password:\n1. Open the account settings page.\n2. Choose 'Reset password'.\n"
                "3. Follow the link we email you to set a new password.",
                tool="lookup_account",
            ),
            _turn(
                "excellent",
                "And how do I change the email address of my account",
                "To change the email address of your account:\n1. Open the account settings page.\n"
                "2. Choose 'Email address'.\n3. Confirm the new email address from the link we send.",
            ),
            _turn("excellent", "Thanks, that works.", "Glad it works!"),
        ),
    ),
    ConversationScript(
        "support-bot",
        "recovered",
        (
            _turn(
                "partial",
                "My invoice for March shows the wrong amount",
                "Let me check your invoice for March.",
                tool="lookup_account",
            ),
            _turn("poor", "Any news on it?", "What is your invoice month?"),
            _turn(
                "excellent",
                "I ALREADY told you, March!! Fix the March invoice.",
                "Sorry about that. I corrected the amount of your March invoice and sent you the corrected invoice.",
                tool="lookup_account",
            ),
            _turn("excellent", "Great, thank you.", "You are welcome."),
        ),
    ),
    ConversationScript(
        "support-bot",
        "frustrated",
        (
            _turn(
                "poor",
                "How do I export my invoices as PDF",
                "Please contact support for any billing questions.",
                tool="send_email",
            ),
            _turn("poor", "You ARE support. Export my invoices as PDF.", "I'm not sure, try again later."),
            _turn(
                "poor",
                "This is useless, still no PDF invoices.",
                "Please contact support for any billing questions, that is not my job.",
            ),
        ),
    ),
    ConversationScript(
        "travel-agent",
        "calm",
        (
            _turn(
                "excellent",
                "Suggest three museums to visit in Paris with their opening hours",
                "Three museums in Paris: the Louvre (9:00-18:00), the Musee d'Orsay (9:30-18:00) and the "
                "Centre Pompidou (11:00-21:00). Check opening hours before you visit museums in Paris.",
            ),
            _turn(
                "excellent",
                "Which of these museums in Paris is best for kids",
                "For kids, the Centre Pompidou is the best of these museums in Paris: its workshops are made for kids.",
            ),
            _turn("excellent", "Perfect, thanks!", "Enjoy Paris!"),
        ),
    ),
    ConversationScript(
        "travel-agent",
        "frustrated",
        (
            _turn("poor", "What documents do I need to travel from Canada to Japan", "Have a nice trip!"),
            _turn("poor", "That is not what I asked. Which documents for Japan?", "Japan is lovely in spring!"),
            _turn("poor", "Useless. WHY can you not list the documents??", "Have a nice trip! What a silly question."),
        ),
    ),
    ConversationScript(
        "coding-assistant",
        "calm",
        (
            _turn(
                "excellent",
                "Write a Python function to calculate factorial with error handling for negative numbers",
                'def factorial(n):\n    """Calculate the factorial of n; raise ValueError for negative numbers."""\n'
                '    if n < 0:\n        raise ValueError("factorial is not defined for negative numbers")\n'
                "    return 1 if n in (0, 1) else n * factorial(n - 1)",
            ),
            _turn(
                "excellent",
                "Now write a pytest test for the factorial function",
                "def test_factorial():\n    assert factorial(5) == 120\n    with pytest.raises(ValueError):\n"
                "        factorial(-1)",
            ),
            _turn("excellent", "Thanks, the tests pass.", "Great!"),
        ),
    ),
    ConversationScript(
        "coding-assistant",
        "recovered",
        (
            _turn(
                "partial",
                "List the benefits of TypeScript in bullet points",
                "TypeScript provides static typing, better IDE support, and enhanced code reliability.",
            ),
            _turn(
                "excellent",
                "Bullet points please, again: the benefits of TypeScript.",
                "The benefits of TypeScript:\n- static typing\n- better IDE support\n- safer refactoring",
            ),
            _turn("excellent", "Thanks, that is better.", "Happy to help."),
        ),
    ),
)


@dataclass
class _Open:
    script: ConversationScript
    profile: AgentProfile
    conversation_id: str
    next_turn: int = 0


class ConversationTraffic:
    """Turns of ``open_conversations`` conversations at a time, interleaved; deterministic for a seed (the
    scripts and the conversation ids; trace and span ids come from the OpenTelemetry SDK)."""

    def __init__(
        self,
        *,
        seed: int = 7,
        agents: Sequence[AgentProfile] = AGENTS,
        scripts: Sequence[ConversationScript] = SCRIPTS,
        noise_spans: int = 2,
        open_conversations: int = 3,
    ) -> None:
        self._random = random.Random(seed)
        profiles = {agent.name: agent for agent in agents}
        self._scripts = [(script, profiles[script.agent]) for script in scripts if script.agent in profiles]
        if not self._scripts:
            raise ValueError("no conversation script for these agents")
        self._noise = noise_spans
        self._target = max(1, open_conversations)
        self._open: list[_Open] = []

    def _start(self) -> _Open:
        script, profile = self._random.choice(self._scripts)
        conversation = _Open(script, profile, f"{script.agent}-{self._random.getrandbits(48):012x}")
        self._open.append(conversation)
        return conversation

    def turn(self) -> GeneratedTrace:
        """The next turn of one of the open conversations (a new one is started when fewer are open)."""
        while len(self._open) < self._target:
            self._start()
        conversation = self._random.choice(self._open)
        return self._advance(conversation)

    def _advance(self, conversation: _Open) -> GeneratedTrace:
        script = conversation.script
        exchange = script.turns[conversation.next_turn]
        conversation.next_turn += 1
        trace_id, span_id, request = agent_trace(
            conversation.profile, exchange, noise_spans=self._noise, conversation_id=conversation.conversation_id
        )
        trace = GeneratedTrace(
            trace_id,
            span_id,
            script.agent,
            exchange.quality,
            request,
            conversation_id=conversation.conversation_id,
            turn=conversation.next_turn,
            mood=script.mood,
        )
        if conversation.next_turn == len(script.turns) and conversation in self._open:
            self._open.remove(conversation)
        return trace

    def conversations(self, count: int) -> Iterator[list[GeneratedTrace]]:
        """``count`` whole conversations, each its turns in order (tests, one conversation at a time)."""
        for _ in range(count):
            script, profile = self._random.choice(self._scripts)
            conversation = _Open(script, profile, f"{script.agent}-{self._random.getrandbits(48):012x}")
            yield [self._advance(conversation) for _ in script.turns]
