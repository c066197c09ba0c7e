"""The service configuration: one YAML file, validated by pydantic, with ``${ENV}`` expansion for secrets.

>>> settings = load_settings(Path("sidecar.yaml"))           # or load_settings("kafka: {...}") for text
>>> settings.judges["default"].to_judge_model()
>>> settings.scorers[0].selection()                           # a sidecar.conventions.Selection

Rules:

- Every model is frozen and forbids unknown keys: a typo'd key is an error naming it (with a suggestion).
- String scalars may reference the environment: ``${VAR}`` (a missing variable is an error naming it),
  ``${VAR:-default}`` (default when unset or empty, as in a shell); ``$${`` gives a literal ``${``.
  Expansion happens after YAML parsing, so a value cannot inject YAML structure.
- Errors are collected into one :class:`SettingsError` whose lines read ``path.to.key (line N): message``.
  They never carry input values, so secrets cannot leak through them.
- Secrets (judge ``api_key``, ``kafka.security.sasl_password``, ``exporters.otlp.headers`` values) are
  ``SecretStr``: masked in ``repr`` and in :meth:`Settings.redacted_dict` (the dump safe to log).

Layout: one module per block of the file (``kafka``, ``judges``, ``scorers``, ``runtime``, ``sessions``,
``versions``, ``feedback``, ``exporters``), ``root``
(the whole file and its cross-block rules), ``base`` (what the blocks share), ``loading`` (YAML with lines, ``${ENV}``,
pydantic errors mapped to paths, lines and key suggestions), ``errors`` (what both report).
"""

from sidecar.settings.errors import SettingsError, SettingsProblem
from sidecar.settings.exporters import (
    ExportersSettings,
    KafkaScoresExporterSettings,
    OtlpExporterSettings,
    PhoenixExporterSettings,
    PrometheusExporterSettings,
)
from sidecar.settings.feedback import FeedbackSettings
from sidecar.settings.judges import CircuitBreakerSettings, JudgeSettings
from sidecar.settings.kafka import KafkaSecuritySettings, KafkaSettings
from sidecar.settings.loading import expand_env, load_eval_settings, load_settings, load_settings_as_written
from sidecar.settings.root import EvalSettings, Settings
from sidecar.settings.runtime import RuntimeSettings, TraceBufferSettings
from sidecar.settings.scorers import ScorerSettings, ScorerTargets, parse_python_kind, scope_refusal
from sidecar.settings.sessions import SessionCapsSettings, SessionsSettings
from sidecar.settings.versions import VersionsSettings

__all__ = [
    "CircuitBreakerSettings",
    "EvalSettings",
    "ExportersSettings",
    "FeedbackSettings",
    "JudgeSettings",
    "KafkaScoresExporterSettings",
    "KafkaSecuritySettings",
    "KafkaSettings",
    "OtlpExporterSettings",
    "PhoenixExporterSettings",
    "PrometheusExporterSettings",
    "RuntimeSettings",
    "ScorerSettings",
    "ScorerTargets",
    "SessionCapsSettings",
    "SessionsSettings",
    "Settings",
    "SettingsError",
    "SettingsProblem",
    "TraceBufferSettings",
    "VersionsSettings",
    "expand_env",
    "load_eval_settings",
    "load_settings",
    "load_settings_as_written",
    "parse_python_kind",
    "scope_refusal",
]
