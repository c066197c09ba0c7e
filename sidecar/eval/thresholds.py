"""Eval thresholds: bounds in [0, 1] on a scorer's average score divided by its scale."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sidecar.core.text_files import NotUtf8, read_utf8
from sidecar.eval.dataset import EvalError

__all__ = ["Threshold", "load_thresholds", "parse_threshold"]


@dataclass(frozen=True)
class Threshold:
    min: float | None = None
    max: float | None = None

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def __str__(self) -> str:
        if self.max is None:
            return f">= {self.min:g}"
        if self.min is None:
            return f"<= {self.max:g}"
        return f"{self.min:g}..{self.max:g}"


def _bound(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise EvalError(f"{what}: {value!r} is not a number") from None
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise EvalError(f"{what}: {number:g} is outside [0, 1] (bounds apply to score / scale)")
    return number


def _threshold(value: Any, what: str) -> Threshold:
    if isinstance(value, Mapping):
        unknown = set(value) - {"min", "max"}
        if unknown:
            raise EvalError(f"{what}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (use min, max)")
        low = _bound(value["min"], f"{what}.min") if value.get("min") is not None else None
        high = _bound(value["max"], f"{what}.max") if value.get("max") is not None else None
    else:
        low, high = _bound(value, what), None
    if low is None and high is None:
        raise EvalError(f"{what}: give a min, a max or both")
    if low is not None and high is not None and low > high:
        raise EvalError(f"{what}: min {low:g} is above max {high:g}")
    return Threshold(low, high)


def parse_threshold(text: str) -> tuple[str, Threshold]:
    """``ID=MIN``, ``ID=MIN:MAX``, ``ID=:MAX`` → (scorer id, threshold)."""
    scorer, sep, bounds = text.partition("=")
    if not sep or not scorer.strip():
        raise EvalError(f"--threshold {text!r}: use ID=MIN or ID=MIN:MAX")
    low_text, colon, high_text = bounds.partition(":")
    spec: dict[str, Any] = {"min": low_text.strip() or None}
    if colon:
        spec["max"] = high_text.strip() or None
    return scorer.strip(), _threshold(spec, f"--threshold {scorer.strip()}")


def load_thresholds(path: Path) -> dict[str, Threshold]:
    """A YAML mapping: scorer id → ``MIN`` or ``{min, max}`` (optionally under a top-level ``thresholds`` key)."""
    try:
        data = yaml.safe_load(read_utf8(path))
    except NotUtf8 as exc:
        raise EvalError(str(exc)) from None
    except OSError as exc:
        raise EvalError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise EvalError(f"{path}: YAML error: {exc}") from None
    if isinstance(data, Mapping) and set(data) == {"thresholds"}:
        data = data["thresholds"]
    if not isinstance(data, Mapping):
        raise EvalError(f"{path}: expected a mapping of scorer id → min or {{min, max}}")
    return {str(k): _threshold(v, f"{path}: {k}") for k, v in data.items()}
