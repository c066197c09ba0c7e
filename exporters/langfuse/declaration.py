"""The ``exporters.langfuse`` block and the Langfuse exporter's declaration (``exporters.registry``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import InitErrorDetails

from exporters.langfuse.mapping import ENVIRONMENT_ATTRIBUTES, environment_problem
from exporters.langfuse.sink import DROP_REASONS, LANGFUSE_PUBLIC_KEY_ENV, LANGFUSE_SECRET_KEY_ENV, LangfuseScoreSink
from exporters.registry import ExporterContext, exporter_kind
from sidecar.core.config import FrozenConfig, config_problem, empty_is_unset, raise_problems, secret_value

__all__ = ["LangfuseExporterSettings", "build_langfuse_sink"]

log = logging.getLogger("exporters.langfuse")


class LangfuseExporterSettings(FrozenConfig):
    """Scores as Langfuse scores (its public API). Enabled when a base URL is set."""

    enabled: bool | None = None  # None: enabled iff base_url is set
    base_url: str | None = None  # e.g. https://cloud.langfuse.com, http://langfuse:3000
    public_key: SecretStr | None = None  # unset: the LANGFUSE_PUBLIC_KEY environment variable
    secret_key: SecretStr | None = None  # unset: the LANGFUSE_SECRET_KEY environment variable
    # The environment of scores whose scored span's resource names none Langfuse takes (deployment.environment
    # .name); unset: Langfuse's default.
    environment: str | None = None
    batch_size: int = Field(default=100, ge=1, le=1000)  # scores per request
    timeout_s: float = Field(default=10.0, gt=0)  # one request
    max_pending: int = Field(default=10_000, ge=1)  # unconfirmed scores held before runs wait

    _unset = field_validator("base_url", "public_key", "secret_key", "environment", mode="before")(empty_is_unset)

    @model_validator(mode="after")
    def _complete(self) -> LangfuseExporterSettings:
        problems: list[InitErrorDetails] = []
        if self.enabled and not self.base_url:
            problems.append(config_problem(("base_url",), "required when the Langfuse exporter is enabled"))
        if self.base_url is not None and not re.match(r"^https?://[^/]", self.base_url):
            problems.append(config_problem(("base_url",), "must start with http:// or https://"))
        if self.environment is not None and (problem := environment_problem(self.environment)) is not None:
            problems.append(config_problem(("environment",), problem))
        raise_problems(type(self), problems)
        return self

    @property
    def is_enabled(self) -> bool:
        return bool(self.base_url) if self.enabled is None else self.enabled

    def keys(self, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
        """The key pair in clear (each setting, else its environment variable), for the exporter. Never log it."""
        return (
            secret_value(self.public_key, LANGFUSE_PUBLIC_KEY_ENV, environ),
            secret_value(self.secret_key, LANGFUSE_SECRET_KEY_ENV, environ),
        )


def _environment_attributes(block: LangfuseExporterSettings) -> tuple[str, ...]:
    return ENVIRONMENT_ATTRIBUTES if block.is_enabled else ()


@exporter_kind(
    name="langfuse",
    settings=LangfuseExporterSettings,
    description="scores as Langfuse scores, beside the traces Langfuse received over OTLP",
    drop_reasons=DROP_REASONS,
    resource_attributes=_environment_attributes,
)
def build_langfuse_sink(block: LangfuseExporterSettings, context: ExporterContext) -> LangfuseScoreSink | None:
    if not (block.is_enabled and block.base_url):
        return None
    public, secret = block.keys()
    if not (public and secret):
        # Checked here, where the service runs, not at validation: the keys may be set only there (as a
        # judge's). Langfuse will refuse the scores (401): the readiness problem says so too.
        log.warning(
            "exporters.langfuse has no key pair: set %s and %s (or exporters.langfuse.public_key and secret_key); "
            "Langfuse refuses scores without them",
            LANGFUSE_PUBLIC_KEY_ENV,
            LANGFUSE_SECRET_KEY_ENV,
        )
    return LangfuseScoreSink(
        block.base_url,
        public_key=public,
        secret_key=secret,
        environment=block.environment,
        batch_size=block.batch_size,
        timeout_s=block.timeout_s,
        max_pending=block.max_pending,
        observer=context.observer,
        set_aside=context.set_aside,
    )
