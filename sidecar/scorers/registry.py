"""Scorer kinds, declared once: what ``kind: <name>`` in a configuration builds.

Each prebuilt scorer module registers its kind with ``@scorer_kind(...)`` next to its factory (a user's
``python:`` factory may too, to have its options validated by its own model): the name users write, the
options model (validated with the kind's own model, so a typo inside ``options:`` is reported like any
other key, with "did you mean"), whether it needs a judge, whether it can score live
traffic or only ``eval`` datasets, and a one-line description. Settings validation, ``validate``,
``eval``, the scorer factory and the docs' list of kinds read it through ``sidecar.scorers.catalog``, which
imports every family first; this module sits below the families, which import it to declare themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from sidecar.core.runs import SINGLE_RUN_SCOPES, Scope
from sidecar.scoring import JudgeModel, Scorer

__all__ = [
    "Direction",
    "LiveProblem",
    "Need",
    "ScorerFacts",
    "ScorerKind",
    "kind_of",
    "registered_kinds",
    "scorer_kind",
]

OptionsT = TypeVar("OptionsT", bound=BaseModel)
# What a kind reads from a run: the request, the response, the system instructions, the tool calls (with
# their results), retrieved context, a ground truth (eval datasets only).
Need = Literal["input", "output", "system", "tool_calls", "context", "ground_truth"]
NEED_ORDER: tuple[Need, ...] = ("input", "output", "system", "tool_calls", "context", "ground_truth")
# Which way is good: "higher" (alignment, relevancy) or "lower" (hallucination, toxicity, bias).
Direction = Literal["higher", "lower"]
Factory = Callable[[JudgeModel | None, OptionsT], Scorer]
# Why a scorer built with some options cannot score live traffic at a scope: the option's path inside
# ``options`` (empty: the kind itself) and the message.
LiveProblem = tuple[tuple[str | int, ...], str]


@dataclass(frozen=True)
class ScorerFacts:
    """What the rest of the sidecar must know of one configured scorer: which way is good (alerts and
    dashboards), how many judge calls a run makes (cost estimates), what it reads from a run (a score says
    which of those the run lacked) and the scopes it can score. A kind declares its own; a kind whose options
    change them (a mode that judges the system instructions only, a judge written in YAML with its own
    direction) derives them per configured scorer."""

    direction: Direction = "higher"
    judge_calls_per_run: float = 0.0
    needs: frozenset[Need] = frozenset({"input", "output"})
    scopes: frozenset[Scope] = frozenset(SINGLE_RUN_SCOPES)
    # Attributes of the scored span and of its resource that a run must carry for this scorer (a judge
    # written in YAML names them in its template): ingest keeps these keys only, and only when asked.
    span_attributes: frozenset[str] = frozenset()
    resource_attributes: frozenset[str] = frozenset()
    # Tokens of the scorer's own prompt text beyond the run content it quotes, when its options write that
    # text (a judge written in YAML): the cost estimate adds them to a call's input.
    prompt_tokens: int = 0


@dataclass(frozen=True)
class ScorerKind(Generic[OptionsT]):
    name: str
    factory: Factory[OptionsT]
    options: type[OptionsT]
    needs_judge: bool
    description: str
    # None: scores live traffic and datasets; else why the kind scores ``eval`` datasets only.
    eval_only: str | None = None
    # Judge calls of one run, typically (Mastra's LLM scorers make 2 to 4): the basis of cost estimates.
    judge_calls_per_run: float = 0.0
    needs: frozenset[Need] = frozenset({"input", "output"})
    direction: Direction = "higher"
    # What a scorer built with these options reads, when its options change that (a mode that judges the
    # system instructions only); None: ``needs``.
    needs_for: Callable[[OptionsT], Iterable[Need]] | None = None
    # The scopes a scorer of this kind can score (a conversation judge reads whole sessions only).
    scopes: frozenset[Scope] = frozenset(SINGLE_RUN_SCOPES)
    # Facts that a scorer's options set (direction, calls per run) beyond ``needs_for``; None: the kind's.
    facts_for: Callable[[OptionsT, ScorerFacts], ScorerFacts] | None = None
    # Why a scorer built with these options cannot score live traffic at a scope (what it reads that a live
    # run there does not carry), beyond ``eval_only``; None: nothing.
    live_problems_for: Callable[[OptionsT, Scope], Iterable[LiveProblem]] | None = None

    def needs_given(self, options: Mapping[str, Any]) -> frozenset[Need]:
        """What a scorer of this kind built with ``options`` reads from a run."""
        return self.facts_given(options).needs

    def facts_given(self, options: Mapping[str, Any]) -> ScorerFacts:
        """The facts of a scorer of this kind built with ``options``: the kind's, adjusted by its options."""
        facts = ScorerFacts(self.direction, self.judge_calls_per_run, self.needs, self.scopes)
        if self.needs_for is None and self.facts_for is None:
            return facts
        validated = self.options.model_validate(dict(options))
        if self.needs_for is not None:
            facts = dataclasses.replace(facts, needs=frozenset(self.needs_for(validated)))
        if self.facts_for is not None:
            facts = self.facts_for(validated, facts)
        return facts

    def live_problems(self, options: Mapping[str, Any], scope: Scope) -> list[LiveProblem]:
        """Why a scorer of this kind built with ``options`` cannot score live traffic at ``scope`` (empty: it
        can). Call it with options that validate."""
        if self.eval_only is not None:
            return [((), f"kind {self.name!r} scores eval datasets only: {self.eval_only}")]
        if self.live_problems_for is None:
            return []
        return list(self.live_problems_for(self.options.model_validate(dict(options)), scope))

    @property
    def prebuilt(self) -> bool:
        """Shipped with the sidecar (not a user's ``python:`` kind registered on import)."""
        return getattr(self.factory, "__module__", "").startswith("sidecar.")

    def build(self, judge: JudgeModel | None, options: Mapping[str, Any]) -> Scorer:
        """Validate ``options`` with the kind's model and build the scorer."""
        if judge is None and self.needs_judge:
            raise ValueError(f"kind {self.name!r} needs a judge")
        return self.factory(judge, self.options.model_validate(dict(options)))


_KINDS: dict[str, ScorerKind[Any]] = {}
_BY_FACTORY: dict[Callable[..., Scorer], ScorerKind[Any]] = {}


def scorer_kind(
    name: str,
    *,
    options: type[OptionsT],
    needs_judge: bool,
    description: str,
    eval_only: str | None = None,
    judge_calls_per_run: float = 0.0,
    needs: Iterable[Need] = ("input", "output"),
    direction: Direction = "higher",
    needs_for: Callable[[OptionsT], Iterable[Need]] | None = None,
    scopes: Iterable[Scope] = SINGLE_RUN_SCOPES,
    facts_for: Callable[[OptionsT, ScorerFacts], ScorerFacts] | None = None,
    live_problems_for: Callable[[OptionsT, Scope], Iterable[LiveProblem]] | None = None,
) -> Callable[[Factory[OptionsT]], Factory[OptionsT]]:
    """Register ``factory(judge, options) -> Scorer`` as the kind ``name``."""
    if needs_judge and judge_calls_per_run <= 0:
        raise ValueError(f"scorer kind {name!r} needs a judge: say how many calls a run makes")

    def register(factory: Factory[OptionsT]) -> Factory[OptionsT]:
        if name in _KINDS:
            raise ValueError(f"scorer kind {name!r} is registered twice")
        kind = ScorerKind(
            name,
            factory,
            options,
            needs_judge,
            description,
            eval_only,
            judge_calls_per_run,
            frozenset(needs),
            direction,
            needs_for,
            frozenset(scopes),
            facts_for,
            live_problems_for,
        )
        _KINDS[name] = _BY_FACTORY[factory] = kind
        return factory

    return register


def kind_of(factory: object) -> ScorerKind[Any] | None:
    """The kind a factory was registered as (a ``python:`` factory decorated with ``@scorer_kind`` gets its
    options validated and its judge requirement checked like a prebuilt kind's)."""
    return _BY_FACTORY.get(factory) if callable(factory) else None


def registered_kinds() -> Mapping[str, ScorerKind[Any]]:
    """The kinds registered so far, read-only (``sidecar.scorers.catalog.scorer_kinds`` imports the prebuilt
    families first, so that every prebuilt kind is there)."""
    return MappingProxyType(_KINDS)
