"""A scored run as a Langfuse score: the body of ``POST /api/public/scores`` (docs/langfuse.md).

One score per scored run, on the scored span as Langfuse files spans that reach it over OTLP: ``traceId`` and
``observationId`` are the OTel trace and span ids in lowercase hex. ``id`` is the run's deterministic score
id and ``timestamp`` the scored span's end time, so a redelivered run is the same score: Langfuse upserts on
the id with the same timestamp (a different timestamp would file a second row until its storage merges
them). ``name`` is the scorer id; ``value`` and ``dataType`` follow the score's kind
(``exporters.score_facts``): NUMERIC with the score, BOOLEAN 1/0 for a pass/fail label, CATEGORICAL with the
label (the number is then in the metadata). ``comment`` is the reason; ``metadata`` the score id, scorer,
fingerprint, judge model, calls, tokens and cost. ``environment`` is the scored span's resource
``deployment.environment.name`` when Langfuse takes it (lowercase letters, digits, ``-`` and ``_``, at most 40,
not starting with ``langfuse``), else the configured fallback, else none (Langfuse's ``default``).

Sessions: a run about a conversation (``scope: session``) scores the Langfuse session, not a span:
``sessionId`` is the conversation id (``gen_ai.conversation.id`` or ``session.id``, the attribute Langfuse
files a trace's session by), without ``traceId`` and ``observationId``; its timestamp is the first turn's end
(the turn that names the score id), so a redelivered window upserts too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final

from exporters.score_facts import (
    BOOLEAN_LABELS,
    ENVIRONMENT_ATTRIBUTES,
    clip,
    judge_facts,
    score_kind,
    score_label,
    span_environment,
)
from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.timestamps import iso_millis

__all__ = [
    "ENVIRONMENT_ATTRIBUTES",
    "MAX_COMMENT_CHARS",
    "LangfuseScore",
    "environment_problem",
    "langfuse_score",
    "score_subject",
    "score_timestamp",
    "span_environment",
]

MAX_COMMENT_CHARS: Final = 4096
_ENVIRONMENT = re.compile(r"^(?!langfuse)[a-z0-9_-]{1,40}$")


@dataclass(frozen=True, slots=True)
class LangfuseScore:
    body: dict[str, Any]  # CreateScoreRequest JSON
    score_id: str
    trace_id: str
    key: bytes  # the score record's key (run.request.record_key): the trace id, a conversation's id
    unusable_environment: str | None = None  # a span environment Langfuse would refuse (the fallback was used)


def environment_problem(value: str) -> str | None:
    """Why Langfuse refuses ``value`` as an environment, or ``None``."""
    if _ENVIRONMENT.match(value):
        return None
    if value.startswith("langfuse"):
        return "Langfuse reserves environments starting with 'langfuse'"
    return "Langfuse takes 1 to 40 lowercase letters, digits, '-' and '_'"


def score_subject(run: ScoredRun) -> dict[str, str]:
    """What the score is about: the scored span (lowercase hex OTel ids), or a conversation's session."""
    session = run.request.session
    if session is not None:
        return {"sessionId": session.conversation_id}
    target = run.request.target
    return {"traceId": target.trace_id.lower(), "observationId": target.span_id.lower()}


def score_timestamp(run: ScoredRun) -> int:
    """The same on every redelivery: the scored span's end, a conversation's first turn's end (what names the
    score id); the run's end only when the span's end is unknown."""
    session = run.request.session
    if session is not None and session.turns:
        return session.turns[0].end_time_unix_nano or run.finished_unix_nano
    return run.request.target.end_time_unix_nano or run.finished_unix_nano


def _metadata(run: ScoredRun, score: float, label: str | None) -> dict[str, Any]:
    result = run.result
    metadata: dict[str, Any] = {
        "score_id": run.score_id,
        "scorer_id": run.scorer_id,
        "scorer_name": run.scorer_name,
        "scorer_fingerprint": run.scorer_fingerprint,
        "run_id": result.run_id if result is not None else None,
        "agent_name": run.request.target.agent_name,
        "agent_version": run.request.target.version,  # docs/versions.md
        "scope": run.request.scope,
        "source": "scoring-sidecar",
        "sidecar_version": __version__,
    }
    if label is not None:  # a boolean or categorical value: the number stays here
        metadata["score"] = score
        metadata["label"] = label
    facts = judge_facts(run)
    if facts is not None:
        metadata.update(facts.metadata())
    return {k: v for k, v in metadata.items() if v is not None}


def langfuse_score(run: ScoredRun, fallback_environment: str | None = None) -> LangfuseScore | None:
    """The run's score as Langfuse's ``CreateScoreRequest``, or ``None`` for a run without a score (failed,
    not scorable: those are in the OTLP spans and the metrics)."""
    result = run.result
    if run.outcome != "scored" or result is None or result.score is None or not math.isfinite(result.score):
        return None
    score = float(result.score)
    label = score_label(run)
    kind = score_kind(label)
    value: float | str
    if kind == "boolean" and label is not None:
        value, data_type = (1.0 if BOOLEAN_LABELS[label] else 0.0), "BOOLEAN"
    elif kind == "categorical" and label is not None:
        value, data_type = label, "CATEGORICAL"
    else:
        value, data_type = score, "NUMERIC"
    target = run.request.target
    body: dict[str, Any] = {
        "id": run.score_id,
        **score_subject(run),
        "name": run.scorer_id,
        "value": value,
        "dataType": data_type,
        # The same on every redelivery, so an upsert replaces the score in place.
        "timestamp": iso_millis(score_timestamp(run)),
        "metadata": _metadata(run, score, label),
    }
    if result.reason:
        body["comment"] = clip(result.reason, MAX_COMMENT_CHARS)
    environment = span_environment(target)
    unusable = None
    if environment is not None and environment_problem(environment) is not None:
        environment, unusable = None, environment
    environment = environment or fallback_environment
    if environment is not None:
        body["environment"] = environment
    return LangfuseScore(body, run.score_id, target.trace_id, run.request.record_key, unusable)
