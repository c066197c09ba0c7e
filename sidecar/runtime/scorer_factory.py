"""Scorers from settings: prebuilt kinds by name, or a user's own factory (``python: module:factory``).

A ``python:`` factory is called with keyword arguments only:

- if its signature has a ``judge`` parameter (or ``**kwargs``): ``factory(judge=JudgeModel | None, options=dict)``;
- otherwise: ``factory(**options)``.

The module must be importable by the service (installed, or on ``PYTHONPATH``: the console script does
not add the working directory). It must return a :class:`sidecar.scoring.Scorer`. Whatever it returns,
the scorer's ``id`` becomes the configured ``id`` (two configured instances never share score ids).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from sidecar.runtime.settings import (
    PREBUILT_SCORER_KINDS,
    ScorerSettings,
    Settings,
    SettingsError,
    SettingsProblem,
)
from sidecar.scorers.content_similarity import create_content_similarity_scorer
from sidecar.scorers.prompt_alignment import create_prompt_alignment_scorer_llm
from sidecar.scoring import JudgeModel, Scorer

__all__ = ["PREBUILT_SCORERS", "build_scorer", "build_scorers"]

PrebuiltFactory = Callable[[JudgeModel | None, dict[str, Any]], Scorer]


def _prompt_alignment(judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    if judge is None:
        raise ValueError("prompt-alignment needs a judge")
    return create_prompt_alignment_scorer_llm(model=judge, options=options)


def _content_similarity(judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    return create_content_similarity_scorer(options=options)


PREBUILT_SCORERS: Mapping[str, PrebuiltFactory] = {
    "prompt-alignment": _prompt_alignment,
    "content-similarity": _content_similarity,
}
assert set(PREBUILT_SCORERS) == set(PREBUILT_SCORER_KINDS)


def _error(index: int | None, key: str, message: str) -> SettingsError:
    path = f"scorers[{index}].{key}" if index is not None else key
    return SettingsError([SettingsProblem(path, None, message)])


def _call_python_factory(factory: Callable[..., Any], judge: JudgeModel | None, options: dict[str, Any]) -> Any:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature: use the documented convention
        return factory(judge=judge, options=options)
    takes_judge = "judge" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if takes_judge:
        return factory(judge=judge, options=options)
    return factory(**options)


def build_scorer(settings: ScorerSettings, judges: Mapping[str, JudgeModel], *, index: int | None = None) -> Scorer:
    """The scorer ``settings`` describes. ``judges`` are the configured judge models by name.

    Raises :class:`SettingsError` (path ``scorers[index].<key>``) when it cannot be built.
    """
    judge: JudgeModel | None = None
    if settings.judge is not None:
        judge = judges.get(settings.judge)
        if judge is None:
            raise _error(index, "judge", f"no judge named {settings.judge!r}")
    prebuilt = PREBUILT_SCORERS.get(settings.kind)
    options = dict(settings.options)
    if prebuilt is not None:
        if judge is None and PREBUILT_SCORER_KINDS[settings.kind]:
            raise _error(index, "judge", f"kind {settings.kind!r} needs a judge")
        try:
            scorer = prebuilt(judge, options)
        except Exception as exc:
            raise _error(index, "options", f"cannot build {settings.kind!r}: {type(exc).__name__}: {exc}") from exc
    else:
        target = settings.python_factory
        if target is None:  # not reachable through validated settings
            raise _error(index, "kind", f"unknown scorer kind {settings.kind!r}")
        module_name, attribute = target
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise _error(index, "kind", f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
        factory = getattr(module, attribute, None)
        if not callable(factory):
            raise _error(index, "kind", f"{module_name}:{attribute} is not a callable in {module_name!r}")
        try:
            scorer = _call_python_factory(factory, judge, options)
        except Exception as exc:
            raise _error(index, "kind", f"{module_name}:{attribute}(...) raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(scorer, Scorer):
            raise _error(
                index,
                "kind",
                f"{module_name}:{attribute} returned {type(scorer).__name__}, not a sidecar.scoring.Scorer",
            )
    name = settings.id if scorer.name == scorer.id else scorer.name
    return dataclasses.replace(scorer, id=settings.id, name=name)


def build_scorers(settings: Settings) -> dict[str, Scorer]:
    """Every configured scorer by id; all problems are reported together in one :class:`SettingsError`."""
    judges = settings.judge_models()
    scorers: dict[str, Scorer] = {}
    problems: list[SettingsProblem] = []
    for i, scorer_settings in enumerate(settings.scorers):
        try:
            scorers[scorer_settings.id] = build_scorer(scorer_settings, judges, index=i)
        except SettingsError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SettingsError(problems)
    return scorers
