"""A stand-in judge for the embedded demo: a transparent keyword heuristic, *not* a language model.

It answers the prompt-alignment judge protocol (the analysis JSON, then "The score is X because …")
so that the whole pipeline runs with no API key. Its scores mean only this: the share of the prompt's
content words that the response repeats, and whether a requested list or code format is present.
"""

from __future__ import annotations

import json
import re
from typing import Any

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
    if prompt.startswith("Explain"):
        score = prompt.split("Score: ", 1)[1].split(" ", 1)[0] if "Score: " in prompt else "?"
        text = (
            f"The score is {score} because the stand-in heuristic judge found the share of the prompt's "
            "content words shown in the breakdown in the response (not a language model's judgement)."
        )
        usage["completion_tokens"] = len(text) // 4
        return Reply(content=text, usage=usage)
    response = _block(prompt, "agent_response")
    system = _block(prompt, "system_prompt")
    user = _block(prompt, "user_prompt")
    analysis = _dimensions(user or system, response)
    analysis["overallAssessment"] = "keyword-overlap heuristic (stand-in judge)"
    schema = json.dumps(body.get("response_format") or {})
    if "systemCompliance" in schema or '"systemCompliance"' in prompt.split("Format your response", 1)[-1]:
        analysis["systemCompliance"] = _dimensions(system, response)
    content = json.dumps(analysis)
    usage["completion_tokens"] = len(content) // 4
    return Reply(content=content, usage=usage)
