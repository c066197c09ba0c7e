"""Scores as MLflow assessments (docs/mlflow.md).

- ``mapping``: a scored run → an MLflow ``Assessment`` (its id from the score id, the feedback's value or error,
  the source, the metadata; a conversation's with MLflow's session key);
- ``experiment``: the experiment the agents' traces go to, found or created at start;
- ``sink``: :class:`MlflowAssessmentSink`, one request per assessment on the delivery loop, a redelivery updated in
  place, a trace MLflow does not have yet waited for up to ``trace_wait_s``;
- ``declaration``: the ``exporters.mlflow`` block (MLflow's own environment variables) and the exporter's
  declaration.
"""

from exporters.mlflow.declaration import MLFLOW_ENVIRONMENT, MlflowExporterSettings, build_mlflow_sink
from exporters.mlflow.experiment import ExperimentRef, resolve_experiment
from exporters.mlflow.mapping import (
    SESSION_METADATA_KEY,
    Assessment,
    assessment_id,
    mlflow_assessment,
    mlflow_trace_id,
)
from exporters.mlflow.sink import ASSESSMENTS_PATH, MlflowAssessmentSink

__all__ = [
    "ASSESSMENTS_PATH",
    "MLFLOW_ENVIRONMENT",
    "SESSION_METADATA_KEY",
    "Assessment",
    "ExperimentRef",
    "MlflowAssessmentSink",
    "MlflowExporterSettings",
    "assessment_id",
    "build_mlflow_sink",
    "mlflow_assessment",
    "mlflow_trace_id",
    "resolve_experiment",
]
