"""The base of every configuration block, for the settings and for the plugins that declare their own (an
exporter's block, a scorer kind's options): frozen, unknown keys refused, and problems reported with their
key path so that the loader can add the YAML line (``sidecar.settings``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["FrozenConfig", "config_problem", "empty_is_unset", "raise_problems", "secret_value"]


class FrozenConfig(BaseModel):
    """A configuration block: immutable, and a typo'd key is an error naming it."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def config_problem(loc: tuple[str | int, ...], message: str) -> InitErrorDetails:
    """One problem at ``loc`` (relative to the block validating it). The message goes through a template
    placeholder, since it may itself contain braces; it must never quote an input value (secrets)."""
    return InitErrorDetails(type=PydanticCustomError("settings", "{detail}", {"detail": message}), loc=loc, input=None)


def raise_problems(model: type[BaseModel], problems: Sequence[InitErrorDetails]) -> None:
    """Raise every problem at once (a validator reports all it found, not the first)."""
    if problems:
        _raise(model, problems)


def _raise(model: type[BaseModel], problems: Sequence[InitErrorDetails]) -> NoReturn:
    raise ValidationError.from_exception_data(model.__name__, list(problems))


def empty_is_unset(value: Any) -> Any:
    """An empty string on an optional key means "not set", so that ``${VAR:-}`` can switch a feature off."""
    return None if isinstance(value, str) and not value.strip() else value


def secret_value(setting: SecretStr | None, env_var: str, environ: Mapping[str, str] | None = None) -> str:
    """A secret in clear: the setting when it is set, else the environment variable ``env_var`` (``""`` when
    neither is). Surrounding whitespace is dropped: a key mounted from a file (a Kubernetes secret read into
    the variable) usually ends with a line break, which no HTTP header may hold. Never log what it returns."""
    env = os.environ if environ is None else environ
    value = setting.get_secret_value() if setting is not None else env.get(env_var, "")
    return value.strip()
