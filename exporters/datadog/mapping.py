"""A scored run as a Datadog LLM Observability evaluation: one metric of the evaluation-metric intake
(``POST /api/intake/llm-obs/v2/eval-metric``), in the shape ``ddtrace``'s ``LLMObsEvalMetricWriter`` sends
(docs/datadog.md).

The evaluation joins the scored span as Datadog joins evaluations to spans it received over OTLP: the
``source:otel`` tag, and ``join_on.span`` with the OTel ids as *decimal* strings, ``int(hex, 16)`` of each:
the span id's 64 bits and the trace id's full 128 bits (Datadog's page on OpenTelemetry instrumentation gives
that conversion for both ids; APM's 64-bit trace ids are not what LLM Observability keys OTLP traces by).

``label`` is the scorer id within Datadog's label rules (ASCII letters, digits and ``_``, starting with a
letter, at most 200; other characters become ``_``). ``metric_type`` and the value follow the score's kind
(``exporters.score_facts``): ``score`` with ``score_value``, ``boolean`` for a pass/fail label,
``categorical`` with the label. ``assessment`` is ``pass``/``fail`` where the score has one: a pass/fail
label, or a threshold configured for the scorer. ``reasoning`` is the reason; ``tags`` the scorer, score
id, judge model, the sidecar's version and the scored span's environment (``env``). ``ml_app`` is the
configured one, else the scored span's ``service.name`` (what Datadog sets an OTLP trace's ``ml_app`` to).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from exporters.score_facts import BOOLEAN_LABELS, clip, judge_facts, score_kind, score_label, span_environment
from sidecar import __version__
from sidecar.core import ScoredRun

__all__ = [
    "MAX_LABEL_CHARS",
    "MAX_REASONING_CHARS",
    "UNKNOWN_ML_APP",
    "DatadogEvaluation",
    "Threshold",
    "datadog_evaluation",
    "datadog_tag",
    "decimal_id",
    "evaluation_label",
    "payload",
]

MAX_LABEL_CHARS: Final = 200
MAX_TAG_CHARS: Final = 200
MAX_REASONING_CHARS: Final = 4096
# What OpenTelemetry SDKs name a service that names none: Datadog files such a trace under it.
UNKNOWN_ML_APP: Final = "unknown_service"
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_]")
_NOT_TAG = re.compile(r"[^a-z0-9_:./-]")


@dataclass(frozen=True, slots=True)
class Threshold:
    """A passing score lies within ``[min, max]`` (either side open when ``None``)."""

    min: float | None = None
    max: float | None = None

    def assess(self, score: float) -> Literal["pass", "fail"]:
        low = self.min is None or score >= self.min
        high = self.max is None or score <= self.max
        return "pass" if low and high else "fail"


@dataclass(frozen=True, slots=True)
class DatadogEvaluation:
    metric: dict[str, Any]  # one element of attributes.metrics
    score_id: str
    trace_id: str  # lowercase hex
    key: bytes  # the score record's key (run.request.record_key): the trace id, a conversation's id


def evaluation_label(scorer_id: str) -> str:
    """The scorer id as a Datadog evaluation label (see the module doc)."""
    label = _NOT_LABEL.sub("_", scorer_id)
    if not label[:1].isalpha():
        label = "score_" + label
    return label[:MAX_LABEL_CHARS]


def decimal_id(hex_id: str) -> str:
    return str(int(hex_id, 16))


def datadog_tag(key: str, value: str) -> str:
    """``key:value`` within Datadog's tag rules: lowercase, letters, digits and ``_-:./``, at most 200."""
    return f"{key}:{_NOT_TAG.sub('_', value.lower())}"[:MAX_TAG_CHARS]


def datadog_evaluation(
    run: ScoredRun, *, ml_app: str | None = None, thresholds: Mapping[str, Threshold] | None = None
) -> DatadogEvaluation | None:
    """The run's score as an evaluation metric, or ``None`` for a run without a score."""
    result = run.result
    if run.outcome != "scored" or result is None or result.score is None or not math.isfinite(result.score):
        return None
    score = float(result.score)
    target = run.request.target
    label = score_label(run)
    kind = score_kind(label)
    metric: dict[str, Any] = {
        "join_on": {"span": {"span_id": decimal_id(target.span_id), "trace_id": decimal_id(target.trace_id)}},
        "ml_app": ml_app or target.service_name or UNKNOWN_ML_APP,
        "timestamp_ms": run.finished_unix_nano // 1_000_000,
        "label": evaluation_label(run.scorer_id),
    }
    assessment: str | None = None
    if kind == "boolean" and label is not None:
        metric["metric_type"], metric["boolean_value"] = "boolean", BOOLEAN_LABELS[label]
        assessment = label
    elif kind == "categorical" and label is not None:
        metric["metric_type"], metric["categorical_value"] = "categorical", label
    else:
        metric["metric_type"], metric["score_value"] = "score", score
        threshold = (thresholds or {}).get(run.scorer_id)
        if threshold is not None:
            assessment = threshold.assess(score)
    if assessment is not None:
        metric["assessment"] = assessment
    if result.reason:
        metric["reasoning"] = clip(result.reason, MAX_REASONING_CHARS)
    tags = [
        "source:otel",  # the evaluation is about a span Datadog received over OTLP
        datadog_tag("scorer_id", run.scorer_id),
        datadog_tag("score_id", run.score_id),
        datadog_tag("scoring_sidecar_version", __version__),
    ]
    facts = judge_facts(run)
    if facts is not None:
        tags.extend(datadog_tag("judge_model", model) for model in facts.models)
    if target.version is not None:  # the scored agent's version (docs/versions.md)
        tags.append(datadog_tag("agent_version", target.version))
    environment = span_environment(target)
    if environment is not None:
        tags.append(datadog_tag("env", environment))
    metric["tags"] = tags
    return DatadogEvaluation(metric, run.score_id, target.trace_id.lower(), run.request.record_key)


def payload(evaluations: list[DatadogEvaluation]) -> dict[str, Any]:
    """The request body: the envelope ``ddtrace`` sends, with the batch's metrics."""
    return {"data": {"type": "evaluation_metric", "attributes": {"metrics": [e.metric for e in evaluations]}}}
