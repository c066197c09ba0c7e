"""``scorers``: one scorer each: its kind (checked against the kind registry), options, judge and targets."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Field,
    FilePath,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from sidecar.conventions.selection import AttributePredicate, NameFilter, Selection, SpanKind
from sidecar.core.runs import SCOPES, Scope
from sidecar.runtime.canary import CanaryItem, DatasetProblem, load_canary_items
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.registry import ScorerKind
from sidecar.settings.base import _Frozen, _non_empty
from sidecar.settings.errors import _message, _problem

__all__ = ["CanarySettings", "ScorerSettings", "ScorerTargets", "parse_python_kind", "scope_refusal"]


_PYTHON_KIND = re.compile(r"^python:\s*(?P<module>[A-Za-z_][\w.]*):(?P<factory>[A-Za-z_]\w*)$")


def parse_python_kind(kind: str) -> tuple[str, str] | None:
    """``python: package.module:factory`` → (module, factory); None for any other kind."""
    match = _PYTHON_KIND.match(kind.strip())
    return (match["module"], match["factory"]) if match else None


def scope_refusal(kind: str, scopes: frozenset[Scope], scope: Scope) -> str:
    """Why a kind cannot score at ``scope`` (its ``scopes`` do not hold it), and what to write instead."""
    listed = ", ".join(s for s in SCOPES if s in scopes)
    if scope == "session" and "session" not in scopes:
        # Mastra's single-turn extractors read the first user and assistant message of a run: over a whole
        # conversation such a kind would score turn 1 and call it the conversation's score.
        whole = sorted(name for name, k in scorer_kinds().items() if k.prebuilt and "session" in k.scopes)
        return (
            f"kind {kind!r} scores one agent run, one request and its answer (its scopes: {listed}): at scope "
            "session it would read the conversation's first turn only; use a kind that reads whole conversations "
            f"({', '.join(whole)}), or scope: trace to score every turn on its own"
        )
    if scopes == {"session"}:
        return f"kind {kind!r} reads whole conversations: it scores at scope session only (set targets.scope: session)"
    return f"kind {kind!r} does not score at scope {scope!r} (its scopes: {listed})"


class ScorerTargets(_Frozen):
    """Which spans a scorer scores: maps onto :class:`sidecar.conventions.Selection`."""

    kinds: tuple[SpanKind, ...] = ("agent",)  # agent (agent runs) and/or inference (LLM calls)
    agents: NameFilter = NameFilter()  # globs on gen_ai.agent.name (else gen_ai.agent.id)
    services: NameFilter = NameFilter()  # globs on the resource's service.name
    where: tuple[AttributePredicate, ...] = ()  # all must hold
    max_input_bytes: int = Field(default=256 * 1024, gt=0)  # text of one run; larger: not scored, too_large
    # span: each selected span is scored from its own attributes, as soon as it arrives. trace: each
    # selected agent span is scored with its descendants (LLM calls, tools, retrievals) once its trace is
    # done (runtime.trace_buffer says when). session: the turns of a conversation (each a whole-trace run),
    # together once no turn came for sessions.idle_s (the sessions block says where and how).
    scope: Scope = "span"

    @field_validator("kinds", mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    _not_empty = field_validator("kinds")(_non_empty)

    @model_validator(mode="after")
    def _trace_scope_scores_agents(self) -> ScorerTargets:
        if self.scope != "span" and self.kinds != ("agent",):
            what = (
                "assembles agent runs (an agent span with its LLM calls, tools and retrievals)"
                if self.scope == "trace"
                else "scores conversations of agent turns (each turn an agent span with its subtree)"
            )
            raise ValidationError.from_exception_data(
                type(self).__name__, [_problem(("kinds",), f"scope: {self.scope} {what}: kinds must be [agent]")]
            )
        return self


class CanarySettings(_Frozen):
    """The judge canary (docs/feedback.md): a labelled set scored through the live judge every ``every_s``."""

    dataset: FilePath  # JSONL: {"input", "output", "expected"} per line (id, system, ground_truth, context optional)
    every_s: float = Field(default=3600.0, ge=1.0, le=7 * 86400)  # how often the set is scored (one round)
    # JudgeDrift fires when the agreement falls under min_agreement, or moves from its baseline by more than max_drift.
    min_agreement: float = Field(default=0.8, ge=0.0, le=1.0)
    max_drift: float = Field(default=0.1, ge=0.0, le=1.0)  # how far the agreement may move from its baseline
    # The agreement the canary is held to; unset: the first round each process measures.
    baseline: float | None = Field(default=None, ge=0.0, le=1.0)
    agree_within: float = Field(default=0.2, ge=0.0, le=1.0)  # numbers agree within this much on 0–1

    @model_validator(mode="after")
    def _readable(self) -> CanarySettings:
        try:
            load_canary_items(self.dataset)
        except DatasetProblem as exc:
            raise ValidationError.from_exception_data(type(self).__name__, [_problem(("dataset",), str(exc))]) from None
        return self

    def items(self) -> list[CanaryItem]:
        return load_canary_items(self.dataset)


ScorerId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]


_SAMPLING = "a fraction from 0 to 1 of the traces to score: 0.25 scores a quarter of them (not 25%)"


class ScorerSettings(_Frozen):
    """One scorer: what it is (``kind``), which judge, its options, and what it scores."""

    id: ScorerId  # unique; becomes the scorer's id in scores, metrics and spans
    kind: str  # a registered kind (`scoring-sidecar kinds`) or "python: package.module:factory"
    judge: str | None = None  # a key of `judges`; required for LLM kinds
    options: dict[str, Any] = Field(default_factory=dict)  # passed to the scorer factory
    # Fraction of traces scored, deterministic per trace id (scope: session: of conversations, per conversation id).
    sampling: float = Field(default=1.0, ge=0.0, le=1.0)
    targets: ScorerTargets = ScorerTargets()
    scale: float = Field(default=1.0, gt=0)  # the score's maximum, to normalise metrics to [0, 1]
    # A labelled set scored through the live judge every every_s (``run`` only): is the judge itself drifting?
    canary: CanarySettings | None = None

    @field_validator("sampling", mode="before")
    @classmethod
    def _a_fraction(cls, value: Any) -> Any:
        # "25%" is natural to write: say what is meant instead of "unable to parse string as a number" (numbers
        # out of range keep the bounds' own message).
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise PydanticCustomError("settings", "{detail}", {"detail": _SAMPLING}) from None
        return value

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        kind = kind.strip()
        kinds = scorer_kinds()
        if kind in kinds or parse_python_kind(kind) is not None:
            return kind
        if kind.startswith("python:"):
            raise PydanticCustomError(
                "settings", "{detail}", {"detail": "a python kind reads 'python: package.module:factory'"}
            )
        close = difflib.get_close_matches(kind, list(kinds), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise PydanticCustomError(
            "settings",
            "{detail}",
            {
                "detail": f"unknown scorer kind{hint}; prebuilt kinds: {', '.join(sorted(kinds))}, "
                "or 'python: package.module:factory'"
            },
        )

    @model_validator(mode="after")
    def _options_fit_kind(self) -> ScorerSettings:
        # Prebuilt kinds validate their options with their own model here, so that a bad option is reported
        # with its key and line, and a typo with the option it was probably meant to be.
        kind = self.prebuilt
        if kind is None:
            return self
        try:
            kind.options.model_validate(self.options)
        except ValidationError as exc:
            raise ValidationError.from_exception_data(
                type(self).__name__, [_option_problem(kind, err) for err in exc.errors()]
            ) from None
        scopes = kind.facts_given(self.options).scopes
        if self.targets.scope not in scopes:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [_problem(("targets", "scope"), scope_refusal(kind.name, scopes, self.targets.scope))],
            )
        return self

    @model_validator(mode="after")
    def _canary_of_one_turn(self) -> ScorerSettings:
        if self.canary is not None and self.targets.scope == "session":
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [_problem(("canary",), "a canary's items are one-turn runs: a conversation scorer has no canary")],
            )
        return self

    @property
    def prebuilt(self) -> ScorerKind[Any] | None:
        return scorer_kinds().get(self.kind)

    @property
    def python_factory(self) -> tuple[str, str] | None:
        return parse_python_kind(self.kind)

    def live_problems(self, at: tuple[str | int, ...]) -> list[InitErrorDetails]:
        """Why this scorer cannot score live traffic at its scope (its kind scores eval datasets only, its options
        read what a live run there does not carry), each at its key under ``at`` (its place in the file)."""
        kind = self.prebuilt
        if kind is None:
            return []
        return [
            _problem((*at, "options", *loc) if loc else (*at, "kind"), message)
            for loc, message in kind.live_problems(self.options, self.targets.scope)
        ]

    @property
    def needs_judge(self) -> bool:
        kind = self.prebuilt
        return kind is not None and kind.needs_judge

    def selection(self) -> Selection:
        return Selection(
            kinds=frozenset(self.targets.kinds),
            agents=self.targets.agents,
            services=self.targets.services,
            where=self.targets.where,
            sample_rate=self.sampling,
            max_input_bytes=self.targets.max_input_bytes,
        )


def _option_problem(kind: ScorerKind[Any], err: Mapping[str, Any]) -> InitErrorDetails:
    loc = ("options", *err["loc"])
    if err["type"] != "extra_forbidden":
        return _problem(loc, _message(err))
    model = _options_model_at(kind.options, err["loc"][:-1])
    if model is None:
        return _problem(loc, f"unknown option of kind {kind.name!r}")
    # Options may be written in snake_case or in Mastra's camelCase.
    fields = model.model_fields
    allowed = sorted({name for name in fields} | {f.alias for f in fields.values() if f.alias})
    close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    what = "option" if model is kind.options else "field"
    return _problem(loc, f"unknown {what} of kind {kind.name!r} ({hint}{what}s: {', '.join(sorted(fields))})")


def _options_model_at(model: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    """The model validating the mapping at ``path`` inside a kind's options (a criterion of a rubric, …)."""
    annotation: Any = model
    for part in path:
        annotation = _strip_optional(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = annotation.model_fields
            field = fields.get(str(part)) or next((f for f in fields.values() if f.alias == part), None)
            if field is None:
                return None
            annotation = field.annotation
            continue
        args = typing.get_args(annotation)
        origin = typing.get_origin(annotation)
        if origin in (list, tuple) and args:
            annotation = args[0]
        elif origin is dict and len(args) == 2:
            annotation = args[1]
        else:
            return None
    annotation = _strip_optional(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation
