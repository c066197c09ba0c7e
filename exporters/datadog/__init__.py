"""Scores as Datadog LLM Observability evaluations (docs/datadog.md).

- ``mapping``: a scored run → one evaluation metric (decimal ids, label, type and value, tags);
- ``sink``: :class:`DatadogEvaluationSink`, the evaluation-metric intake in batches, each score id once per
  process;
- ``declaration``: the ``exporters.datadog`` block and the exporter's declaration.
"""

from exporters.datadog.declaration import DatadogExporterSettings, DatadogThreshold, build_datadog_sink
from exporters.datadog.mapping import (
    DatadogEvaluation,
    Threshold,
    datadog_evaluation,
    datadog_tag,
    decimal_id,
    evaluation_label,
)
from exporters.datadog.sink import DD_API_KEY_ENV, EVAL_METRIC_PATH, DatadogEvaluationSink, SentScores

__all__ = [
    "DD_API_KEY_ENV",
    "EVAL_METRIC_PATH",
    "DatadogEvaluation",
    "DatadogEvaluationSink",
    "DatadogExporterSettings",
    "DatadogThreshold",
    "SentScores",
    "Threshold",
    "build_datadog_sink",
    "datadog_evaluation",
    "datadog_tag",
    "decimal_id",
    "evaluation_label",
]
