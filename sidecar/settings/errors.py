"""What an invalid configuration reports: problems with a path and a line, never an input value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.core.config import config_problem

__all__ = ["SettingsError", "SettingsProblem"]


@dataclass(frozen=True, slots=True)
class SettingsProblem:
    path: str  # dotted, list indexes in brackets: scorers[1].judge
    line: int | None  # 1-based line in the YAML text, when known
    message: str

    def __str__(self) -> str:
        where = self.path or "(top level)"
        return f"{where} (line {self.line}): {self.message}" if self.line is not None else f"{where}: {self.message}"


class SettingsError(ValueError):
    """An invalid configuration: every problem found, one per line. Never contains input values."""

    def __init__(self, problems: Sequence[SettingsProblem], source: str | None = None) -> None:
        self.problems = tuple(problems)
        self.source = source
        head = f"invalid configuration{f' {source}' if source else ''}: {len(self.problems)} problem(s)"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


_problem = config_problem


def _message(err: Mapping[str, Any]) -> str:
    # The error's own message only: pydantic's str(ValidationError) would echo the input value.
    if err["type"] == "missing":
        return "required key is missing"
    return str(err["msg"])
