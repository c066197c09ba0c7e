"""Options as a prebuilt scorer's factory takes them: the typed model, or the mapping a configuration holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

OptionsT = TypeVar("OptionsT", bound=BaseModel)


def options_as(model: type[OptionsT], options: OptionsT | Mapping[str, Any] | None) -> OptionsT:
    """The options validated as ``model``; a model instance passes as it is, ``None`` is the defaults."""
    if isinstance(options, model):
        return options
    return model.model_validate(options or {})
