"""Eval datasets: JSONL or CSV items, each checked and turned into the run shape live scoring gives scorers."""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.conventions.session_turns import TurnCaps
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.core.text_files import NotUtf8, read_utf8
from sidecar.eval.conversation import DatasetTurn, TurnsError, parse_turns, session_request, turns_json
from sidecar.runtime.attempt import request_context_of
from sidecar.scorers.context import REQUEST_CONTEXT_KEY
from sidecar.scoring.agent import AgentRunInput, SystemMessage, assistant_message, user_message

__all__ = ["MAX_ITEM_DEPTH", "DatasetError", "EvalError", "EvalItem", "load_dataset"]

_LIVE_CAPS = TurnCaps()
# Nesting a dataset item may have (a run's messages, a tool call's arguments: a handful of levels). Deeper items
# are refused, named by their line, before anything recurses over them.
MAX_ITEM_DEPTH = 64

# The fields of a one-turn item, and of a conversation (an item with turns, for scope session scorers).
_TURN_ITEM_FIELDS = ("input", "output", "ground_truth", "request_context", "context", "id", "system", "expected")
_CONVERSATION_FIELDS = ("turns", "system", "id", "ground_truth", "request_context", "expected")
_FIELDS = (*_TURN_ITEM_FIELDS, "turns")


class EvalError(ValueError):
    """A dataset, threshold or configuration problem: exit code 2."""


class DatasetError(EvalError):
    """Every problem of a dataset, each ``path:line: message``, found in one pass over the whole file, so a
    dataset is fixed in one round instead of one line per run."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{path}: {count}\n" + "\n".join(f"  - {problem}" for problem in problems))


def _did_you_mean(name: str, *, conversation: bool = False) -> str:
    # Case-blind and strict enough that "question" is not taken for "request_context". The fields listed are
    # those of the item's shape: a conversation's when it has turns.
    close = difflib.get_close_matches(name.lower(), _FIELDS, n=1, cutoff=0.7)
    allowed = _CONVERSATION_FIELDS if conversation else _TURN_ITEM_FIELDS
    return f"did you mean '{close[0]}'?" if close else f"allowed: {', '.join(allowed)}"


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
    # A conversation (scope session scorers score it): its turns in order; input and output are then None.
    turns: tuple[DatasetTurn, ...] | None = None
    # A run a stage built from OTLP records (``eval --records``): the run itself, and the one scorer it is for.
    run: ScorerRunRequest | None = None
    scorer_id: str | None = None
    # A person's verdict (a number on the scorer's scale, a boolean, a label), for every scorer or by scorer id:
    # eval compares it with the score (sidecar.eval.agreement). Not part of the item's identity (its score ids).
    expected: Any = None

    @classmethod
    def of_run(cls, run: ScorerRunRequest, scorer_id: str, *, index: int, where: str) -> EvalItem:
        """A run found in records (``where``: the record it came from), scored by ``scorer_id`` only."""
        line = int(where.rsplit(":", 1)[1]) if where.rsplit(":", 1)[-1].isdigit() else 0
        return cls(index=index, line=line, input=None, output=None, id=where, run=run, scorer_id=scorer_id)

    @property
    def is_conversation(self) -> bool:
        if self.run is not None:
            return self.run.session is not None
        return self.turns is not None

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
        if self.turns is not None:
            body["turns"] = turns_json(self.turns)
        return json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)

    @property
    def size_bytes(self) -> int:
        """The item's content as UTF-8 JSON: what a live span's size is to ``targets.max_input_bytes``."""
        return len(self.canonical().encode("utf-8"))

    def _digest(self) -> str:
        return hashlib.sha256(f"{self.index}:{self.canonical()}".encode()).hexdigest()

    def request(self, caps: TurnCaps = _LIVE_CAPS) -> ScorerRunRequest:
        """The run a scorer scores for this item: one turn as span scope gives it, or a conversation's session
        run as stage 2 gives it (``session`` set, the target the last turn; each turn cut to ``caps``, as a live
        turn is); a run found in records as it is."""
        if self.run is not None:
            return self.run
        if self.turns is not None:
            return session_request(
                self.turns,
                seed=self._digest(),
                conversation_id=self.id or f"eval-item-{self.index}",
                system=self.system,
                label=f"eval item {self.id or self.index}",
                caps=caps,
            )
        return ScorerRunRequest.model_construct(target=self.target(), input=self.run_input(), output=self.run_output())

    def target(self) -> SpanTarget:
        if self.turns is not None or self.run is not None:
            return self.request().target
        digest = self._digest()
        return SpanTarget(
            trace_id=digest[:32],
            span_id=digest[32:48],
            span_name=f"eval item {self.id or self.index}",
            kind="agent",
            end_time_unix_nano=0,
        )

    def run_input(self) -> Any:
        if self.turns is not None:
            return self.request().input
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
        if self.turns is not None:
            return self.request().output
        if isinstance(self.output, str):
            return (assistant_message(self.output),)
        return self.output

    def run_request_context(self) -> dict[str, Any] | None:
        """The item's ``request_context`` with its ``context`` under ``"context"``, where the RAG scorers look (a run
        found in records: its retrieved documents, as the service gives them)."""
        if self.run is not None:
            found = request_context_of(self.run)
            return dict(found) if found is not None else None
        if self.context is None:
            return self.request_context
        return {**(self.request_context or {}), REQUEST_CONTEXT_KEY: list(self.context)}


def _item_from(data: Any, index: int, line: int, where: str) -> EvalItem:
    if not isinstance(data, Mapping):
        raise EvalError(f"{where}: an item must be an object with 'input' and 'output' (or 'turns')")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        conversation = data.get("turns") not in (None, "")
        named = "; ".join(f"'{name}' ({_did_you_mean(name, conversation=conversation)})" for name in unknown)
        raise EvalError(f"{where}: unknown field{'s' if len(unknown) > 1 else ''} {named}")
    if data.get("turns") not in (None, ""):
        return _conversation_from(data, index, line, where)
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
        expected=_expected_from(data.get("expected"), where),
    )


def _conversation_from(data: Mapping[str, Any], index: int, line: int, where: str) -> EvalItem:
    """An item with ``turns``: a conversation, for the scorers of scope session."""
    both = [name for name in ("input", "output") if data.get(name) not in (None, "")]
    if both:
        raise EvalError(
            f"{where}: an item holds one turn (input, output) or a conversation (turns), not both: "
            f"{' and '.join(repr(n) for n in both)} belong{'s' if len(both) == 1 else ''} in its turns"
        )
    if data.get("context") not in (None, ""):
        raise EvalError(f"{where}: a conversation has no 'context': its turns keep no retrieved documents")
    try:
        turns = parse_turns(data["turns"])
    except TurnsError as exc:
        raise EvalError(f"{where}: {exc}") from None
    context = data.get("request_context")
    if isinstance(context, str) and context:
        try:
            context = json.loads(context)
        except ValueError:
            raise EvalError(f"{where}: 'request_context' is not valid JSON") from None
    if context not in (None, "") and not isinstance(context, dict):
        raise EvalError(f"{where}: 'request_context' must be an object")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise EvalError(f"{where}: 'system' must be a string")
    item_id = data.get("id")
    ground_truth = data.get("ground_truth")
    return EvalItem(
        index=index,
        line=line,
        input=None,
        output=None,
        ground_truth=None if ground_truth == "" else ground_truth,
        request_context=context or None,
        id=None if item_id in (None, "") else str(item_id),
        system=system or None,
        turns=turns,
        expected=_expected_from(data.get("expected"), where),
    )


def _expected_from(value: Any, where: str) -> Any:
    """``expected``: a verdict (a number, a boolean, a label) for every scorer, or an object of scorer id → verdict.
    In CSV, ``true``/``false`` and numbers are read as such, anything else as a label; a JSON object as the
    per-scorer form."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                raise EvalError(f"{where}: 'expected' is not valid JSON") from None
        else:
            return _verdict_text(text)
    if isinstance(value, Mapping):
        verdicts = {str(scorer): _verdict(verdict, where) for scorer, verdict in value.items()}
        return {scorer: verdict for scorer, verdict in verdicts.items() if verdict is not None}
    return _verdict(value, where)


def _verdict(value: Any, where: str) -> bool | float | str | None:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    raise EvalError(f"{where}: 'expected' must be a number, a boolean or a label (or an object of them by scorer id)")


def _verdict_text(text: str) -> bool | float | str:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


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


def _readable(data: Any, where: str) -> None:
    """An item nested at most ``MAX_ITEM_DEPTH`` levels (walked without recursion)."""
    level: list[Any] = [data]
    for _ in range(MAX_ITEM_DEPTH + 1):
        level = [
            child
            for value in level
            if isinstance(value, dict | list)
            for child in (value.values() if isinstance(value, dict) else value)
        ]
        if not level:
            return
    raise EvalError(f"{where}: nests deeper than {MAX_ITEM_DEPTH} levels")


def _readable_text(item: EvalItem, where: str) -> None:
    """An item whose text is Unicode: a JSON escape such as "\\ud800" (half of a surrogate pair, alone) reads into
    a string that cannot be written out again, not to the judge, not to a score record."""
    try:
        item.canonical().encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end] if isinstance(exc.object, str) else ""
        shown = "".join(f"\\u{ord(c):04x}" for c in bad[:3])
        raise EvalError(f"{where}: holds a lone surrogate ({shown}), half of a character: not text") from None


def load_dataset(path: Path) -> list[EvalItem]:
    """Items of a ``.jsonl`` (also ``.json`` lines) or ``.csv`` file. Raises :class:`DatasetError` with every
    bad line of the file (or :class:`EvalError` when it cannot be read)."""
    try:
        text = read_utf8(path, bom=True)
    except OSError as exc:
        raise EvalError(f"cannot read {path}: {exc.strerror}") from None
    except NotUtf8 as exc:
        raise EvalError(str(exc)) from None
    items: list[EvalItem] = []
    problems: list[str] = []

    def add(data: Any, line: int) -> None:
        where = f"{path}:{line}"
        try:
            _readable(data, where)
            item = _item_from(data, len(items), line, where)
            _readable_text(item, where)
        except EvalError as exc:
            problems.append(str(exc))
        except RecursionError:  # a JSON string in a field (CSV's context, turns) nesting past what Python reads
            problems.append(f"{where}: nests deeper than {MAX_ITEM_DEPTH} levels")
        else:
            items.append(item)

    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        columns = [name for name in reader.fieldnames or () if name]
        unknown = [name for name in columns if name not in _FIELDS]
        for name in unknown:  # once, on the header: not again on every row
            problems.append(
                f"{path}:1: unknown column '{name}' ({_did_you_mean(name, conversation='turns' in columns)})"
            )
        lacking = [] if "turns" in columns else [r for r in ("input", "output") if r not in columns]
        for required in lacking:
            problems.append(f"{path}:1: the header has no '{required}' column")
        try:
            for row in reader:
                if lacking:
                    break  # the header already says what every row lacks
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue
                add({k: v for k, v in row.items() if k and k not in unknown}, reader.line_num)
        except csv.Error as exc:
            problems.append(f"{path}:{reader.line_num}: not valid CSV ({exc})")
    else:
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as exc:
                problems.append(f"{path}:{number}: not valid JSON ({exc})")
                continue
            except RecursionError:
                problems.append(f"{path}:{number}: nests deeper than {MAX_ITEM_DEPTH} levels")
                continue
            add(data, number)
    if problems:
        raise DatasetError(path, problems)
    if not items:
        raise EvalError(f"{path}: no items")
    return items
