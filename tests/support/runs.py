"""Finished scorer runs for exporter tests: a real scorer run, wrapped as the runtime wraps it, or a run's
record made directly (for what no real scorer returns, such as a NaN score)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from sidecar.core import RunOutcome, ScoredRun
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.scoring import AgentRunInput, Scorer, ScorerRunError
from sidecar.scoring.types import ScorerRunResult

__all__ = ["finished_run", "scored_run_of"]

_UNSET: Any = object()


async def scored_run_of(
    scorer: Scorer,
    request: ScorerRunRequest,
    *,
    agent_label: str,
    run_input: Any = _UNSET,
    run_output: Any = _UNSET,
    finished_unix_nano: int | None = None,
) -> ScoredRun:
    """Run ``scorer`` (a fresh random run id each time) on the request's input and output, or on the given
    ones, and wrap whatever happened: scored, not scorable, or failed with the error's snapshot."""
    started = time.time_ns()
    result: ScorerRunResult | None
    error: ScorerRunError | None = None
    try:
        result = await scorer.run(
            input=request.input if run_input is _UNSET else run_input,
            output=request.output if run_output is _UNSET else run_output,
        )
    except ScorerRunError as exc:
        result, error = exc.result, exc
    outcome: RunOutcome
    if error is not None:
        outcome = "failed"
    elif result is not None and result.not_scorable is not None:
        outcome = "not_scorable"
    else:
        outcome = "scored"
    return ScoredRun(
        request=request,
        scorer_id=scorer.id,
        scorer_name=scorer.name,
        scorer_fingerprint=scorer.fingerprint,
        outcome=outcome,
        result=result,
        error=error,
        started_unix_nano=started,
        finished_unix_nano=finished_unix_nano if finished_unix_nano is not None else time.time_ns(),
        agent_label=agent_label,
    )


def finished_run(
    scorer: str,
    agent: str,
    outcome: RunOutcome,
    score: float | None = None,
    *,
    trace_id: str = "0" * 31 + "1",
    span_end_unix_nano: int = 0,
) -> ScoredRun:
    """The record of a run that ended with ``outcome`` and ``score`` on a span that ended at
    ``span_end_unix_nano`` (0: unknown)."""
    target = SpanTarget(trace_id=trace_id, span_id="0" * 15 + "1", end_time_unix_nano=span_end_unix_nano)
    result = ScorerRunResult(run_id="r", score=score) if score is not None else None
    return ScoredRun(
        request=ScorerRunRequest(target=target, input=AgentRunInput(), output=()),
        scorer_id=scorer,
        scorer_name=scorer,
        scorer_fingerprint="f",
        outcome=outcome,
        result=result,
        error=None,
        started_unix_nano=0,
        finished_unix_nano=0,
        agent_label=agent,
    )


def labelled(run: ScoredRun, label: str) -> ScoredRun:
    """The run as a custom judge returns it: its score with a label (ScorerRunResult.label)."""
    assert run.result is not None
    return dataclasses.replace(run, result=run.result.model_copy(update={"label": label}))
