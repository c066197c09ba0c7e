"""A stand-in judge for the demo and ``eval --stand-in-judge``: transparent word rules, *not* a language model.

It speaks the judge protocol (an OpenAI-compatible chat completion, served by ``sidecar.testing``'s judge
server) and answers every judged step of every prebuilt scorer kind in the shape the step asks for, from
rules a reader can check (``sidecar.embedded.heuristic_text``): a statement is relevant when it repeats the
question's content words, a claim is supported when the context repeats its words and figures, an opinion is
toxic when it holds rude or dismissive wording, a rubric criterion is met when the output has the form it
names or repeats its words. The configured rubric criteria are graded as configured. A judge written in YAML
(``llm-judge``) gets the same rules applied to the run its prompt quotes, answered in the output type and the
direction it asks for (``sidecar.embedded.heuristic_llm_judge``). So good answers score better than partial
ones, and partial ones better than poor ones, in the direction each kind reads, without an API key; the
scores still mean only what those rules measure.

A step it does not know (a user's ``python:`` scorer) gets a value of its JSON schema: numbers and yes/no
verdicts from the share of the prompt's first quoted text that its last one repeats. Reason steps get a
sentence that says it is the stand-in. The conversation judges' per-turn verdicts come from
``sidecar.embedded.conversation_judge``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sidecar.embedded.conversation_judge import answer_conversation_judge, is_conversation_judge
from sidecar.embedded.heuristic_llm_judge import answer_llm_judge
from sidecar.embedded.heuristic_steps import JudgedPrompt, answer_for, blocks_of
from sidecar.embedded.heuristic_text import coverage, statements
from sidecar.testing.judge_server import Reply

__all__ = ["STAND_IN_MODEL", "STAND_IN_NOTICE", "heuristic_reply"]

# The model name judges are configured with when they point at this stand-in (demo and eval alike).
STAND_IN_MODEL = "openai/stand-in-heuristic"
STAND_IN_NOTICE = (
    "judge: local stand-in (word rules, not a language model); "
    "pass --judge-model and an API key to judge with a real model"
)


def heuristic_reply(body: dict[str, Any]) -> Reply:
    messages = body.get("messages") or []
    prompt = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
    instructions = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    usage = {"prompt_tokens": max(1, (len(prompt) + len(instructions)) // 4), "completion_tokens": 0}  # ~4 chars
    schema = _requested_schema(body, prompt)
    if schema is None:  # free text: a reason step
        content = _reason(prompt)
    elif is_conversation_judge(schema):
        content = json.dumps(answer_conversation_judge(prompt, schema))
    else:
        judged = JudgedPrompt(prompt, blocks_of(prompt), schema)
        answer = answer_for(judged)
        if answer is None:
            answer = answer_llm_judge(instructions, prompt, schema)
        if answer is None:  # a user's own scorer: a value of its schema
            answer = _Shape(schema.get("$defs", {}), _agreement(judged), _sentences(judged)).instance(schema, "")
        content = json.dumps(answer)
    usage["completion_tokens"] = max(1, len(content) // 4)
    return Reply(content=content, usage=usage)


_FALLBACK_SCHEMA = "It must match this JSON Schema:\n"


def _requested_schema(body: dict[str, Any], prompt: str) -> dict[str, Any] | None:
    """The JSON schema the step asks for: native ``response_format``, or the fallback prompt's."""
    response_format = body.get("response_format") or {}
    schema = response_format.get("json_schema", {}).get("schema") if isinstance(response_format, dict) else None
    if isinstance(schema, dict):
        return schema
    if _FALLBACK_SCHEMA in prompt:
        try:
            found = json.loads(prompt.split(_FALLBACK_SCHEMA, 1)[1])
        except ValueError:
            return None
        return found if isinstance(found, dict) else None
    return None


_SCORE = re.compile(r"[Tt]he score is (-?[\d.]+?)\.? because|Score: (-?[\d.]+)")


_OWN_REASON = re.compile(r"stand-in heuristic: ([^\"\n]+)")


def _reason(prompt: str) -> str:
    """A reason step's sentence: the score it was given, and the stand-in's own reasons quoted back to it."""
    found = _SCORE.search(prompt)
    score = next((g for g in found.groups() if g), None) if found else None
    head = f"The score is {score} because" if score else "Because"
    reasons = list(dict.fromkeys(r.strip().rstrip(".;") for r in _OWN_REASON.findall(prompt)))[:3]
    found_text = f": {'; '.join(reasons)}" if reasons else ""
    return (
        f"{head} of the stand-in judge's word rules (it compares words, figures and forms, and is not a language "
        f"model){found_text}."
    )


# -- a user's own scorer ---------------------------------------------------------------------------------------
_LABELLED = re.compile(r"^([A-Z][\w ]{0,30}):[ \t]*(.+)$", re.MULTILINE)


def _texts(prompt: JudgedPrompt) -> list[str]:
    """The texts a prompt quotes: its untrusted blocks, else its ``Label: text`` lines."""
    if prompt.blocks:
        return list(prompt.blocks.values())
    return [text for _, text in _LABELLED.findall(prompt.text)]


def _agreement(prompt: JudgedPrompt) -> float:
    """The share of the first quoted text's content words that the last one repeats (0.5 with fewer than two)."""
    texts = _texts(prompt)
    return coverage(texts[0], texts[-1]) if len(texts) >= 2 else 0.5


def _sentences(prompt: JudgedPrompt) -> list[str]:
    texts = _texts(prompt)
    return (statements(texts[-1]) if texts else []) or ["(no text)"]


class _Shape:
    """Values of a JSON schema's shape: numbers from the agreement, verdicts yes/no by it, and strings taken
    from the evaluated text (statements and claims that a later step judges again)."""

    def __init__(self, defs: dict[str, Any], agreement: float, sentences: list[str]) -> None:
        self._defs = defs
        self._agreement = agreement
        self._sentences = sentences
        self._next = 0

    def instance(self, schema: dict[str, Any], key: str) -> Any:
        agreement = self._agreement
        if "$ref" in schema:
            return self.instance(self._defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), key)
        for union in ("anyOf", "oneOf"):
            if union in schema:
                options = [o for o in schema[union] if o.get("type") != "null"] or schema[union]
                return self.instance(options[0], key)
        if "enum" in schema:
            choices = list(schema["enum"])
            yes, no = ("yes", "no") if "yes" in choices else ("pass", "fail") if "pass" in choices else (None, None)
            if yes in choices and no in choices:
                return yes if agreement >= 0.5 else no
            return choices[0]
        if "const" in schema:
            return schema["const"]
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            return {name: self.instance(sub, name) for name, sub in schema.get("properties", {}).items()}
        if kind == "array":
            count = max(int(schema.get("minItems", 0)), 2)
            count = min(count, int(schema.get("maxItems", count)))
            return [self.instance(schema.get("items", {}), key) for _ in range(count)]
        if kind in ("number", "integer"):
            low = float(schema.get("minimum", 0))
            high = float(schema.get("maximum", max(low, 1)))
            value = low + (high - low) * agreement
            return round(value) if kind == "integer" else round(value, 2)
        if kind == "boolean":
            return agreement >= 0.5
        lowered = key.lower()
        if "verdict" in lowered:
            return "yes" if agreement >= 0.5 else "no"
        if "reason" in lowered:
            return "stand-in heuristic: word overlap between the texts"
        sentence = self._sentences[self._next % len(self._sentences)]
        self._next += 1
        return sentence.strip()
