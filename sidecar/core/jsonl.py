"""A small JSONL file a configuration names (a judge's examples, a canary's labelled set), read and checked once:
each line validated by a pydantic model, every bad line named, the file's size bounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["JsonlProblem", "read_jsonl"]

M = TypeVar("M", bound=BaseModel)
_LISTED = 5  # bad lines named; more are counted


class JsonlProblem(ValueError):
    """What is wrong with the file: it cannot be read, is too large, or has bad lines (each named)."""


def read_jsonl(path: Path, model: type[M], *, max_bytes: int) -> list[tuple[int, M]]:
    """(line number, item) of every non-blank line of ``path``, each validated by ``model``."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise JsonlProblem(f"{path} is {size} bytes: at most {max_bytes}")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise JsonlProblem(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise JsonlProblem(f"{path}: not UTF-8 ({exc.reason})") from None
    items: list[tuple[int, M]] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((number, model.model_validate(json.loads(line))))
        except ValidationError as exc:
            first = exc.errors()[0]
            problems.append(f"line {number}: {'.'.join(str(p) for p in first['loc']) or 'item'}: {first['msg']}")
        except ValueError as exc:
            problems.append(f"line {number}: not JSON ({exc})")
    if problems:
        more = "; …" if len(problems) > _LISTED else ""
        raise JsonlProblem(f"{path}: " + "; ".join(problems[:_LISTED]) + more)
    return items
