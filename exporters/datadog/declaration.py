"""The ``exporters.datadog`` block and the Datadog exporter's declaration (``exporters.registry``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import InitErrorDetails

from exporters.datadog.mapping import Threshold, evaluation_label
from exporters.datadog.sink import DD_API_KEY_ENV, DROP_REASONS, DatadogEvaluationSink
from exporters.registry import ExporterContext, SettingsView, exporter_kind
from exporters.score_facts import ENVIRONMENT_ATTRIBUTES
from sidecar.core.config import FrozenConfig, config_problem, empty_is_unset, raise_problems, secret_value

__all__ = ["DatadogExporterSettings", "DatadogThreshold", "build_datadog_sink"]

log = logging.getLogger("exporters.datadog")

_SITE = re.compile(r"^[a-z0-9.-]+\.[a-z]{2,}$")


class DatadogThreshold(FrozenConfig):
    """What passes for one scorer, in its own score units (inclusive; either side may be open)."""

    min: float | None = None  # the lowest passing score; unset: no lower bound
    max: float | None = None  # the highest passing score; unset: no upper bound

    @model_validator(mode="after")
    def _one_side(self) -> DatadogThreshold:
        if self.min is None and self.max is None:
            raise_problems(type(self), [config_problem(("min",), "set min, max or both")])
        if self.min is not None and self.max is not None and self.min > self.max:
            raise_problems(type(self), [config_problem(("max",), "must be at least min")])
        return self


class DatadogExporterSettings(FrozenConfig):
    """Scores as Datadog LLM Observability evaluations (the evaluation-metric intake). Off unless enabled."""

    enabled: bool = False  # Datadog has no base URL to switch it on by: on only when true
    site: str = "datadoghq.com"  # the organization's site: datadoghq.com, us3.datadoghq.com, datadoghq.eu...
    base_url: str | None = None  # overrides https://api.<site> (a proxy)
    api_key: SecretStr | None = None  # unset: the DD_API_KEY environment variable
    ml_app: str | None = None  # the LLM application; unset: the scored span's service.name
    batch_size: int = Field(default=100, ge=1, le=1000)  # evaluations per request
    timeout_s: float = Field(default=10.0, gt=0)  # one request
    max_pending: int = Field(default=10_000, ge=1)  # unconfirmed evaluations held before runs wait
    # Score ids written, remembered so that a redelivery within the process is not written twice.
    remember_sent: int = Field(default=100_000, ge=0)
    # Per scorer id: the range that passes (the evaluation's assessment).
    thresholds: dict[str, DatadogThreshold] = Field(default_factory=dict)

    _unset = field_validator("base_url", "api_key", "ml_app", mode="before")(empty_is_unset)

    @model_validator(mode="after")
    def _complete(self) -> DatadogExporterSettings:
        problems: list[InitErrorDetails] = []
        if not _SITE.match(self.site):
            problems.append(config_problem(("site",), "a Datadog site such as datadoghq.com or datadoghq.eu"))
        if self.base_url is not None and not re.match(r"^https?://[^/]", self.base_url):
            problems.append(config_problem(("base_url",), "must start with http:// or https://"))
        raise_problems(type(self), problems)
        return self

    @property
    def url(self) -> str:
        return self.base_url or f"https://api.{self.site}"

    def api_key_value(self, environ: Mapping[str, str] | None = None) -> str:
        """The key in clear (the setting, else ``DD_API_KEY``), for the exporter. Never log it."""
        return secret_value(self.api_key, DD_API_KEY_ENV, environ)


def _scorers(block: DatadogExporterSettings, view: SettingsView) -> Iterable[InitErrorDetails]:
    """Two scorers may not share a label (Datadog's rules fold ``a-b`` and ``a_b`` into one), and thresholds
    name scorers that exist."""
    if not block.enabled:
        return
    seen: dict[str, int] = {}
    for i, scorer_id in enumerate(view.scorer_ids):
        label = evaluation_label(scorer_id)
        if label in seen:
            yield config_problem(
                ("scorers", i, "id"),
                f"its Datadog evaluation label {label!r} is scorer {view.scorer_ids[seen[label]]!r}'s too: rename one",
            )
        seen.setdefault(label, i)
    for scorer_id in block.thresholds:
        if scorer_id not in view.scorer_ids:
            yield config_problem(("exporters", "datadog", "thresholds", scorer_id), "no scorer has this id")


def _environment_attributes(block: DatadogExporterSettings) -> tuple[str, ...]:
    return ENVIRONMENT_ATTRIBUTES if block.enabled else ()


@exporter_kind(
    name="datadog",
    settings=DatadogExporterSettings,
    description="scores as Datadog LLM Observability evaluations on the spans Datadog received over OTLP",
    drop_reasons=DROP_REASONS,
    check=_scorers,
    resource_attributes=_environment_attributes,
)
def build_datadog_sink(block: DatadogExporterSettings, context: ExporterContext) -> DatadogEvaluationSink | None:
    if not block.enabled:
        return None
    api_key = block.api_key_value()
    if not api_key:
        # Checked here, where the service runs (as a judge's key): Datadog will refuse (403), /readyz says so.
        log.warning(
            "exporters.datadog has no API key: set %s (or exporters.datadog.api_key); Datadog refuses evaluations "
            "without one",
            DD_API_KEY_ENV,
        )
    return DatadogEvaluationSink(
        block.url,
        api_key=api_key,
        ml_app=block.ml_app,
        thresholds={scorer: Threshold(t.min, t.max) for scorer, t in block.thresholds.items()},
        batch_size=block.batch_size,
        timeout_s=block.timeout_s,
        max_pending=block.max_pending,
        remember=block.remember_sent,
        observer=context.observer,
        set_aside=context.set_aside,
    )
