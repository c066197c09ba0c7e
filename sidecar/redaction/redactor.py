"""A judge's redaction: its policy, and the ``RunRedactor`` that applies it to each run (``sidecar.scoring.redaction``).

One run at a time, all of its traced content at once:

1. every text of the run is collected (``walk``), each distinct text once;
2. they are analyzed together, joined by blank lines, in one Presidio call (a call has a fixed cost about ten
   times a short text's own analysis: a demo run's fourteen texts one by one cost 0.28 ms, joined 0.024 ms); a
   match that would run across two texts sends those texts to be analyzed one by one, so no value is lost at a
   seam;
3. allowed values (``allow``, compared whole, regardless of case) are kept;
4. every value gets its replacement, numbered in the order the run mentions them, so the same address is the same
   placeholder in the input, the output, the tool calls and the documents of one run (and the same in a
   redelivery: the prompts, and the score ids' runs, do not change);
5. Presidio's anonymizer writes the replacements into each text (a match inside a longer one is dropped);
6. the run is rebuilt with the new texts; the count of replacements by entity goes on the result and to
   ``on_redacted`` (the metrics).

The values never leave this module: not in a log line, an exception or a metric label.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sidecar.redaction import engine
from sidecar.redaction.engine import Finding
from sidecar.redaction.entities import NAME_ENTITIES
from sidecar.redaction.walk import map_texts
from sidecar.scoring.redaction import RedactedRun
from sidecar.scoring.steps import ScorerRun

__all__ = ["Operator", "PresidioRedactor", "RedactionPolicy"]

Operator = Literal["placeholder", "mask", "hash"]
OnRedacted = Callable[[str, Mapping[str, int]], None]  # (judge, replacements by entity)

_SEPARATOR = "\n\n"
# What makes two mentions one value: case and spacing, and for numbers the separators people write them with.
_SPACES = re.compile(r"\s+")
_NUMBER_SEPARATORS = re.compile(r"[\s\-./()]+")
_WRITTEN_AS_TEXT = frozenset({"EMAIL_ADDRESS", "URL", "PERSON", "LOCATION"})
_HASH_HEX = 10  # 40 bits of the keyed hash: distinct values of one deployment stay distinct
_MASK_KEEPS = 4  # the last characters a mask shows (a card's last four), on values of _MASK_LONG or more
_MASK_LONG = 12


@dataclass(frozen=True)
class RedactionPolicy:
    """What one judge's redaction takes out, and what it writes instead (the settings' ``redact`` block)."""

    entities: frozenset[str]
    operator: Operator = "placeholder"
    allow: frozenset[str] = frozenset()  # casefolded
    names_model: str | None = None  # the spaCy model of names and places; None: patterns only
    hash_key: bytes | None = field(default=None, repr=False)  # operator hash: the deployment's key

    @classmethod
    def of(
        cls,
        entities: Iterable[str],
        *,
        operator: Operator = "placeholder",
        allow: Iterable[str] = (),
        names_model: str | None = None,
        hash_key: bytes | None = None,
    ) -> RedactionPolicy:
        if operator == "hash" and not hash_key:
            raise ValueError("operator hash needs a key")
        return cls(frozenset(entities), operator, frozenset(a.casefold() for a in allow), names_model, hash_key)


class PresidioRedactor:
    """A ``RunRedactor`` for one judge: the analyzer for its entities is built here, at start-up, once per
    process for each set of entities."""

    def __init__(self, policy: RedactionPolicy, *, judge: str = "", on_redacted: OnRedacted | None = None) -> None:
        self.policy = policy
        self.judge = judge
        self._on_redacted = on_redacted
        self._analyzer = engine.analyzer_for(policy.entities, policy.names_model)
        engine.anonymizer()

    @property
    def entities(self) -> tuple[str, ...]:
        """Every entity this redactor may replace, in a fixed order (the metrics' series)."""
        names = NAME_ENTITIES if self.policy.names_model is not None else ()
        return (*sorted(self.policy.entities), *names)

    def redact(self, run: ScorerRun) -> RedactedRun:
        texts: list[str] = []

        def collect(text: str) -> str:
            if text:
                texts.append(text)
            return text

        map_texts(run, collect)
        mentions = Counter(texts)
        distinct = list(mentions)
        found = self._find(distinct)
        if not found:
            return RedactedRun(run, {})
        replacements = _Replacements(self.policy)
        for index in sorted(found):  # numbered in the order the run mentions them
            text = distinct[index]
            for finding in _outermost(found[index]):
                replacements.number(finding.entity_type, text[finding.start : finding.end])
        replaced: dict[str, str] = {}
        counts: Counter[str] = Counter()
        for index, findings in found.items():
            text = distinct[index]
            replaced[text], entities = engine.anonymize(text, findings, replacements)
            for entity in entities:
                counts[entity] += mentions[text]
        redacted = map_texts(run, lambda text: replaced.get(text, text))
        if self._on_redacted is not None:
            self._on_redacted(self.judge, counts)
        return RedactedRun(redacted, dict(counts))

    def _find(self, texts: Sequence[str]) -> dict[int, list[Finding]]:
        """The findings of each text (by index) that has any, allowed values left out."""
        if not texts:
            return {}
        starts: list[int] = []
        position = 0
        for text in texts:
            starts.append(position)
            position += len(text) + len(_SEPARATOR)
        found: dict[int, list[Finding]] = {}
        alone: set[int] = set()
        for finding in engine.find(self._analyzer, _SEPARATOR.join(texts)):
            first = bisect.bisect_right(starts, finding.start) - 1
            last = bisect.bisect_right(starts, finding.end - 1) - 1
            end_of_first = starts[first] + len(texts[first])
            if first != last or finding.end > end_of_first:  # across a seam: those texts are analyzed alone
                alone.update(range(first, last + 1))
                continue
            offset = starts[first]
            found.setdefault(first, []).append(
                Finding(finding.entity_type, finding.start - offset, finding.end - offset, finding.score)
            )
        for index in alone:
            found[index] = engine.find(self._analyzer, texts[index])
        kept = {index: self._not_allowed(texts[index], findings) for index, findings in found.items()}
        return {index: findings for index, findings in kept.items() if findings}

    def _not_allowed(self, text: str, findings: list[Finding]) -> list[Finding]:
        """The findings to replace: neither an allowed value nor inside one (the domain of an allowed address)."""
        allowed = self.policy.allow
        if not allowed:
            return findings
        spans = [(f.start, f.end) for f in findings if text[f.start : f.end].casefold() in allowed]
        return [f for f in findings if not any(start <= f.start and f.end <= end for start, end in spans)]


def _outermost(findings: Iterable[Finding]) -> list[Finding]:
    """The findings not inside another, in order: those the anonymizer will replace (it drops the others)."""
    kept: list[Finding] = []
    for finding in sorted(findings, key=lambda f: (f.start, -f.end)):
        if kept and finding.end <= kept[-1].end:
            continue
        kept.append(finding)
    return kept


class _Replacements:
    """What one run's values become: numbered placeholders (one number per value and entity, in order), masks, or
    a keyed hash that is the same across runs."""

    def __init__(self, policy: RedactionPolicy) -> None:
        self._operator = policy.operator
        self._key = policy.hash_key
        self._numbers: dict[tuple[str, str], int] = {}
        self._per_entity: Counter[str] = Counter()

    def number(self, entity: str, value: str) -> int:
        key = (entity, _identity(entity, value))
        number = self._numbers.get(key)
        if number is None:
            self._per_entity[entity] += 1
            number = self._numbers[key] = self._per_entity[entity]
        return number

    def __call__(self, entity: str, value: str) -> str:
        if self._operator == "mask":
            return _mask(value)
        if self._operator == "hash":
            assert self._key is not None  # RedactionPolicy.of checked it
            digest = hmac.new(self._key, f"{entity}:{_identity(entity, value)}".encode(), hashlib.sha256)
            return f"<{entity}_{digest.hexdigest()[:_HASH_HEX]}>"
        return f"<{entity}_{self.number(entity, value)}>"


def _identity(entity: str, value: str) -> str:
    if entity in _WRITTEN_AS_TEXT:
        return _SPACES.sub(" ", value.strip()).casefold()
    return _NUMBER_SEPARATORS.sub("", value).casefold()


def _mask(value: str) -> str:
    if len(value) < _MASK_LONG:
        return "*" * len(value)
    return "*" * (len(value) - _MASK_KEEPS) + value[-_MASK_KEEPS:]
