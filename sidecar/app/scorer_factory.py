"""Scorers from settings: prebuilt kinds by name (``sidecar.scorers.registry``), or a user's own factory
(``python: module:factory``).

A ``python:`` factory is called with keyword arguments only:

- if its signature has a ``judge`` parameter (or ``**kwargs``): ``factory(judge=JudgeModel | None, options=dict)``;
- otherwise: ``factory(**options)``.

The module must be importable by the service (installed, or on ``PYTHONPATH``: the console script does
not add the working directory). It must return a :class:`sidecar.scoring.Scorer`. Whatever it returns,
the scorer's ``id`` becomes the configured ``id`` (two configured instances never share score ids).

Every prompt step of every scorer must call a judge declared under ``judges`` (the same model with the
same settings): the runtime binds each step to that judge's client, with its limits, circuit breaker and
spend cap. A step calling any other model is a configuration error, never an unlimited client.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from sidecar.app.redactors import RedactionConflictError, scorer_redaction
from sidecar.scorers.registry import ScorerFacts, ScorerKind, kind_of
from sidecar.scoring import JudgeModel, Scorer
from sidecar.scoring.errors import ScorerDefinitionError
from sidecar.settings import EvalSettings, ScorerSettings, SettingsError, SettingsProblem, scope_refusal

__all__ = ["ScorerBuildError", "build_scorer", "build_scorers", "facts_for", "kind_for", "undeclared_judges"]


def _call_python_factory(factory: Callable[..., Any], judge: JudgeModel | None, options: dict[str, Any]) -> Any:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature: use the documented convention
        return factory(judge=judge, options=options)
    takes_judge = "judge" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if takes_judge:
        return factory(judge=judge, options=options)
    return factory(**options)


def _python_scorer(target: tuple[str, str], judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    module_name, attribute = target
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ValueError(f"{module_name}:{attribute} is not a callable in {module_name!r}")
    kind = kind_of(factory)
    if kind is not None:  # declared with @scorer_kind: built like a prebuilt kind
        try:
            return kind.build(judge, options)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
            raise ValueError(f"options of {module_name}:{attribute} ({kind.name!r}): {problems}") from exc
        except Exception as exc:
            raise ValueError(f"{module_name}:{attribute}(...) raised {type(exc).__name__}: {exc}") from exc
    try:
        scorer = _call_python_factory(factory, judge, options)
    except Exception as exc:
        raise ValueError(f"{module_name}:{attribute}(...) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(scorer, Scorer):
        raise ValueError(f"{module_name}:{attribute} returned {type(scorer).__name__}, not a sidecar.scoring.Scorer")
    return scorer


def kind_for(settings: ScorerSettings) -> ScorerKind[Any] | None:
    """The registered kind a scorer was built from: prebuilt, or a ``python:`` factory declared with
    ``@scorer_kind`` (``None`` for a plain python factory)."""
    if settings.prebuilt is not None:
        return settings.prebuilt
    target = settings.python_factory
    if target is None:
        return None
    try:
        module = importlib.import_module(target[0])
    except Exception:
        return None
    return kind_of(getattr(module, target[1], None))


def build_scorer(settings: ScorerSettings, judges: Mapping[str, JudgeModel]) -> Scorer:
    """The scorer ``settings`` describes; ``judges`` are the declared judge models by name.

    Raises :class:`ScorerBuildError` naming the key at fault (``judge``, ``options``, ``kind``)."""
    judge: JudgeModel | None = None
    if settings.judge is not None:
        judge = judges.get(settings.judge)
        if judge is None:
            raise ScorerBuildError("judge", f"no judge named {settings.judge!r}")
    kind = settings.prebuilt
    if kind is not None:
        try:
            scorer = kind.build(judge, settings.options)
        except Exception as exc:
            raise ScorerBuildError("options", f"cannot build {kind.name!r}: {type(exc).__name__}: {exc}") from exc
    else:
        target = settings.python_factory
        if target is None:  # not reachable through validated settings
            raise ScorerBuildError("kind", f"unknown scorer kind {settings.kind!r}")
        try:
            scorer = _python_scorer(target, judge, dict(settings.options))
        except ValueError as exc:
            raise ScorerBuildError("kind", str(exc)) from exc
    name = settings.id if scorer.name == scorer.id else scorer.name
    return dataclasses.replace(scorer, id=settings.id, name=name)


def undeclared_judges(scorer: Scorer, judges: Mapping[str, JudgeModel]) -> list[str]:
    """Why each prompt step whose judge model is not a declared judge cannot run (empty: all declared)."""
    declared = {model.cache_key() for model in judges.values()}
    try:
        steps = scorer.judge_models()
    except ScorerDefinitionError as exc:
        return [str(exc)]
    problems = []
    for step, model in steps.items():
        if model.cache_key() in declared:
            continue
        listed = ", ".join(f"{name} = {m.model}" for name, m in judges.items()) or "none"
        same_name = [name for name, m in judges.items() if m.litellm_model == model.litellm_model]
        if same_name:
            theirs = judges[same_name[0]]
            differ = sorted(key for key in JudgeModel.model_fields if getattr(theirs, key) != getattr(model, key))
            why = f"same model as judges.{same_name[0]} but different {', '.join(differ)}"
        else:
            why = f"declared judges: {listed}"
        problems.append(
            f"step {step} calls judge model {model.model!r}, which is not a declared judge ({why}); a scorer "
            "may only call judges declared under `judges`, so that their limits and spend cap apply (a python "
            "factory should use the `judge` it is given)"
        )
    return problems


class ScorerBuildError(Exception):
    """A scorer that cannot be built; ``key`` is the configuration key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def build_scorers(settings: EvalSettings) -> dict[str, Scorer]:
    """Every configured scorer by id, each checked to call only declared judges; every problem is reported
    together in one :class:`SettingsError` (key and line)."""
    judges = settings.judge_models()
    scorers: dict[str, Scorer] = {}
    problems: list[SettingsProblem] = []

    def report(index: int, key: str, message: str) -> None:
        path = f"scorers[{index}].{key}"
        problems.append(SettingsProblem(path, settings.line_of(path), message))

    for i, scorer_settings in enumerate(settings.scorers):
        try:
            scorer = build_scorer(scorer_settings, judges)
        except ScorerBuildError as fault:
            report(i, fault.key, fault.message)
            continue
        key = "kind" if scorer_settings.python_factory is not None else "judge"
        for problem in undeclared_judges(scorer, judges):
            report(i, key, problem)
        try:
            scorer_redaction(scorer, settings, scorer_settings.judge)
        except RedactionConflictError as conflict:
            report(i, key, str(conflict))
        declared = kind_for(scorer_settings) if scorer_settings.prebuilt is None else None
        scope = scorer_settings.targets.scope
        if declared is not None and scope not in (scopes := declared.facts_given(scorer_settings.options).scopes):
            # A python factory declared with @scorer_kind states its scopes as a prebuilt kind does.
            report(i, "targets.scope", scope_refusal(declared.name, scopes, scope))
        scorers[scorer_settings.id] = scorer
    if problems:
        raise SettingsError(problems)
    return scorers


def facts_for(settings: ScorerSettings, scorer: Scorer) -> ScorerFacts:
    """The configured scorer's facts: its kind's as its options set them; for a plain ``python:`` factory,
    what the scorer shows (one judge call per prompt step; it declares no parts it reads)."""
    kind = kind_for(settings)
    if kind is not None:
        return kind.facts_given(settings.options)
    return ScorerFacts(judge_calls_per_run=float(len(scorer.judge_models())), needs=frozenset())
