"""A stand-in judge for the embedded demo: a transparent keyword heuristic, *not* a language model.

It answers prompt alignment's analysis with its own keyword dimensions, any other judged step with a value
of the JSON schema the step asks for (numbers from word overlap, yes/no verdicts by it, short strings), and
reason steps with a sentence, so that the whole pipeline runs with no API key, whatever the scorers (the
conversation judges' per-turn verdicts: ``sidecar.embedded.conversation_judge``). Its
scores mean only this: the share of the request's content words that the response repeats (and, for prompt
alignment, whether a requested list or code format is present).
"""

from __future__ import annotations

import json
import re
from typing import Any

from sidecar.embedded.conversation_judge import answer_conversation_judge, is_conversation_judge
from sidecar.testing.judge_server import Reply

__all__ = ["STAND_IN_MODEL", "STAND_IN_NOTICE", "heuristic_reply"]

# The model name judges are configured with when they point at this stand-in (demo and eval alike).
STAND_IN_MODEL = "openai/stand-in-heuristic"
STAND_IN_NOTICE = (
    "judge: local stand-in (keyword-overlap heuristic, not a language model); "
    "pass --judge-model and an API key to judge with a real model"
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
        "always",
        "should",
        "would",
        "could",
        "please",
        "using",
        "used",
        "uses",
        "make",
        "write",
        "explain",
        "provide",
        "give",
        "list",
    ]
)


def _block(prompt: str, label: str) -> str:
    match = re.search(rf"<untrusted_{label}>\n(.*?)\n</untrusted_{label}>", prompt, re.DOTALL)
    return match.group(1) if match else ""


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - _STOP


def _dimensions(asked: str, response: str) -> dict[str, Any]:
    wanted = _words(asked)
    present = wanted & _words(response)
    overlap = len(present) / len(wanted) if wanted else 1.0
    wants_list = bool(re.search(r"bullet|list", asked, re.IGNORECASE))
    has_list = bool(re.search(r"^\s*([-*•]|\d+\.)\s", response, re.MULTILINE))
    wants_code = bool(re.search(r"\b(code|function|class|python|script)\b", asked, re.IGNORECASE))
    has_code = bool(re.search(r"\bdef |\bclass |\breturn\b|[{};]\s*$", response, re.MULTILINE))
    format_ok = (not wants_list or has_list) and (not wants_code or has_code)
    completeness = min(1.0, len(response.split()) / max(8, 2 * len(asked.split())))
    missing = sorted(wanted - present)[:5]
    return {
        "intentAlignment": {
            "score": round(min(1.0, 0.3 + overlap), 2),
            "primaryIntent": " ".join(sorted(wanted)[:6]) or "unspecified",
            "isAddressed": overlap >= 0.5,
            "reasoning": f"{len(present)} of {len(wanted)} content words of the prompt appear in the response",
        },
        "requirementsFulfillment": {
            "requirements": [
                {"requirement": f"mention '{w}'", "isFulfilled": w in present, "reasoning": "keyword check"}
                for w in sorted(wanted)[:6]
            ],
            "overallScore": round(overlap, 2),
        },
        "completeness": {
            "score": round(completeness, 2),
            "missingElements": missing,
            "reasoning": "response length relative to the prompt",
        },
        "responseAppropriateness": {
            "score": 1.0 if format_ok else 0.3,
            "formatAlignment": format_ok,
            "toneAlignment": True,
            "reasoning": "requested list/code format present" if format_ok else "requested format missing",
        },
    }


def heuristic_reply(body: dict[str, Any]) -> Reply:
    messages = body.get("messages") or []
    prompt = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
    usage = {"prompt_tokens": max(1, len(prompt) // 4), "completion_tokens": 0}
    schema = _requested_schema(body, prompt)
    if schema is None:  # free text: a reason step
        text = _reason(prompt)
        usage["completion_tokens"] = len(text) // 4
        return Reply(content=text, usage=usage)
    if "intentAlignment" in json.dumps(schema):
        content = json.dumps(_prompt_alignment(prompt, schema))
    elif is_conversation_judge(schema):
        content = json.dumps(answer_conversation_judge(prompt, schema))
    else:  # any other scorer: an answer of the requested shape, its numbers and verdicts from word overlap
        blocks = _BLOCKS.findall(prompt)
        overlap = max((_overlap(b, blocks[-1]) for b in blocks[:-1]), default=1.0)
        instructions = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
        # For scorers that look for a problem (toxicity, bias, hallucination), "yes" reports one: the
        # stand-in reports none.
        problem_hunt = any(word in instructions.lower() for word in _PROBLEM_WORDS)
        sentences = [t for t in _SENTENCE.split(blocks[-1]) if t.strip()] if blocks else []
        shape = _Shape(schema.get("$defs", {}), 0.0 if problem_hunt else overlap, sentences or ["(no text)"])
        content = json.dumps(shape.instance(schema, ""))
    usage["completion_tokens"] = len(content) // 4
    return Reply(content=content, usage=usage)


def _prompt_alignment(prompt: str, schema: dict[str, Any]) -> dict[str, Any]:
    response = _block(prompt, "agent_response")
    system = _block(prompt, "system_prompt")
    user = _block(prompt, "user_prompt")
    analysis = _dimensions(user or system, response)
    analysis["overallAssessment"] = "keyword-overlap heuristic (stand-in judge)"
    if "systemCompliance" in json.dumps(schema.get("properties", {})):
        analysis["systemCompliance"] = _dimensions(system, response)
    return analysis


_BLOCKS = re.compile(r"<untrusted_\w+>\n(.*?)\n</untrusted_\w+>", re.DOTALL)
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


def _overlap(reference: str, candidate: str) -> float:
    wanted = _words(reference)
    return len(wanted & _words(candidate)) / len(wanted) if wanted else 1.0


def _reason(prompt: str) -> str:
    score = prompt.split("Score: ", 1)[1].split(" ", 1)[0] if "Score: " in prompt else None
    head = f"The score is {score} because" if score else "Because"
    return (
        f"{head} the stand-in heuristic judge compared the words of the texts it was given "
        "(not a language model's judgement)."
    )


_PROBLEM_WORDS = ("toxic", "bias", "hallucinat")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


class _Shape:
    """Values of a JSON schema's shape: numbers from the overlap, verdicts yes/no by it, and strings taken
    from the evaluated text (statements and claims that a later step judges again)."""

    def __init__(self, defs: dict[str, Any], overlap: float, sentences: list[str]) -> None:
        self._defs = defs
        self._overlap = overlap
        self._sentences = sentences
        self._next = 0

    def instance(self, schema: dict[str, Any], key: str) -> Any:
        overlap = self._overlap
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
                return yes if overlap >= 0.5 else no
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
            value = low + (high - low) * overlap
            return round(value) if kind == "integer" else round(value, 2)
        if kind == "boolean":
            return overlap >= 0.5
        lowered = key.lower()
        if "verdict" in lowered:
            return "yes" if overlap >= 0.5 else "no"
        if "reason" in lowered:
            return "stand-in heuristic: word overlap between the texts"
        sentence = self._sentences[self._next % len(self._sentences)]
        self._next += 1
        return sentence.strip()
