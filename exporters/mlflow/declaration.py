"""The ``exporters.mlflow`` block and the MLflow exporter's declaration (``exporters.registry``).

Configured as MLflow's own clients are: each setting left unset falls back to the environment variable MLflow's
clients read (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_ID``, ``MLFLOW_EXPERIMENT_NAME``,
``MLFLOW_TRACKING_TOKEN``, ``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``). The exporter is on
when the block names a ``tracking_uri``, or says ``enabled: true`` (then the URI may come from the
environment); a variable alone never turns it on.
"""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Mapping

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import InitErrorDetails

from exporters.mlflow.experiment import ExperimentRef
from exporters.mlflow.sink import DROP_REASONS, MlflowAssessmentSink
from exporters.registry import ExporterContext, exporter_kind
from sidecar.core.config import FrozenConfig, config_problem, empty_is_unset, raise_problems

__all__ = ["MLFLOW_ENVIRONMENT", "MlflowExporterSettings", "build_mlflow_sink"]

log = logging.getLogger("exporters.mlflow")

# MLflow's clients' variables, by setting.
MLFLOW_ENVIRONMENT: dict[str, str] = {
    "tracking_uri": "MLFLOW_TRACKING_URI",
    "experiment_id": "MLFLOW_EXPERIMENT_ID",
    "experiment_name": "MLFLOW_EXPERIMENT_NAME",
    "token": "MLFLOW_TRACKING_TOKEN",
    "username": "MLFLOW_TRACKING_USERNAME",
    "password": "MLFLOW_TRACKING_PASSWORD",
}
_HTTP = re.compile(r"^https?://[^/]")


class MlflowExporterSettings(FrozenConfig):
    """Scores as MLflow assessments on the traces MLflow received over OTLP. On when a tracking URI is set."""

    enabled: bool | None = None  # None: enabled iff tracking_uri is set here
    tracking_uri: str | None = None  # e.g. http://mlflow:5000; unset: MLFLOW_TRACKING_URI (with enabled: true)
    # The experiment the agents' traces go to (found, or created by name, at start; logged with its id): one of
    # them; unset: MLFLOW_EXPERIMENT_ID or MLFLOW_EXPERIMENT_NAME, else none is looked up.
    experiment_id: str | None = None
    experiment_name: str | None = None  # the same experiment by name (one of experiment_id, experiment_name)
    token: SecretStr | None = None  # unset: MLFLOW_TRACKING_TOKEN (Bearer)
    username: str | None = None  # unset: MLFLOW_TRACKING_USERNAME (Basic, with the password)
    password: SecretStr | None = None  # unset: MLFLOW_TRACKING_PASSWORD
    # How long an assessment waits for its trace to reach MLflow (the trace may arrive after the score), from
    # MLflow's first "not found": then it is dropped, logged, counted and dead-lettered.
    trace_wait_s: float = Field(default=300.0, ge=0)
    batch_size: int = Field(default=100, ge=1, le=1000)  # assessments taken per round (one request each)
    max_concurrency: int = Field(default=8, ge=1, le=64)  # requests in flight to MLflow
    timeout_s: float = Field(default=10.0, gt=0)  # one request
    max_pending: int = Field(default=10_000, ge=1)  # unconfirmed assessments held before runs wait

    _unset = field_validator(
        "tracking_uri", "experiment_id", "experiment_name", "token", "username", "password", mode="before"
    )(empty_is_unset)

    @model_validator(mode="after")
    def _complete(self) -> MlflowExporterSettings:
        problems: list[InitErrorDetails] = []
        if self.tracking_uri is not None and not _HTTP.match(self.tracking_uri):
            problems.append(
                config_problem(
                    ("tracking_uri",),
                    "an MLflow tracking server's http:// or https:// URL (the exporter speaks its REST API: not a "
                    "file store or a database URI)",
                )
            )
        if self.enabled and self.tracking_uri is None:
            # From MLflow's variable, as its clients take it: read where the settings load (validate, run).
            uri = self.resolved_tracking_uri()
            if uri is None or not _HTTP.match(uri):
                variable = MLFLOW_ENVIRONMENT["tracking_uri"]
                problems.append(
                    config_problem(
                        ("tracking_uri",),
                        f"required when the MLflow exporter is enabled: here, or an http(s) URL in {variable}"
                        + (f" (it holds {uri!r})" if uri else ""),
                    )
                )
        if self.experiment_id is not None and self.experiment_name is not None:
            problems.append(config_problem(("experiment_name",), "set experiment_id or experiment_name, not both"))
        if (self.username is None) != (self.password is None):
            problems.append(config_problem(("password",), "username and password go together (Basic auth)"))
        raise_problems(type(self), problems)
        return self

    @property
    def is_enabled(self) -> bool:
        return bool(self.tracking_uri) if self.enabled is None else self.enabled

    def resolved_tracking_uri(self, environ: Mapping[str, str] | None = None) -> str | None:
        env = os.environ if environ is None else environ
        return self.tracking_uri or env.get(MLFLOW_ENVIRONMENT["tracking_uri"], "").strip() or None

    def experiment(self, environ: Mapping[str, str] | None = None) -> ExperimentRef | None:
        env = os.environ if environ is None else environ
        if self.experiment_id is not None or self.experiment_name is not None:
            return ExperimentRef(self.experiment_id, self.experiment_name)
        by_id = env.get(MLFLOW_ENVIRONMENT["experiment_id"], "").strip()
        by_name = env.get(MLFLOW_ENVIRONMENT["experiment_name"], "").strip()
        if by_id:
            return ExperimentRef(experiment_id=by_id)
        return ExperimentRef(name=by_name) if by_name else None

    def auth_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The ``Authorization`` header in clear (a token, else a user and password), for the exporter. Never log it."""
        env = os.environ if environ is None else environ
        token = self.token.get_secret_value() if self.token else env.get(MLFLOW_ENVIRONMENT["token"], "")
        if token.strip():  # a token mounted from a file usually ends with a line break
            return {"Authorization": f"Bearer {token.strip()}"}
        user = self.username or env.get(MLFLOW_ENVIRONMENT["username"], "")
        password = self.password.get_secret_value() if self.password else env.get(MLFLOW_ENVIRONMENT["password"], "")
        if user.strip() and password.strip():
            basic = base64.b64encode(f"{user.strip()}:{password.strip()}".encode()).decode()
            return {"Authorization": f"Basic {basic}"}
        return {}


@exporter_kind(
    name="mlflow",
    settings=MlflowExporterSettings,
    description="scores as MLflow assessments on the traces MLflow received over OTLP",
    drop_reasons=DROP_REASONS,
)
def build_mlflow_sink(block: MlflowExporterSettings, context: ExporterContext) -> MlflowAssessmentSink | None:
    if not block.is_enabled:
        return None
    tracking_uri = block.resolved_tracking_uri()
    if tracking_uri is None:  # the settings refuse this where they load; the environment changed since
        log.error("exporters.mlflow is enabled without a tracking URI: set tracking_uri or MLFLOW_TRACKING_URI")
        return None
    return MlflowAssessmentSink(
        tracking_uri,
        headers=block.auth_headers(),
        experiment=block.experiment(),
        source_types={scorer: "LLM_JUDGE" if judged else "CODE" for scorer, judged in context.judged.items()},
        batch_size=block.batch_size,
        max_concurrency=block.max_concurrency,
        timeout_s=block.timeout_s,
        max_pending=block.max_pending,
        trace_wait_s=block.trace_wait_s,
        observer=context.observer,
        set_aside=context.set_aside,
    )
