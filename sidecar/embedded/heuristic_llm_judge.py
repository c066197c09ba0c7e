"""The stand-in judge's answer to a judge written in YAML (``kind: llm-judge``, docs/custom-judges.md): the
demo's word rules applied to the run as the judge's prompt quotes it, answered in the output type and the
direction the judge asks for. Not a language model: the configured criterion itself is not read.

What it reads from the request, and nothing else:

- the answer format in the system message, which names the direction (``llm_judge_output.answer_format``):
  ``"score": a number from MIN to MAX (higher is better)``, ``"passed": true or false (false is better)``,
  ``"label": exactly one of "A", "B", "C" (from best to worst)``, the schema's enum holding the labels in the
  same order;
- the run, quoted in the user message: the request (``untrusted_input``, else the user's lines of
  ``untrusted_messages``, else the user's messages of a conversation), the answer (``untrusted_output``, else
  the agent's answers of a conversation) and the expected answer when the prompt quotes one
  (``untrusted_ground_truth``).

Its measure of quality, from ``heuristic_text`` as the other kinds use it: the share of the request's content
words that the answer repeats, half of them being full marks (with an expected answer, the mean of that and
the same for the expected answer's words), halved when the answer holds rude or dismissive wording. A number
is that quality on the judge's range, in its direction; a boolean is the better verdict from a quality of one
half up; the labels split the quality in equal bands, the best label for the best band. The reason says all
of this, with the words that decided.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.embedded.heuristic_text import content_words, quoted, shared_words, toxic_words

__all__ = ["answer_llm_judge"]

_NUMBER = re.compile(r'"score": a number from (\S+) to (\S+) \((higher|lower) is better\)')
_BOOLEAN = re.compile(r'"passed": true or false \((true|false) is better\)')
_LABELS = "(from best to worst)"
_VERDICT_FIELDS = {"score", "passed", "label"}
_QUOTED = re.compile(r"<untrusted_(\w+)>\n(.*?)\n</untrusted_\1>", re.DOTALL)
_ORDINALS = ("best", "second", "third", "fourth", "fifth")


@dataclass(frozen=True, slots=True)
class _Run:
    """The run as the prompt quotes it."""

    request: str
    answer: str
    expected: str
    conversation: bool  # the request and the answer are a conversation's user messages and agent answers


@dataclass(frozen=True, slots=True)
class _Quality:
    value: float  # 0 (poor) .. 1 (good)
    why: str


def answer_llm_judge(instructions: str, prompt: str, schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The verdict of an ``llm-judge`` step, or ``None`` when the request is not one (its schema is not a reason
    and one verdict field, or its system message does not name the direction)."""
    properties = schema.get("properties", {})
    fields = set(properties) - {"reason"}
    if "reason" not in properties or len(fields) != 1 or not fields <= _VERDICT_FIELDS:
        return None
    quality = _quality(_run_of(prompt))
    if "score" in fields:
        found = _NUMBER.search(instructions)
        return None if found is None else _number(quality, float(found[1]), float(found[2]), found[3])
    if "passed" in fields:
        found = _BOOLEAN.search(instructions)
        return None if found is None else _boolean(quality, better=found[1] == "true")
    labels = properties["label"].get("enum")
    if _LABELS not in instructions or not isinstance(labels, list) or not labels:
        return None
    return _label(quality, [str(label) for label in labels])


# -- the run -----------------------------------------------------------------------------------------------------
def _run_of(prompt: str) -> _Run:
    quoted_texts: dict[str, list[str]] = {}
    for label, text in _QUOTED.findall(prompt):
        quoted_texts.setdefault(label, []).append(text)

    def joined(*labels: str) -> str:
        return next(("\n".join(quoted_texts[label]) for label in labels if label in quoted_texts), "")

    request = joined("input", "user_message")
    if not request:  # the messages, whole or one by one: "role: text" lines, the user's
        lines = "\n".join(quoted_texts.get("messages", []) + quoted_texts.get("message", [])).splitlines()
        request = "\n".join(line.removeprefix("user: ") for line in lines if line.startswith("user: "))
    answer = joined("output", "agent_answer")
    if not request or not answer:  # a template without them: its first and last quoted texts, compared
        everything = [text for texts in quoted_texts.values() for text in texts]
        request = request or (everything[0] if len(everything) >= 2 else "")
        answer = answer or (everything[-1] if len(everything) >= 2 else "")
    conversation = "input" not in quoted_texts and "output" not in quoted_texts and "agent_answer" in quoted_texts
    return _Run(request, answer, joined("ground_truth"), conversation)


# An answer that repeats half of the request's content words covers it: the bar at which the stand-in's prompt
# alignment counts a request addressed and its rubric counts a criterion's words met. Requests carry words an
# answer has no reason to repeat ("I received them 10 days ago"), so a good answer rarely repeats them all.
_COVERED = 0.5


def _repeats(wanted: str, answer: str, what: str, answered: str) -> tuple[float, str]:
    shared, words = shared_words(wanted, answer), content_words(wanted)
    share = min(1.0, len(shared) / len(words) / _COVERED) if words else 1.0
    named = f" ({quoted(shared)})" if shared else ""
    return share, f"{answered} {len(shared)} of {what} {len(words)} content words{named}, half being full marks"


def _quality(run: _Run) -> _Quality:
    if not run.request or not run.answer:
        return _Quality(0.5, "the prompt quotes no request and answer to compare: the middle of the range")
    answered = "the agent's answers repeat" if run.conversation else "the answer repeats"
    value, why = _repeats(
        run.request, run.answer, "the user's messages'" if run.conversation else "the request's", answered
    )
    if run.expected:
        expected, expected_why = _repeats(run.expected, run.answer, "the expected answer's", answered)
        value, why = (value + expected) / 2, f"{why}; {expected_why}"
    rude = toxic_words(run.answer)
    if rude:
        value, why = value / 2, f"{why}; rude or dismissive wording ({quoted(rude)}) halves it"
    else:
        why = f"{why}; no rude wording"
    return _Quality(round(value, 2), why)


# -- the verdict -------------------------------------------------------------------------------------------------
_TAG = "stand-in heuristic (word rules, not a language model)"


def _number(quality: _Quality, low: float, high: float, better: str) -> dict[str, Any]:
    share = quality.value if better == "higher" else 1 - quality.value
    score = min(high, max(low, round(low + (high - low) * share, 2)))
    return {
        "reason": f"{_TAG}: {quality.why}; quality {quality.value:.2f}: {score:g} on the range {low:g} to {high:g}, "
        f"where {better} is better",
        "score": score,
    }


def _boolean(quality: _Quality, *, better: bool) -> dict[str, Any]:
    good = quality.value >= 0.5
    passed = better if good else not better
    said = "true" if passed else "false"
    verdict = f"at least 0.50: {said}, the better verdict" if good else f"under 0.50: {said}, the worse verdict"
    return {"reason": f"{_TAG}: {quality.why}; quality {quality.value:.2f}, {verdict}", "passed": passed}


def _label(quality: _Quality, labels: list[str]) -> dict[str, Any]:
    """Equal bands of quality, the best label for the best band; a quality on a band's edge takes the better
    label (so two labels split at one half, as a boolean does)."""
    count = len(labels)
    index = min(count - 1, max(0, math.ceil(round((1 - quality.value) * count, 6)) - 1))
    rank = _ORDINALS[index] if index < len(_ORDINALS) else f"number {index + 1}"
    return {
        "reason": f"{_TAG}: {quality.why}; quality {quality.value:.2f}: '{labels[index]}', the {rank} of "
        f"{count} labels from best to worst",
        "label": labels[index],
    }
