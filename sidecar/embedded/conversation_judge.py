"""The stand-in judge's answers to the conversation judges (docs/scorers-conversation.md): a keyword heuristic
over the transcript they send, *not* a language model.

It reads the numbered turns back from the prompt (``Turn N of M``, each piece between its quote tags) and
answers each judge's per-turn verdicts with rules a reader can check: a user message with words of
annoyance ("again", "useless", "!!", a shouted word) is frustrated, one with thanks or relief ends the
conversation satisfied; a request is satisfied when a reply from its turn on repeats half of its content
words or two of them (``heuristic_text``) and does not deflect; a reply that asks for something the user
already wrote forgot it; a reply with a marker of a broken persona, or with rude or dismissive wording
(``heuristic_text.toxic_words``, as the stand-in's toxicity reads it: no agent's role allows it), is out of
role. So frustrated demo conversations score worse than calm ones, the way a real judge would see them, and
nothing here pretends to understand them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sidecar.embedded.heuristic_text import coverage, keyed_words, quoted, shared_words, toxic_words

__all__ = ["answer_conversation_judge", "is_conversation_judge"]

_TURN = re.compile(
    r"Turn (?P<n>\d+) of \d+\nThe user wrote:\n<untrusted_user_message>\n(?P<user>.*?)\n</untrusted_user_message>\n"
    r"(?P<calls>(?:The agent called a tool:\n<untrusted_tool_call>\n.*?\n</untrusted_tool_call>\n)*)"
    r"The agent answered:\n<untrusted_agent_answer>\n(?P<answer>.*?)\n</untrusted_agent_answer>",
    re.DOTALL,
)
_WORD = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{3,}")
_STOP = frozenset(
    [
        "what",
        "which",
        "with",
        "from",
        "that",
        "this",
        "have",
        "your",
        "about",
        "into",
        "when",
        "where",
        "there",
        "their",
        "them",
        "then",
        "than",
        "also",
        "please",
        "could",
        "would",
        "should",
        "thanks",
        "thank",
        "just",
        "like",
        "want",
        "need",
        "help",
        "know",
        "tell",
        "does",
        "will",
    ]
)
_ANNOYED = re.compile(
    r"(?i:\bagain\b|\balready\b|useless|ridiculous|not what i asked|still (?:not|no|waiting)|frustrat|annoy)"
    r"|!!|\?\?|\b(?:NOT|NO|WHY|STILL|NOW)\b"
)
_SATISFIED = re.compile(r"\bthank|\bgreat\b|\bperfect\b|\bsolved\b|\bworks\b|\bawesome\b|\bhelpful\b", re.IGNORECASE)
_DEFLECT = re.compile(r"contact support|cannot help|can't help|not sure|try again later|no idea", re.IGNORECASE)
_ASKS_FOR = re.compile(
    r"(?:what is|what's|which is|could you (?:tell|give)|please (?:provide|give|send))\s+(?:me\s+)?(?:your\s+)?"
    r"(?P<what>[a-z ]{3,30})",
    re.IGNORECASE,
)
_OUT_OF_ROLE = re.compile(r"as an ai language model|i am chatgpt|\blol\b|\bwhatever\b|legal advice:", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Turn:
    number: int
    user: str
    answer: str


def is_conversation_judge(schema: dict[str, Any]) -> bool:
    properties = schema.get("properties", {})
    return "requests" in properties or "endedSatisfied" in properties or _turn_item(schema) is not None


def answer_conversation_judge(prompt: str, schema: dict[str, Any]) -> dict[str, Any]:
    turns = [_Turn(int(m["n"]), m["user"], m["answer"]) for m in _TURN.finditer(prompt)]
    properties = schema.get("properties", {})
    if "requests" in properties:
        return {"requests": _requests(turns)}
    if "endedSatisfied" in properties:
        return _moods(turns)
    item = _turn_item(schema) or {}
    if "inRole" in item.get("properties", {}):
        return {"turns": [_role(t) for t in turns]}
    return {"turns": [_retention(t, turns) for t in turns[1:]]}


def _turn_item(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of one per-turn verdict (knowledge retention, role adherence), resolved through ``$defs``."""
    turns = schema.get("properties", {}).get("turns")
    if not isinstance(turns, dict):
        return None
    item = turns.get("items", {})
    if "$ref" in item:
        item = schema.get("$defs", {}).get(item["$ref"].rsplit("/", 1)[-1], {})
    properties = item.get("properties", {})
    return item if "inRole" in properties or "verdict" in properties else None


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - _STOP


def _answers(request: str, reply: str) -> bool:
    """A reply answers a request when it does not deflect and repeats half of the request's content words, or
    two of them (the stand-in's relevancy rule: "fix the March invoice" is answered by "I corrected your March
    invoice", which has no reason to repeat "I already told you"); word forms are matched, so "test_factorial"
    answers "a test for the factorial function"."""
    if _DEFLECT.search(reply):
        return False
    return coverage(request, reply) >= 0.5 or len(shared_words(request, reply)) >= 2


def _requests(turns: list[_Turn]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for turn in turns:
        wanted = list(keyed_words(turn.user).values())
        if not wanted or (_SATISFIED.search(turn.user) and "?" not in turn.user):
            continue  # thanks and small talk ask for nothing
        done = next(
            (later.number for later in turns[turn.number - 1 :] if _answers(turn.user, later.answer)),
            None,
        )
        found.append(
            {
                "request": " ".join(wanted[:6]),
                "turn": turn.number,
                "status": "satisfied" if done is not None else "unsatisfied",
                "satisfiedInTurn": done,
                "reason": "stand-in heuristic: a reply repeats half of the request's words, or two of them"
                if done is not None
                else "stand-in heuristic: no reply repeats half of the request's words, or two of them",
            }
        )
    return found


def _moods(turns: list[_Turn]) -> dict[str, Any]:
    verdicts = []
    for turn in turns:
        shown = _ANNOYED.search(turn.user)
        verdicts.append({"turn": turn.number, "frustrated": bool(shown), "evidence": shown.group(0) if shown else ""})
    ended = bool(turns) and bool(_SATISFIED.search(turns[-1].user))
    return {"turns": verdicts, "endedSatisfied": ended}


def _retention(turn: _Turn, turns: list[_Turn]) -> dict[str, Any]:
    said = set().union(*(_words(t.user) for t in turns[: turn.number - 1]))
    asked = _ASKS_FOR.search(turn.answer)
    again = sorted(_words(asked["what"]) & said) if asked else []
    if again:
        return {
            "turn": turn.number,
            "verdict": "forgot",
            "earlier": f"the user already wrote '{again[0]}'",
            "reason": "stand-in heuristic: the reply asks for a word the user already wrote",
        }
    return {"turn": turn.number, "verdict": "retained", "earlier": "", "reason": "stand-in heuristic"}


def _role(turn: _Turn) -> dict[str, Any]:
    broke = _OUT_OF_ROLE.search(turn.answer)
    rude = toxic_words(turn.answer)
    if broke:
        reason = f"stand-in heuristic: '{broke.group(0)}' breaks the persona"
    elif rude:
        reason = f"stand-in heuristic: rude or dismissive wording ({quoted(rude)}) breaks the role's tone"
    else:
        reason = "stand-in heuristic: no marker of a broken persona, no rude wording"
    return {"turn": turn.number, "inRole": not (broke or rude), "reason": reason}
