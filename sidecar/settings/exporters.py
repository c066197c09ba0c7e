"""``exporters``: where scores go. One typed field per declared exporter, whose block model lives with the
exporter (``exporters.registry``: its settings, drop reasons and rules across blocks), plus ``prometheus``
(the metrics endpoint, not a sink)."""

from __future__ import annotations

from pydantic import Field

from exporters.kafka_scores import KafkaScoresExporterSettings
from exporters.otlp import OtlpExporterSettings
from exporters.phoenix import PhoenixExporterSettings
from exporters.registry import exporter_kinds
from sidecar.core.config import FrozenConfig

__all__ = [
    "ExportersSettings",
    "KafkaScoresExporterSettings",
    "OtlpExporterSettings",
    "PhoenixExporterSettings",
    "PrometheusExporterSettings",
]


class PrometheusExporterSettings(FrozenConfig):
    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(default=9464, ge=0, le=65535)  # /metrics, /healthz, /readyz


class ExportersSettings(FrozenConfig):
    prometheus: PrometheusExporterSettings = PrometheusExporterSettings()
    otlp: OtlpExporterSettings = OtlpExporterSettings()
    kafka_scores: KafkaScoresExporterSettings = KafkaScoresExporterSettings()
    phoenix: PhoenixExporterSettings = PhoenixExporterSettings()

    def block(self, name: str) -> FrozenConfig:
        """The block of the declared exporter ``name`` (its field here)."""
        block = getattr(self, name, None)
        if not isinstance(block, FrozenConfig) or name not in exporter_kinds():
            raise KeyError(f"no settings field for the exporter {name!r}")
        return block
