"""``exporters``: where scores go. One typed field per declared exporter, whose block model lives with the
exporter (``exporters.registry``: its settings, drop reasons and rules across blocks), plus ``prometheus``
(the metrics endpoint, not a sink)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from exporters.datadog import DatadogExporterSettings
from exporters.kafka_scores import KafkaScoresExporterSettings
from exporters.langfuse import LangfuseExporterSettings
from exporters.mlflow import MlflowExporterSettings
from exporters.otlp import OtlpExporterSettings
from exporters.phoenix import PhoenixExporterSettings
from exporters.registry import ExporterKind, exporter_kinds
from sidecar.core.config import FrozenConfig

__all__ = [
    "DatadogExporterSettings",
    "ExportersSettings",
    "KafkaScoresExporterSettings",
    "LangfuseExporterSettings",
    "MlflowExporterSettings",
    "OtlpExporterSettings",
    "PhoenixExporterSettings",
    "PrometheusExporterSettings",
]


class PrometheusExporterSettings(FrozenConfig):
    """Metrics on /metrics (Prometheus and OpenMetrics), with the health endpoints on the same port."""

    enabled: bool = True  # false: no metrics server (nor /healthz, /readyz)
    host: str = "0.0.0.0"  # the address the server listens on
    port: int = Field(default=9464, ge=0, le=65535)  # /metrics, /healthz, /readyz


class ExportersSettings(FrozenConfig):
    """Where scores go. The exporters' order is the sinks' (the checkpoint flushes them in it)."""

    prometheus: PrometheusExporterSettings = PrometheusExporterSettings()
    kafka_scores: KafkaScoresExporterSettings = KafkaScoresExporterSettings()
    otlp: OtlpExporterSettings = OtlpExporterSettings()
    phoenix: PhoenixExporterSettings = PhoenixExporterSettings()
    langfuse: LangfuseExporterSettings = LangfuseExporterSettings()
    datadog: DatadogExporterSettings = DatadogExporterSettings()
    mlflow: MlflowExporterSettings = MlflowExporterSettings()

    def declared(self) -> list[tuple[ExporterKind[Any], FrozenConfig]]:
        """Every declared exporter with its block, in the fields' order."""
        kinds = exporter_kinds()
        return [(kinds[name], self.block(name)) for name in type(self).model_fields if name in kinds]

    def block(self, name: str) -> FrozenConfig:
        """The block of the declared exporter ``name`` (its field here)."""
        block = getattr(self, name, None)
        if not isinstance(block, FrozenConfig) or name not in exporter_kinds():
            raise KeyError(f"no settings field for the exporter {name!r}")
        return block
