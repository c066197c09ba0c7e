"""A scorer as the runtime runs it: the built scorer with what its configuration says around it."""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.conventions.selection import Selection
from sidecar.core.runs import Scope
from sidecar.scorers.registry import Need, ScorerFacts
from sidecar.scoring import Scorer

__all__ = ["ConfiguredScorer"]


@dataclass(frozen=True, slots=True)
class ConfiguredScorer:
    scorer: Scorer
    selection: Selection = field(default_factory=Selection)
    scale: float = 1.0
    judge_model: str | None = None  # the judge's label (provider/model), for shed accounting
    # span: each selected span scored at once; trace: each selected agent span with its descendants, once
    # its trace is done.
    scope: Scope = "span"
    # This scorer's facts (its kind's, as its options adjust them): direction, judge calls per run, what it
    # reads from a run (a score says which of those the run lacked), the scopes it supports.
    facts: ScorerFacts = field(default_factory=ScorerFacts)
    kind: str = "python"  # the kind it was built from, for the metrics' info series

    @property
    def needs(self) -> frozenset[Need]:
        return self.facts.needs
