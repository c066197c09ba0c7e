"""The ``exporters.otlp`` block and the OTLP exporter's declaration (``exporters.registry``)."""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import InitErrorDetails

from exporters.otlp.sink import DROP_REASONS, EventForm, OtlpTraceSink
from exporters.registry import ExporterContext, exporter_kind
from sidecar.core.config import FrozenConfig, config_problem, empty_is_unset, raise_problems

__all__ = ["DEFAULT_COPIED_RESOURCE_ATTRIBUTES", "OtlpExporterSettings", "build_otlp_sink"]

log = logging.getLogger("exporters.otlp")

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


class OtlpExporterSettings(FrozenConfig):
    """Scorer-run spans and evaluation events to an OTLP receiver. Enabled when an endpoint is set."""

    enabled: bool | None = None  # None: enabled iff endpoint is set
    endpoint: str | None = None  # grpc: http(s)://host:4317; http/protobuf: http(s)://host:4318
    protocol: Literal["grpc", "http/protobuf"] = "grpc"  # the receiver's OTLP transport
    headers: dict[str, SecretStr] = Field(default_factory=dict)  # e.g. authorization: "Bearer ${OTLP_TOKEN}"
    timeout_s: float = Field(default=10.0, gt=0)  # one export request
    # The gen_ai.evaluation.result event: a span event on the scorer-run span (span: every trace backend shows
    # it), a log record correlated with the scored span (log: /v1/logs, as OpenTelemetry now emits events), or
    # both. A receiver that answers it has no logs signal turns the log records off by itself (docs/otlp-backends.md).
    events: EventForm = "span"
    # Resource attributes copied from the scored span's resource onto the run's spans, so that backends that
    # file traces by resource (Phoenix's project, the environment) show the score with its trace.
    resource_attributes: tuple[str, ...] = DEFAULT_COPIED_RESOURCE_ATTRIBUTES

    _unset = field_validator("endpoint", mode="before")(empty_is_unset)

    @model_validator(mode="before")
    @classmethod
    def _evaluation_logs_was_events(cls, data: Any) -> Any:
        """``evaluation_logs`` (before ``events``): true was ``events: both``, false ``events: span``."""
        if not isinstance(data, dict) or "evaluation_logs" not in data:
            return data
        data = dict(data)
        old = data.pop("evaluation_logs")
        if "events" in data:
            raise_problems(
                cls,
                [config_problem(("evaluation_logs",), "set events only (evaluation_logs is its old name): remove it")],
            )
        if not isinstance(old, bool):
            raise_problems(cls, [config_problem(("evaluation_logs",), "true or false; better: events (span|log|both)")])
        data["events"] = "both" if old else "span"
        log.warning(
            "exporters.otlp.evaluation_logs is deprecated: write events: %s instead (span | log | both)",
            data["events"],
        )
        return data

    @field_validator("resource_attributes", mode="before")
    @classmethod
    def _one_attribute(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _endpoint_when_enabled(self) -> OtlpExporterSettings:
        problems: list[InitErrorDetails] = []
        if self.enabled and not self.endpoint:
            problems.append(config_problem(("endpoint",), "required when the OTLP exporter is enabled"))
        if self.endpoint is not None and not re.match(r"^https?://", self.endpoint):
            problems.append(config_problem(("endpoint",), "must start with http:// or https://"))
        for i, name in enumerate(self.resource_attributes):
            if not name.strip():
                problems.append(config_problem(("resource_attributes", i), "must not be empty"))
            elif name in _OWN_RESOURCE_ATTRIBUTES:
                problems.append(
                    config_problem(
                        ("resource_attributes", i), f"{name} is the sidecar's own (the loop guard); not copied"
                    )
                )
        raise_problems(type(self), problems)
        return self

    @property
    def is_enabled(self) -> bool:
        return bool(self.endpoint) if self.enabled is None else self.enabled

    def header_values(self) -> dict[str, str]:
        """The headers in clear, for the exporter. Never log them."""
        return {k: v.get_secret_value() for k, v in self.headers.items()}


def _copied_attributes(block: OtlpExporterSettings) -> tuple[str, ...]:
    """What ingest keeps of the scored span's resource for this exporter: what it copies, when it exports."""
    return block.resource_attributes if block.is_enabled and block.endpoint else ()


@exporter_kind(
    name="otlp",
    settings=OtlpExporterSettings,
    description="scorer-run spans (and evaluation log records) to an OTLP receiver",
    drop_reasons=DROP_REASONS,
    resource_attributes=_copied_attributes,
)
def build_otlp_sink(block: OtlpExporterSettings, context: ExporterContext) -> OtlpTraceSink | None:
    if not (block.is_enabled and block.endpoint):
        return None
    sink = OtlpTraceSink(
        block.endpoint,
        protocol=block.protocol,
        headers=block.header_values(),
        timeout_s=block.timeout_s,
        events=block.events,
        resource_attributes=block.resource_attributes,
        observer=context.observer,
        set_aside=context.set_aside,
    )
    if sink.sends_logs:  # an optional signal, turned off when the receiver has none
        context.watch_signal("logs", lambda: "logs" in sink.disabled_signals)
    return sink
