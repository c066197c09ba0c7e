"""A scored run as an MLflow assessment: the body of ``POST /api/3.0/mlflow/traces/{trace_id}/assessments``
(docs/mlflow.md).

One assessment per run, on the scored trace as MLflow files traces that reach it over OTLP: the trace id is
``tr-`` and the OTel trace id in lowercase hex, the span id the OTel span id in lowercase hex (a run about one
span; a conversation's run has none). Its name is the scorer id, so that MLflow's ``judge.align()`` pairs it
with the human assessments of the same name; its source is ``LLM_JUDGE`` (a judged scorer) or ``CODE``, with
the scorer id as ``source_id``. ``feedback.value`` follows the score's kind (``exporters.score_facts``): the
number, ``true``/``false`` for a pass/fail label, the label of a categorical judge; ``rationale`` is the
reason; ``metadata`` (strings, MLflow's type) the score id, the scorer's fingerprint, the judge model, its
calls, tokens and cost. A run that failed is an assessment with ``feedback.error`` (the cause's name and
message) instead of a value, as MLflow's own evaluation logs a scorer that raised; a run that was not
scorable has no assessment.

Idempotence: the assessment id is chosen here, ``a-`` and the score id's 32 hex digits (MLflow keeps a
client-chosen id, in the form of its own ``a-<uuid hex>``), so a redelivered run names the same assessment:
the sink creates it, and when MLflow already has it (a redelivery, a kill -9 after MLflow stored it) updates
it in place (``sink``). One assessment per score id, whatever the redeliveries.

Conversations (``scope: session``): on the trace of the conversation's last turn (where the scorer-run span
is), without a span id, with MLflow's session key ``mlflow.trace.session`` in its metadata: MLflow reads an
assessment carrying it as the session's (its session views and ``search_traces`` filters on session
assessments); MLflow takes the session of a trace from its spans' ``session.id`` or ``gen_ai.conversation.id``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal
from uuid import UUID

from exporters.score_facts import BOOLEAN_LABELS, judge_facts, score_kind, score_label
from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.timestamps import iso_millis

__all__ = [
    "MAX_RATIONALE_CHARS",
    "SESSION_METADATA_KEY",
    "Assessment",
    "SourceType",
    "assessment_id",
    "mlflow_assessment",
    "mlflow_trace_id",
]

MAX_RATIONALE_CHARS: Final = 4096
MAX_ERROR_CHARS: Final = 1000
# MLflow's TraceMetadataKey.TRACE_SESSION: an assessment whose metadata names it is the session's.
SESSION_METADATA_KEY: Final = "mlflow.trace.session"
SourceType = Literal["LLM_JUDGE", "CODE"]
# What MLflow may change of an assessment after it is created (its UpdateAssessment's field mask).
UPDATE_MASK: Final = "feedback,rationale,metadata"


@dataclass(frozen=True, slots=True)
class Assessment:
    body: dict[str, Any]  # the Assessment message as JSON (proto field names)
    score_id: str
    trace_id: str  # MLflow's: tr-<32 hex>
    assessment_id: str
    key: bytes  # the score record's key (run.request.record_key): the trace id, a conversation's id

    @property
    def create_request(self) -> dict[str, Any]:
        return {"assessment": self.body}

    @property
    def update_request(self) -> dict[str, Any]:
        """What a redelivery changes: the value (or error), the rationale, the metadata (MLflow merges it)."""
        changed = {k: v for k, v in self.body.items() if k in ("feedback", "rationale", "metadata")}
        changed.setdefault("rationale", "")  # a reason gone on redelivery clears it, as the value changes
        return {"assessment": changed, "update_mask": UPDATE_MASK}


def mlflow_trace_id(otel_trace_id: str) -> str:
    """The id MLflow gives a trace it received over OTLP: ``tr-`` and the 32 lowercase hex digits."""
    return f"tr-{otel_trace_id.lower()}"


def assessment_id(score_id: str) -> str:
    """The score's assessment id, in MLflow's own form (``a-`` and 32 hex digits)."""
    return f"a-{UUID(score_id).hex}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _feedback(run: ScoredRun) -> dict[str, Any] | None:
    result = run.result
    if run.outcome == "failed":
        error = run.error
        cause = error.__cause__ if error is not None else None
        return {
            "error": {
                "error_code": error.cause_name if error is not None else "ScorerRunError",
                "error_message": _clip(
                    str(cause if cause is not None else error or "the scorer failed"), MAX_ERROR_CHARS
                ),
            }
        }
    if run.outcome != "scored" or result is None or result.score is None or not math.isfinite(result.score):
        return None
    label = score_label(run)
    kind = score_kind(label)
    value: float | bool | str
    if kind == "boolean" and label is not None:
        value = BOOLEAN_LABELS[label]
    elif kind == "categorical" and label is not None:
        value = label
    else:
        value = float(result.score)
    return {"value": value}


def _metadata(run: ScoredRun) -> dict[str, str]:
    result = run.result
    metadata: dict[str, Any] = {
        "score_id": run.score_id,
        "scorer_fingerprint": run.scorer_fingerprint,
        "scorer_name": run.scorer_name,
        "run_id": result.run_id if result is not None else None,
        "agent_name": run.request.target.agent_name,
        "scope": run.request.scope,
        "source": "scoring-sidecar",
        "sidecar_version": __version__,
    }
    label = score_label(run)
    if label is not None and result is not None and result.score is not None:
        metadata["score"] = float(result.score)  # a boolean or categorical value: the number stays here
    if run.outcome == "failed" and run.error is not None:
        metadata["failed_step"] = run.error.failed_step
    facts = judge_facts(run)
    if facts is not None:
        metadata.update(facts.metadata())
    session = run.request.session
    if session is not None:
        metadata[SESSION_METADATA_KEY] = session.conversation_id
        metadata["turns"] = len(session.turns)
        metadata["turn_trace_ids"] = ",".join(turn.trace_id for turn in session.turns)
    return {k: str(v) for k, v in metadata.items() if v is not None}


def mlflow_assessment(run: ScoredRun, source_type: SourceType | None = None) -> Assessment | None:
    """The run's assessment, or ``None`` for a run that was not scorable. ``source_type`` ``None``: ``LLM_JUDGE``
    when the run called a judge, else ``CODE``."""
    feedback = _feedback(run)
    if feedback is None:
        return None
    target = run.request.target
    trace_id = mlflow_trace_id(target.trace_id)
    kind: SourceType = source_type or ("LLM_JUDGE" if judge_facts(run) is not None else "CODE")
    at = iso_millis(run.finished_unix_nano)
    body: dict[str, Any] = {
        "assessment_id": assessment_id(run.score_id),
        "assessment_name": run.scorer_id,
        "trace_id": trace_id,
        "source": {"source_type": kind, "source_id": run.scorer_id},
        "create_time": at,
        "last_update_time": at,
        "feedback": feedback,
        "metadata": _metadata(run),
        "valid": True,
    }
    if run.request.session is None:  # a span's score; a conversation's is the trace's (the session's)
        body["span_id"] = target.span_id.lower()
    result = run.result
    if run.outcome == "scored" and result is not None and result.reason:
        body["rationale"] = _clip(result.reason, MAX_RATIONALE_CHARS)
    return Assessment(body, run.score_id, trace_id, body["assessment_id"], run.request.record_key)
