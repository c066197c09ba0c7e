"""What the tool-use kinds share besides reading tool calls: the scale option and the scorer version."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel

from sidecar.scoring.prompting import round_to_two_decimals

__all__ = ["apply_scale", "options_version", "scale_of"]


def scale_of(scale: float | None) -> float:
    """The ``scale`` option as Mastra reads it: a falsy scale (absent, 0) is 1."""
    return scale or 1.0


def apply_scale(score: float, scale: float) -> float:
    """``score × scale``, rounded to two decimals like Mastra's scaled scores; scale 1 leaves Mastra's number
    untouched (so every number of Mastra's tests holds bit for bit)."""
    return score if scale == 1 else round_to_two_decimals(score * scale)


def options_version(options: BaseModel) -> str:
    """A scorer version naming its options: other options are another scorer, with other score ids."""
    payload = json.dumps(options.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return "1:" + hashlib.sha256(payload.encode()).hexdigest()[:12]
