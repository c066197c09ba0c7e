"""Conversation items of an ``eval`` dataset: ``turns`` (each an ``input``, an ``output`` and optional
``tool_calls``), read and checked, then built into the session run the service hands to scorers at
``scope: session`` (the contract in ``sidecar.core.runs``: turn ``i`` is input message ``i`` and output message
``i``, the window's turns carry ids, the target is the last turn's agent span).

.. code-block:: json

    {"id": "lost-order", "system": "You are a support agent.",
     "turns": [{"input": "Where is order 1234?", "output": "It is lost.",
                "tool_calls": [{"name": "lookup_order", "arguments": {"id": 1234}, "result": {"status": "lost"}}]},
               {"input": "Refund it.", "output": "Refunded."}]}
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.conventions.session_runs import session_run
from sidecar.conventions.session_turns import TurnCaps, TurnSummary, TurnTool, cap_turn
from sidecar.core.runs import ScorerRunRequest

__all__ = ["DatasetToolCall", "DatasetTurn", "TurnsError", "parse_turns", "session_request", "turns_json"]

_TURN_FIELDS = ("input", "output", "tool_calls")
_LIVE_CAPS = TurnCaps()
_CALL_FIELDS = ("name", "arguments", "result")


class TurnsError(ValueError):
    """A ``turns`` value that is not a list of turns (the dataset reports it with its line)."""


@dataclass(frozen=True)
class DatasetToolCall:
    name: str
    arguments: Any = None
    result: Any = None
    answered: bool = True  # a result was given (a call without one reads as made, not answered)


@dataclass(frozen=True)
class DatasetTurn:
    input: str
    output: str
    tool_calls: tuple[DatasetToolCall, ...] = ()


def parse_turns(value: Any) -> tuple[DatasetTurn, ...]:
    """``turns`` as a dataset writes it (a list, or in CSV a JSON string of one). Raises :class:`TurnsError`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise TurnsError("'turns' is not valid JSON (a list of {input, output, tool_calls})") from None
    if not isinstance(value, list) or not value:
        raise TurnsError("'turns' must be a non-empty list of {input, output, tool_calls}")
    return tuple(_turn(turn, i) for i, turn in enumerate(value, 1))


def _turn(value: Any, number: int) -> DatasetTurn:
    where = f"turns[{number - 1}] (turn {number})"
    if not isinstance(value, Mapping):
        raise TurnsError(f"{where}: a turn is an object with 'input' and 'output'")
    unknown = sorted(set(value) - set(_TURN_FIELDS))
    if unknown:
        raise TurnsError(f"{where}: unknown field {_named(unknown[0], _TURN_FIELDS)}")
    text_in, text_out = value.get("input"), value.get("output")
    if not isinstance(text_in, str) or not text_in:
        raise TurnsError(f"{where}: 'input' (the user's message) must be a non-empty string")
    if not isinstance(text_out, str):
        raise TurnsError(f"{where}: 'output' (the agent's answer) must be a string")
    calls = value.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TurnsError(f"{where}: 'tool_calls' must be a list of {{name, arguments, result}}")
    return DatasetTurn(
        text_in, text_out, tuple(_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls))
    )


def _call(value: Any, where: str) -> DatasetToolCall:
    if not isinstance(value, Mapping):
        raise TurnsError(f"{where}: a tool call is an object with 'name', 'arguments' and 'result'")
    unknown = sorted(set(value) - set(_CALL_FIELDS))
    if unknown:
        raise TurnsError(f"{where}: unknown field {_named(unknown[0], _CALL_FIELDS)}")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise TurnsError(f"{where}: 'name' must be a non-empty string")
    return DatasetToolCall(name, value.get("arguments"), value.get("result"), "result" in value)


def _named(name: str, allowed: Sequence[str]) -> str:
    close = difflib.get_close_matches(name.lower(), allowed, n=1, cutoff=0.6)
    return f"'{name}' (" + (f"did you mean '{close[0]}'?" if close else f"allowed: {', '.join(allowed)}") + ")"


def turns_json(turns: Sequence[DatasetTurn]) -> list[dict[str, Any]]:
    """The turns as plain JSON, for an item's canonical form (its score ids)."""
    return [
        {
            "input": t.input,
            "output": t.output,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments, **({"result": c.result} if c.answered else {})}
                for c in t.tool_calls
            ],
        }
        for t in turns
    ]


def session_request(
    turns: Sequence[DatasetTurn],
    *,
    seed: str,
    conversation_id: str,
    system: str | None,
    label: str,
    caps: TurnCaps = _LIVE_CAPS,
) -> ScorerRunRequest:
    """The session run of a conversation item, built as stage 2 builds a window's: ids derived from ``seed`` (the
    item's digest), so that the same item gives the same trace and span ids, hence the same score ids, in every
    run. An item has no clock: its turns are in the dataset's order, and the window is whole. Each turn is cut to
    ``caps`` as stage 1 cuts a live turn (``sessions.caps``)."""
    ids = [hashlib.sha256(f"{seed}:turn:{i}".encode()).hexdigest() for i in range(len(turns))]
    summaries = [
        cap_turn(
            TurnSummary(
                conversation_id=conversation_id,
                trace_id=digest[:32],
                span_id=digest[32:48],
                span_name=label,
                start_time_unix_nano=0,
                end_time_unix_nano=0,
                system=(system or "") if i == 0 else "",
                user=turn.input,
                answer=turn.output,
                tools=tuple(
                    TurnTool(id=f"{digest[32:48]}-call-{j}", name=c.name, args=c.arguments, result=c.result)
                    for j, c in enumerate(turn.tool_calls)
                ),
            ),
            caps,
        )
        for i, (turn, digest) in enumerate(zip(turns, ids, strict=True))
    ]
    return session_run(conversation_id, summaries, "idle", ordered=True)
