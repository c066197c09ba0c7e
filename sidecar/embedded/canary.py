"""The demo's judge canary (docs/feedback.md): a small labelled set made from the synthetic agents' own exchanges,
each labelled as the demo's reviewer would (prompt alignment holds unless the answer is a poor one), written where
the demo's configuration points ``canary.dataset``."""

from __future__ import annotations

import json
from pathlib import Path

from sidecar.embedded.traffic import AGENTS

__all__ = ["CANARY_FILE", "write_canary_dataset"]

CANARY_FILE = "demo-canary.jsonl"


def write_canary_dataset(directory: Path) -> Path:
    """The labelled set, one item per synthetic exchange, in ``directory``; its path."""
    rows = [
        {
            "id": f"{agent.name}-{number}",
            "input": exchange.user,
            "output": exchange.answer,
            "system": agent.system,
            "expected": exchange.quality != "poor",
        }
        for agent in AGENTS
        for number, exchange in enumerate(agent.conversations, start=1)
    ]
    path = directory / CANARY_FILE
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path
