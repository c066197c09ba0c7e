"""Metric label values read from traced content, bounded in length (docs/limits.md).

A label value from a span (an agent's name) is written by whoever instruments the agent: 200 KB names grew
``/metrics`` from 23 KB to 64 MB. A value up to ``MAX_LABEL_CHARS`` is its own label; a longer one is labelled by
its start and a hash of the whole, so distinct long names stay distinct series (their number is bounded apart,
``runtime.max_agent_labels``) and the same name gets the same label in every process and replica.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["AGENT_NOT_READ", "AGENT_UNNAMED", "MAX_LABEL_CHARS", "bounded_label"]

MAX_LABEL_CHARS: Final = 80
# The ``agent`` label when there is no agent name to show, each saying why: the run's spans name no agent
# (no gen_ai.agent.name, agent.name, ...; an LLM call outside any named agent), or runs counted before their spans
# were read (skipped by a scorer's filter or sampling, or too large to read).
AGENT_UNNAMED: Final = "unnamed"
AGENT_NOT_READ: Final = "not_read"
_HASH_CHARS: Final = 12


def bounded_label(value: str, max_chars: int = MAX_LABEL_CHARS) -> str:
    """``value`` itself when it fits, else its first characters, ``~`` and 12 hex digits of its SHA-256: at most
    ``max_chars`` characters."""
    if len(value) <= max_chars:
        return value
    digest = hashlib.sha256(value.encode("utf-8", errors="surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{value[: max(0, max_chars - _HASH_CHARS - 1)]}~{digest}"
