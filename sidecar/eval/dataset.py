"""Eval datasets: JSONL or CSV items, each checked and turned into the run shape live scoring gives scorers."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.core import SpanTarget
from sidecar.scorers.context import REQUEST_CONTEXT_KEY
from sidecar.scoring.agent import AgentRunInput, SystemMessage, assistant_message, user_message

__all__ = ["EvalError", "EvalItem", "load_dataset"]

_FIELDS = ("input", "output", "ground_truth", "request_context", "context", "id", "system")


class EvalError(ValueError):
    """A dataset, threshold or configuration problem: exit code 2."""


# --------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class EvalItem:
    index: int  # 0-based position in the dataset
    line: int  # 1-based line of the item in the file (CSV: the row's line)
    input: Any
    output: Any
    ground_truth: Any = None
    request_context: dict[str, Any] | None = None
    id: str | None = None
    system: str | None = None
    # Retrieved documents for the RAG scorers; delivered as request_context["context"].
    context: tuple[str, ...] | None = None

    def canonical(self) -> str:
        body: dict[str, Any] = {
            "input": self.input,
            "output": self.output,
            "ground_truth": self.ground_truth,
            "request_context": self.request_context,
            "system": self.system,
        }
        if self.context is not None:  # only when given: items without context keep their score ids
            body["context"] = list(self.context)
        return json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)

    def target(self) -> SpanTarget:
        digest = hashlib.sha256(f"{self.index}:{self.canonical()}".encode()).hexdigest()
        return SpanTarget(
            trace_id=digest[:32],
            span_id=digest[32:48],
            span_name=f"eval item {self.id or self.index}",
            kind="agent",
            end_time_unix_nano=0,
        )

    def run_input(self) -> Any:
        if isinstance(self.input, str):
            systems = (SystemMessage(content=self.system),) if self.system else ()
            return AgentRunInput(input_messages=(user_message(self.input),), system_messages=systems)
        if isinstance(self.input, Mapping) and "inputMessages" in self.input:
            try:
                return AgentRunInput.model_validate(self.input)
            except ValueError:
                return self.input
        return self.input

    def run_output(self) -> Any:
        if isinstance(self.output, str):
            return (assistant_message(self.output),)
        return self.output

    def run_request_context(self) -> dict[str, Any] | None:
        """The item's ``request_context`` with its ``context`` under ``"context"``, where the RAG scorers look."""
        if self.context is None:
            return self.request_context
        return {**(self.request_context or {}), REQUEST_CONTEXT_KEY: list(self.context)}


def _item_from(data: Any, index: int, line: int, where: str) -> EvalItem:
    if not isinstance(data, Mapping):
        raise EvalError(f"{where}: an item must be an object with 'input' and 'output'")
    unknown = set(data) - set(_FIELDS)
    if unknown:
        raise EvalError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (allowed: {', '.join(_FIELDS)})")
    for required in ("input", "output"):
        if data.get(required) in (None, ""):
            raise EvalError(f"{where}: '{required}' is required")
    context = data.get("request_context")
    if context in (None, ""):
        context = None
    elif isinstance(context, str):
        try:
            context = json.loads(context)
        except ValueError:
            raise EvalError(f"{where}: 'request_context' is not valid JSON") from None
    if context is not None and not isinstance(context, dict):
        raise EvalError(f"{where}: 'request_context' must be an object")
    documents = _context_from(data.get("context"), where)
    if documents is not None and context is not None and REQUEST_CONTEXT_KEY in context:
        raise EvalError(
            f"{where}: 'context' is given twice (the field and request_context.{REQUEST_CONTEXT_KEY}): keep one"
        )
    ground_truth = data.get("ground_truth")
    item_id = data.get("id")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise EvalError(f"{where}: 'system' must be a string")
    return EvalItem(
        index=index,
        line=line,
        input=data["input"],
        output=data["output"],
        ground_truth=None if ground_truth == "" else ground_truth,
        request_context=context,
        id=None if item_id in (None, "") else str(item_id),
        system=system or None,
        context=documents,
    )


def _context_from(value: Any, where: str) -> tuple[str, ...] | None:
    """The ``context`` field: a list of strings (in CSV, or anywhere, a JSON string of one); empty is allowed."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise EvalError(f"{where}: 'context' is not valid JSON (a list of strings, e.g. [\"doc one\"])") from None
    if not isinstance(value, list) or not all(isinstance(piece, str) for piece in value):
        raise EvalError(f"{where}: 'context' must be a list of strings")
    return tuple(value)


def load_dataset(path: Path) -> list[EvalItem]:
    """Items of a ``.jsonl`` (also ``.json`` lines) or ``.csv`` file. Raises :class:`EvalError`."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise EvalError(f"cannot read {path}: {exc.strerror}") from None
    items: list[EvalItem] = []
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames or not {"input", "output"} <= set(reader.fieldnames):
            raise EvalError(f"{path}: the CSV header must name 'input' and 'output' columns")
        for row in reader:
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            data = {k: v for k, v in row.items() if k}
            items.append(_item_from(data, len(items), reader.line_num, f"{path}:{reader.line_num}"))
    else:
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise EvalError(f"{path}:{number}: not valid JSON ({exc})") from None
            items.append(_item_from(data, len(items), number, f"{path}:{number}"))
    if not items:
        raise EvalError(f"{path}: no items")
    return items
