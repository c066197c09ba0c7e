"""``exporters``: where scores go (Prometheus, OTLP, Kafka score records, Phoenix)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from sidecar.settings.base import _empty_is_unset, _Frozen
from sidecar.settings.errors import _problem

__all__ = [
    "ExportersSettings",
    "KafkaScoresExporterSettings",
    "OtlpExporterSettings",
    "PhoenixExporterSettings",
    "PrometheusExporterSettings",
]


class PrometheusExporterSettings(_Frozen):
    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(default=9464, ge=0, le=65535)  # /metrics, /healthz, /readyz


# Resource attributes by which backends file a trace (Phoenix projects, Langfuse environments, Datadog env):
# copied from the scored span's resource onto the scores' spans, so they land beside the trace.
DEFAULT_COPIED_RESOURCE_ATTRIBUTES: tuple[str, ...] = (
    "openinference.project.name",
    "deployment.environment",
    "deployment.environment.name",
    "service.namespace",
)
# The sidecar's own resource: never taken from the scored span (service.name is half of the loop guard).
_OWN_RESOURCE_ATTRIBUTES = frozenset({"service.name", "service.version"})


class OtlpExporterSettings(_Frozen):
    """Scorer-run spans and evaluation events to an OTLP receiver. Enabled when an endpoint is set."""

    enabled: bool | None = None  # None: enabled iff endpoint is set
    endpoint: str | None = None  # grpc: http(s)://host:4317; http/protobuf: http(s)://host:4318
    protocol: Literal["grpc", "http/protobuf"] = "grpc"
    headers: dict[str, SecretStr] = Field(default_factory=dict)  # e.g. authorization: "Bearer ${OTLP_TOKEN}"
    timeout_s: float = Field(default=10.0, gt=0)
    # The gen_ai.evaluation.result log records (/v1/logs): off, since most trace backends take no OTLP logs
    # (docs/otlp-backends.md); a receiver that answers it has no logs signal turns them off by itself.
    evaluation_logs: bool = False
    resource_attributes: tuple[str, ...] = DEFAULT_COPIED_RESOURCE_ATTRIBUTES

    _unset = field_validator("endpoint", mode="before")(_empty_is_unset)

    @field_validator("resource_attributes", mode="before")
    @classmethod
    def _one_attribute(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _endpoint_when_enabled(self) -> OtlpExporterSettings:
        problems: list[InitErrorDetails] = []
        if self.enabled and not self.endpoint:
            problems.append(_problem(("endpoint",), "required when the OTLP exporter is enabled"))
        if self.endpoint is not None and not re.match(r"^https?://", self.endpoint):
            problems.append(_problem(("endpoint",), "must start with http:// or https://"))
        for i, name in enumerate(self.resource_attributes):
            if not name.strip():
                problems.append(_problem(("resource_attributes", i), "must not be empty"))
            elif name in _OWN_RESOURCE_ATTRIBUTES:
                problems.append(
                    _problem(("resource_attributes", i), f"{name} is the sidecar's own (the loop guard); not copied")
                )
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @property
    def is_enabled(self) -> bool:
        return bool(self.endpoint) if self.enabled is None else self.enabled

    def header_values(self) -> dict[str, str]:
        """The headers in clear, for the exporter. Never log them."""
        return {k: v.get_secret_value() for k, v in self.headers.items()}


class KafkaScoresExporterSettings(_Frozen):
    enabled: bool = True
    topic: str = Field(default="agent_scores", min_length=1)
    # Unacknowledged records the sink holds before runs wait for it (then the consumer pauses).
    max_pending_records: int = Field(default=10_000, ge=1)


PHOENIX_API_KEY_ENV = "PHOENIX_API_KEY"
PHOENIX_RESERVED_ANNOTATION_NAME = "note"  # POST /v1/span_annotations answers 400 for it


class PhoenixExporterSettings(_Frozen):
    """Scores as Arize Phoenix span annotations (REST API). Enabled when a base URL is set."""

    enabled: bool | None = None  # None: enabled iff base_url is set
    base_url: str | None = None  # Phoenix's address, e.g. http://phoenix:6006 (the REST API is under /v1)
    api_key: SecretStr | None = None  # unset: the PHOENIX_API_KEY environment variable, if any
    batch_size: int = Field(default=100, ge=1, le=1000)  # annotations per request
    timeout_s: float = Field(default=10.0, gt=0)  # one request
    max_pending: int = Field(default=10_000, ge=1)  # unconfirmed annotations held before runs wait
    # How long an annotation waits for its span to reach Phoenix (the trace may arrive after the score),
    # from Phoenix's first "no such span": then it is dropped, logged and counted.
    span_wait_s: float = Field(default=300.0, ge=0)

    _unset = field_validator("base_url", "api_key", mode="before")(_empty_is_unset)

    @model_validator(mode="after")
    def _base_url_when_enabled(self) -> PhoenixExporterSettings:
        if self.enabled and not self.base_url:
            raise ValidationError.from_exception_data(
                type(self).__name__, [_problem(("base_url",), "required when the Phoenix exporter is enabled")]
            )
        if self.base_url is not None and not re.match(r"^https?://[^/]", self.base_url):
            raise ValidationError.from_exception_data(
                type(self).__name__, [_problem(("base_url",), "must start with http:// or https://")]
            )
        return self

    @property
    def is_enabled(self) -> bool:
        return bool(self.base_url) if self.enabled is None else self.enabled

    def api_key_value(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The key in clear (the setting, else ``PHOENIX_API_KEY``), for the exporter. Never log it."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        env = os.environ if environ is None else environ
        return env.get(PHOENIX_API_KEY_ENV) or None


class ExportersSettings(_Frozen):
    prometheus: PrometheusExporterSettings = PrometheusExporterSettings()
    otlp: OtlpExporterSettings = OtlpExporterSettings()
    kafka_scores: KafkaScoresExporterSettings = KafkaScoresExporterSettings()
    phoenix: PhoenixExporterSettings = PhoenixExporterSettings()
