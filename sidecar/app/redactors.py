"""Which redaction a scorer's runs go through: that of the judges its prompt steps call (docs/redaction.md).

A run is redacted once, before the scorer's first step, so every judge of one scorer reads the same redacted run:
the judges a scorer calls must redact alike (or not at all). A prebuilt kind calls one judge; a ``python:``
factory calling two judges with different ``redact`` blocks is refused at ``validate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sidecar.redaction.redactor import PresidioRedactor
from sidecar.scoring import Scorer, ScorerDefinitionError
from sidecar.settings import EvalSettings
from sidecar.settings.redaction import RedactSettings

__all__ = ["RedactionConflictError", "ScorerRedaction", "build_redactors", "scorer_redaction"]


class RedactionConflictError(ValueError):
    """A scorer calls judges whose redactions differ."""


@dataclass(frozen=True, slots=True)
class ScorerRedaction:
    judge: str  # the judge whose redactor the scorer's runs go through (its name labels the metrics)
    settings: RedactSettings


def judges_called(scorer: Scorer, settings: EvalSettings, own: str | None) -> list[str]:
    """The judges the scorer's prompt steps call, as ``Scorer.bind`` picks their clients: the scorer's own judge
    first, then the others in the order declared."""
    order = ([own] if own is not None else []) + [name for name in settings.judges if name != own]
    keys = {name: settings.judges[name].to_judge_model().cache_key() for name in order}
    try:
        models = scorer.judge_models().values()
    except ScorerDefinitionError:  # reported by the scorer factory
        return []
    called: list[str] = []
    for model in models:
        name = next((n for n in order if keys[n] == model.cache_key()), None)
        if name is not None and name not in called:
            called.append(name)
    return called


def scorer_redaction(scorer: Scorer, settings: EvalSettings, own: str | None) -> ScorerRedaction | None:
    """The redaction the scorer's runs go through, or ``None``; raises ``RedactionConflictError`` when the judges
    it calls redact differently."""
    redacting = [
        ScorerRedaction(name, block)
        for name in judges_called(scorer, settings, own)
        if (block := settings.redaction_of(name)) is not None
    ]
    if not redacting:
        return None
    first = redacting[0]
    for other in redacting[1:]:
        if other.settings != first.settings:
            raise RedactionConflictError(
                f"calls judges {first.judge} and {other.judge}, which redact differently: a run is redacted once "
                "for all of a scorer's judges, so give them the same redact block"
            )
    return first


def build_redactors(
    settings: EvalSettings, on_redacted: Callable[[str, Mapping[str, int]], None] | None
) -> dict[str, PresidioRedactor]:
    """A redactor for each judge that redacts, by judge name: Presidio is set up here, at start-up."""
    redactors = {}
    for name in settings.judges:
        block = settings.redaction_of(name)
        if block is not None:
            redactors[name] = PresidioRedactor(block.policy(), judge=name, on_redacted=on_redacted)
    return redactors
