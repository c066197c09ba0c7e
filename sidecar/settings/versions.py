"""``versions``: where a run's agent version is read, how many label values an agent's versions take, and the
comparison of each agent's newest version against its reference (docs/versions.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from sidecar.conventions.versions import DEFAULT_VERSION_ATTRIBUTES, VersionAttributes, parse_version_attribute
from sidecar.settings.base import _Frozen
from sidecar.settings.errors import _problem
from sidecar.versions.comparison import ComparisonSettings

__all__ = ["VersionsSettings"]

# The comparison declares its defaults (sidecar.versions.comparison); the settings add the bounds.
_DEFAULTS = ComparisonSettings()


class VersionsSettings(_Frozen):
    """Versions read from ``attributes`` (the first present wins; empty: not read) and, with ``compare`` on, the
    newest version of each agent compared with its reference per scorer, as Prometheus gauges."""

    # span.<key> or resource.<key>, the first present wins; []: versions are not read.
    attributes: tuple[str, ...] = DEFAULT_VERSION_ATTRIBUTES
    compare: bool = True  # the comparisons and their gauges (the version is carried on scores either way)
    max_versions: int = Field(default=_DEFAULTS.max_versions, ge=3, le=50)  # per agent, "other" included
    # The chance of a false verdict, ever, however often it is read (a false regression page: at most alpha / 2).
    alpha: float = Field(default=_DEFAULTS.alpha, gt=0, le=0.5)
    # The smallest difference of means (0–1 scale, the better direction) worth a verdict.
    min_effect: float = Field(default=_DEFAULTS.min_effect, ge=0, lt=1)
    # Reference runs since the release that make it a canary comparison (else a rollout, compared at 4 × min_runs).
    min_runs: int = Field(default=_DEFAULTS.min_runs, ge=1, le=100_000)
    # A full rollout is compared with the reference's runs of this window before it ...
    baseline_window_s: float = Field(default=_DEFAULTS.baseline_window_s, gt=0, le=7 * 86400)
    baseline_max_runs: int = Field(default=_DEFAULTS.baseline_max_runs, ge=1, le=100_000)  # ... at most these
    # A version without a run this long is forgotten: its comparison ends and its alert resolves.
    forget_after_s: float = Field(default=_DEFAULTS.forget_after_s, gt=0, le=30 * 86400)
    # The most pods that run this configuration at once (with KEDA: maxReplicaCount): alpha holds for the pages of
    # all of them together (each process tests at alpha / (replicas x runtime.workers)).
    replicas: int = Field(default=_DEFAULTS.replicas, ge=1, le=1000)
    # agent name -> the version its newest one is compared with (instead of the version first seen before it).
    reference: dict[str, str] = Field(default_factory=dict)

    @field_validator("attributes", mode="before")
    @classmethod
    def _one_attribute(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _readable(self) -> VersionsSettings:
        problems = []
        for i, text in enumerate(self.attributes):
            try:
                parse_version_attribute(text)
            except ValueError as exc:
                problems.append(_problem(("attributes", i), str(exc)))
        for agent, version in self.reference.items():
            if not agent or not version.strip():
                problems.append(_problem(("reference", agent), "name an agent and a version"))
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def version_attributes(self) -> VersionAttributes:
        return VersionAttributes.of(self.attributes)

    def comparison(self, *, workers: int = 1) -> ComparisonSettings:
        """The comparison of one process among ``replicas`` pods of ``workers`` processes each."""
        return ComparisonSettings(
            alpha=self.alpha,
            min_effect=self.min_effect,
            max_versions=self.max_versions,
            min_runs=self.min_runs,
            baseline_window_s=self.baseline_window_s,
            baseline_max_runs=self.baseline_max_runs,
            forget_after_s=self.forget_after_s,
            replicas=self.replicas * workers,
            reference=dict(self.reference),
        )
