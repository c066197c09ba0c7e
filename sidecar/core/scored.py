"""The scored run: what the runtime hands to every destination, and its deterministic id."""

from __future__ import annotations

import functools
import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Literal

from sidecar.core.runs import RunPart, ScorerRunRequest
from sidecar.scoring.errors import ScorerRunError
from sidecar.scoring.types import ScorerRunResult

__all__ = ["SCORE_ID_NAMESPACE", "RunOutcome", "ScoredRun", "score_id_for", "score_id_of"]

# Fixed namespace: score ids must be the same in every replica and every restart.
SCORE_ID_NAMESPACE = uuid.UUID("6f1d2c1e-8a1b-5d4e-9c3f-5c0a1e7b2d90")

RunOutcome = Literal["scored", "failed", "not_scorable"]


_NAMESPACE_BYTES = SCORE_ID_NAMESPACE.bytes


def score_id_for(scorer_fingerprint: str, trace_id: str, span_id: str) -> str:
    """Deterministic UUIDv5 of (scorer fingerprint, trace id, span id): the id of a score on one span."""
    return score_id_of(scorer_fingerprint, f"{trace_id.lower()}:{span_id.lower()}")


@functools.lru_cache(maxsize=4096)  # a run and its ScoredRun both ask for it
def score_id_of(scorer_fingerprint: str, subject: str) -> str:
    """Deterministic UUIDv5 of (scorer fingerprint, what is scored): ``subject`` is a run's
    :attr:`~sidecar.core.runs.ScorerRunRequest.subject`, the same in every replica and on every redelivery.

    Equal to ``str(uuid.uuid5(SCORE_ID_NAMESPACE, name))`` (a property test checks it), without building
    a ``UUID`` object: every run computes one."""
    name = f"{scorer_fingerprint}:{subject}".encode()
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
class ScoredRun:
    """A finished scorer run on one span, whatever its outcome."""

    request: ScorerRunRequest
    scorer_id: str
    scorer_name: str
    scorer_fingerprint: str
    outcome: RunOutcome
    # scored / not_scorable: the run's result. failed: the error's snapshot (may be None).
    result: ScorerRunResult | None
    error: ScorerRunError | None
    started_unix_nano: int
    finished_unix_nano: int
    agent_label: str = "unknown"  # bounded label for metrics (agent name, or "unknown")
    # Parts the scorer reads that the run lacked (the score judged the rest): see core.runs.missing_parts.
    missing: tuple[RunPart, ...] = ()
    # Derived once: every sink reads it.
    score_id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "score_id", score_id_of(self.scorer_fingerprint, self.request.subject))

    @property
    def degraded(self) -> bool:
        """Scored without a part the scorer reads (the score covers the rest)."""
        return self.outcome == "scored" and bool(self.missing)
