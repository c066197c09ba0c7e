"""What the judges went through, told in words: the reason behind failed, shed or held runs.

``eval`` and the demo print counts; a count alone made an operator guess (a table of failures or a
``shed`` column when the judge was simply unreachable). ``JudgeHealth`` listens to the same event stream as
the metrics (gate states, every finished judge call, runs shed with their reason) and ``explain`` names
what actually happened, per judge: circuit open or paused with the last error the judge gave, rate limits
hit, runs shed at the spend cap.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar.core.observers import ServiceObserver
from sidecar.scoring.judge.errors import ShedReason
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall

__all__ = ["JudgeHealth", "describe_call"]


def describe_call(call: JudgeCall) -> str:
    """A failed call as an operator reads it: the error, the HTTP status (or none), the provider's message."""
    status = f"HTTP {call.status_code}" if call.status_code is not None else "no HTTP answer"
    message = f": {call.error_message}" if call.error_message else ""
    return f"{call.error_name or call.outcome}, {status}{message}"


@dataclass
class _Judge:
    state: str = "closed"
    since: float = 0.0
    calls: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # call outcome →
    last_error: str | None = None
    refused: Counter[str] = field(default_factory=Counter)  # calls the gate refused, by reason →


@dataclass
class JudgeHealth(ServiceObserver):
    """Per judge (its ``provider/model`` label): gate state and since when, failed calls by outcome, the last
    failure, calls the gate refused by reason."""

    clock: Callable[[], float] = time.monotonic
    judges: dict[str, _Judge] = field(default_factory=dict)

    def _judge(self, name: str) -> _Judge:
        judge = self.judges.get(name)
        if judge is None:
            judge = self.judges[name] = _Judge(since=self.clock())
        return judge

    # -- ServiceObserver ------------------------------------------------------------------------------
    def judge_state_changed(self, judge: str, state: str) -> None:
        entry = self._judge(judge)
        # A probe (half_open) and its failure are the same outage: its length counts from when it began.
        if state != "half_open" and not (entry.state == "half_open" and state in ("open", "paused")):
            entry.since = self.clock()
        entry.state = state

    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        entry = self._judge(model.litellm_model)
        entry.calls += 1
        if call.outcome not in ("ok", "cancelled"):
            entry.failures[call.outcome] += 1
            entry.last_error = describe_call(call)

    def judge_refused(self, judge: str, reason: ShedReason) -> None:
        self._judge(judge).refused[reason] += 1

    # -- words ----------------------------------------------------------------------------------------
    def explain(self, *, holding: bool = True) -> list[str]:
        """One line per judge with something to tell; ``[]`` when every judge answered every call.
        ``holding``: runs still wait for an open or paused judge (the live service; not a finished ``eval``)."""
        now = self.clock()
        lines = []
        for name, judge in sorted(self.judges.items()):
            parts = []
            if judge.state in ("open", "half_open"):
                parts.append(
                    f"circuit open for {now - judge.since:.0f}s: the judge is unreachable or failing"
                    + (", its runs are held until a probe call succeeds" if holding else "")
                )
            elif judge.state == "paused":
                parts.append(
                    f"paused for {now - judge.since:.0f}s on a fatal provider error (401/402/403/404): fix the key, "
                    "quota or model (a live service resumes on SIGUSR1 or its next re-check call)"
                )
            refused = judge.refused
            if refused["circuit_open"]:
                parts.append(f"{refused['circuit_open']} runs refused: its circuit stayed open (unreachable, failing)")
            if refused["paused"]:
                parts.append(f"{refused['paused']} runs refused: it was paused on a fatal provider error")
            if refused["spend_cap"]:
                parts.append(f"{refused['spend_cap']} runs shed at its spend cap (spend_cap_usd_per_hour)")
            failed = sum(judge.failures.values())
            if failed:
                kinds = ", ".join(f"{n} {outcome.replace('_', ' ')}" for outcome, n in sorted(judge.failures.items()))
                parts.append(f"{failed} of {judge.calls} calls failed ({kinds})")
            if judge.failures["rate_limited"]:
                parts.append("the provider rate-limited it (HTTP 429): lower rpm/tpm or max_concurrency")
            if judge.last_error:
                parts.append(f"last error: {judge.last_error}")
            if parts:
                lines.append(f"judge {name}: " + "; ".join(parts))
        return lines
