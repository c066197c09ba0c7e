"""One scorer on one span, whatever happens: the shared step of the live service and of ``eval``.

Every way a run can end becomes a value (scored, not scorable, failed, or shed by a judge's gate), so
the caller only decides where the outcome goes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sidecar.core import ScoredRun, score_id_of
from sidecar.core.runs import ScorerRunRequest, missing_parts
from sidecar.scorers.context import REQUEST_CONTEXT_KEY
from sidecar.scoring import Scorer, ScorerRunError
from sidecar.scoring.deadline import run_deadline
from sidecar.scoring.judge.errors import JudgeUnavailableError, ShedReason
from sidecar.scoring.types import ScorerRunResult

__all__ = ["ScorerAttempt", "attempt_scorer"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScorerAttempt:
    outcome: Literal["scored", "failed", "not_scorable"]
    shed: bool  # failed because a judge's gate refused the call (counted apart from failures)
    result: ScorerRunResult | None
    error: ScorerRunError | None
    started_unix_nano: int
    finished_unix_nano: int

    @property
    def shed_reason(self) -> ShedReason | None:
        """Why a judge's gate refused the run's call (``None``: it was not refused)."""
        cause = self.error.__cause__ if self.error is not None else None
        return cause.reason if isinstance(cause, JudgeUnavailableError) else None

    def to_scored_run(
        self, request: ScorerRunRequest, scorer: Scorer, agent_label: str, *, needs: Collection[str] = ()
    ) -> ScoredRun:
        """The finished run; ``needs``: the parts of a run the scorer reads (its kind's), to say which the run
        lacked."""
        return ScoredRun(
            request=request,
            scorer_id=scorer.id,
            scorer_name=scorer.name,
            scorer_fingerprint=scorer.fingerprint,
            outcome=self.outcome,
            result=self.result,
            error=self.error,
            started_unix_nano=self.started_unix_nano,
            finished_unix_nano=self.finished_unix_nano,
            agent_label=agent_label,
            missing=missing_parts(request, needs) if needs else (),
        )


def request_context_of(request: ScorerRunRequest) -> Mapping[str, Any] | None:
    """What a scorer reads beside the run: a whole-trace run's retrieved documents, where the context scorers look."""
    return {REQUEST_CONTEXT_KEY: list(request.context)} if request.context else None


async def attempt_scorer(
    scorer: Scorer,
    request: ScorerRunRequest,
    *,
    timeout_s: float,
    ground_truth: Any = None,
    request_context: Mapping[str, Any] | None = None,
) -> ScorerAttempt:
    """Run ``scorer`` on ``request`` with a deterministic run id (the score id); never raises. Without a
    ``request_context``, the request's own (:func:`request_context_of`)."""
    if request_context is None:
        request_context = request_context_of(request)
    target = request.target
    started = time.time_ns()
    result: ScorerRunResult | None = None
    error: ScorerRunError | None = None
    shed = False
    outcome: Literal["scored", "failed", "not_scorable"] = "failed"
    try:
        # A timeout in the task, not wait_for: no second task per run. Time waiting for the judge is not
        # counted (the judge client pauses this deadline while it waits).
        async with run_deadline(timeout_s):
            result = await scorer.run(
                input=request.input,
                output=request.output,
                run_id=score_id_of(scorer.fingerprint, request.subject),
                ground_truth=ground_truth,
                request_context=request_context,
                # Only what a configured scorer asked ingest to keep: none for most configurations.
                span_attributes=dict(target.span_attributes) if target.span_attributes else None,
                resource_attributes=dict(target.resource_attributes) if target.resource_attributes else None,
            )
        outcome = "not_scorable" if result.not_scorable is not None else "scored"
    except ScorerRunError as exc:
        error, result = exc, exc.result
        shed = isinstance(exc.__cause__, JudgeUnavailableError)
    except TimeoutError as exc:
        log.warning(
            "scorer %s timed out on span %s: %ss of its own work (time waiting for the judge excluded); "
            "raise runtime.run_timeout_s if its steps need longer",
            scorer.id,
            target.span_id,
            timeout_s,
        )
        error = ScorerRunError(failed_step="analyze", completed_steps=(), result=None, cause=exc)
    except Exception as exc:  # a scorer bug must not kill the caller: count it as a failure
        log.exception("scorer %s raised outside its pipeline on span %s", scorer.id, target.span_id)
        error = ScorerRunError(failed_step="analyze", completed_steps=(), result=None, cause=exc)
    return ScorerAttempt(outcome, shed, result, error, started, time.time_ns())
