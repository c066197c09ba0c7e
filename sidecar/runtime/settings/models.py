"""The configuration models: one frozen pydantic model per block of the YAML file.

- Every model is frozen and forbids unknown keys: a typo'd key is an error naming it (with a suggestion).
- Validators report through :func:`~sidecar.runtime.settings.errors._problem`, so that each problem keeps
  its own key path (and, once loaded, its line).
- Secrets (judge ``api_key``, ``kafka.security.sasl_password``, ``exporters.otlp.headers`` values) are
  ``SecretStr``: masked in ``repr`` and in :meth:`Settings.redacted_dict` (the dump safe to log).
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FilePath,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from sidecar.conventions.selection import AttributePredicate, NameFilter, Selection, SpanKind
from sidecar.ingest.decode import Encoding
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.settings.errors import _message, _problem
from sidecar.scorers.registry import ScorerKind, scorer_kinds
from sidecar.scoring.judge.model import JudgeModel

__all__ = [
    "CircuitBreakerSettings",
    "EvalSettings",
    "ExportersSettings",
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
    "Settings",
    "TraceBufferSettings",
    "parse_python_kind",
]

REDACTED = "**********"

_PYTHON_KIND = re.compile(r"^python:\s*(?P<module>[A-Za-z_][\w.]*):(?P<factory>[A-Za-z_]\w*)$")


def parse_python_kind(kind: str) -> tuple[str, str] | None:
    """``python: package.module:factory`` → (module, factory); None for any other kind."""
    match = _PYTHON_KIND.match(kind.strip())
    return (match["module"], match["factory"]) if match else None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _non_empty(value: tuple[Any, ...]) -> tuple[Any, ...]:
    # After item validation (a min_length constraint would also fire when an item fails).
    if not value:
        raise PydanticCustomError("settings", "{detail}", {"detail": "must list at least one item"})
    return value


def _empty_is_unset(value: Any) -> Any:
    # An empty string on an optional key means "not set", so that ${VAR:-} can switch a feature off.
    return None if isinstance(value, str) and not value.strip() else value


class KafkaSecuritySettings(_Frozen):
    """How to reach the brokers: TLS and/or SASL. Defaults to plaintext."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True

    _unset = field_validator(
        "sasl_mechanism", "sasl_username", "sasl_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile", mode="before"
    )(_empty_is_unset)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecuritySettings:
        problems: list[InitErrorDetails] = []
        sasl = self.security_protocol.startswith("SASL")
        if sasl:
            if self.sasl_mechanism is None:
                problems.append(
                    _problem(("sasl_mechanism",), f"required with security_protocol {self.security_protocol}")
                )
            if not self.sasl_username:
                problems.append(
                    _problem(("sasl_username",), f"required with security_protocol {self.security_protocol}")
                )
            if self.sasl_password is None:
                problems.append(
                    _problem(("sasl_password",), f"required with security_protocol {self.security_protocol}")
                )
        else:
            for key in ("sasl_mechanism", "sasl_username", "sasl_password"):
                if getattr(self, key) is not None:
                    problems.append(
                        _problem((key,), f"only used with SASL_PLAINTEXT or SASL_SSL, not {self.security_protocol}")
                    )
        if not self.security_protocol.endswith("SSL"):
            for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, key) is not None:
                    problems.append(_problem((key,), f"only used with SSL or SASL_SSL, not {self.security_protocol}"))
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            problems.append(_problem(("ssl_keyfile",), "ssl_certfile and ssl_keyfile go together (client certificate)"))
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def client_options(self) -> dict[str, Any]:
        """aiokafka keyword arguments (consumer and producer alike). Contains the password: never log it."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol.endswith("SSL"):
            from aiokafka.helpers import create_ssl_context

            context = create_ssl_context(cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile)
            context.check_hostname = self.ssl_check_hostname
            options["ssl_context"] = context
        if self.security_protocol.startswith("SASL"):
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password.get_secret_value() if self.sasl_password else None
        return options


class KafkaSettings(_Frozen):
    """The trace input (and the producer for dead letters and score records)."""

    bootstrap_servers: tuple[str, ...]  # a list, or one comma-separated string
    topics: tuple[str, ...] = ("otlp_spans",)
    group_id: str = Field(default="scoring-sidecar", min_length=1)
    client_id: str = Field(default="scoring-sidecar", min_length=1)
    encoding: Encoding = "otlp_proto"
    dead_letter_topic: str = Field(default="otlp_spans.dead_letter", min_length=1)
    max_record_bytes: int = Field(default=1024 * 1024, gt=0)
    security: KafkaSecuritySettings = KafkaSecuritySettings()
    # consumer tuning
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    fetch_max_wait_ms: int = Field(default=500, ge=0)
    max_poll_records: int = Field(default=500, gt=0)
    session_timeout_ms: int = Field(default=45_000, gt=0)
    heartbeat_interval_ms: int = Field(default=3_000, gt=0)
    # A broker not reachable at start-up is retried (1 s doubling to 30 s) for this long, /readyz saying
    # so, before the process exits with 4: pods commonly start before Kafka does.
    startup_timeout_s: float = Field(default=300.0, gt=0)
    # producer (dead letters, score records)
    enable_idempotence: bool = False

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split_servers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(s.strip() for s in value.split(",") if s.strip())
        return value

    @field_validator("topics", mode="before")
    @classmethod
    def _one_topic(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    _not_empty = field_validator("bootstrap_servers", "topics")(_non_empty)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        problems: list[InitErrorDetails] = []
        if len(set(self.topics)) != len(self.topics):
            problems.append(_problem(("topics",), "topics are listed more than once"))
        if self.dead_letter_topic in self.topics:
            problems.append(_problem(("dead_letter_topic",), "the dead-letter topic must not be an input topic"))
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            problems.append(_problem(("heartbeat_interval_ms",), "must be lower than session_timeout_ms"))
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @property
    def bootstrap_servers_str(self) -> str:
        return ",".join(self.bootstrap_servers)

    def consumer_options(self) -> dict[str, Any]:
        """aiokafka consumer keyword arguments beyond bootstrap_servers/group_id (secrets included)."""
        return {
            "client_id": self.client_id,
            "auto_offset_reset": self.auto_offset_reset,
            "fetch_max_wait_ms": self.fetch_max_wait_ms,
            "max_poll_records": self.max_poll_records,
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            **self.security.client_options(),
        }

    def producer_options(self) -> dict[str, Any]:
        """aiokafka producer keyword arguments beyond bootstrap_servers (secrets included)."""
        return {"client_id": self.client_id, **self.security.client_options()}

    def ingest_config(
        self, topic: str, selection: Selection | None = None, *, resource_attributes: Iterable[str] = ()
    ) -> IngestConfig:
        return IngestConfig(
            topic=topic,
            encoding=self.encoding,
            dead_letter_topic=self.dead_letter_topic,
            max_record_bytes=self.max_record_bytes,
            selection=selection if selection is not None else Selection(),
            resource_attributes=frozenset(resource_attributes),
        )


class CircuitBreakerSettings(_Frozen):
    """Open after ``failure_threshold`` consecutive failed calls; try again after ``reset_after_s``."""

    failure_threshold: int = Field(default=5, gt=0)
    reset_after_s: float = Field(default=30.0, gt=0)


class JudgeSettings(_Frozen):
    """A judge model, its connection, and the limits the runtime enforces on it."""

    # connection (→ JudgeModel)
    model: str = Field(min_length=1)  # a litellm model id, provider/name
    api_base: str | None = None
    api_key: SecretStr | None = None  # use ${ENV}; unset → the provider's usual variable (OPENAI_API_KEY)
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=20)
    deadline_s: float | None = Field(default=None, gt=0)
    transport: Literal["auto", "http", "litellm"] = "auto"
    structured_output: Literal["json_schema", "prompt"] = "json_schema"
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)
    ca_bundle: FilePath | None = None  # PEM CA certificates trusted instead of the defaults (SSL_CERT_FILE)
    # limits (runtime)
    max_concurrency: int = Field(default=16, gt=0)
    rpm: int | None = Field(default=None, gt=0)  # requests per minute
    tpm: int | None = Field(default=None, gt=0)  # tokens per minute
    spend_cap_usd_per_hour: float | None = Field(default=None, gt=0)  # estimated cost per rolling hour
    # At the spend cap: "shed" skips the run and counts it (scores stay current, the bill capped); "hold"
    # waits for the window to free budget (every trace scored, late; the backlog waits in Kafka).
    on_spend_cap: Literal["shed", "hold"] = "shed"
    circuit_breaker: CircuitBreakerSettings = CircuitBreakerSettings()

    _unset = field_validator("api_base", "api_key", "deadline_s", "ca_bundle", mode="before")(_empty_is_unset)

    def to_judge_model(self) -> JudgeModel:
        return JudgeModel(
            model=self.model,
            api_base=self.api_base,
            api_key=self.api_key,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            deadline_s=self.deadline_s,
            transport=self.transport,
            structured_output=self.structured_output,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            ca_bundle=self.ca_bundle,
        )


class ScorerTargets(_Frozen):
    """Which spans a scorer scores: maps onto :class:`sidecar.conventions.Selection`."""

    kinds: tuple[SpanKind, ...] = ("agent",)
    agents: NameFilter = NameFilter()  # globs on gen_ai.agent.name (else gen_ai.agent.id)
    services: NameFilter = NameFilter()  # globs on the resource's service.name
    where: tuple[AttributePredicate, ...] = ()  # all must hold
    max_input_bytes: int = Field(default=256 * 1024, gt=0)
    # span: each selected span is scored from its own attributes, as soon as it arrives. trace: each
    # selected agent span is scored with its descendants (LLM calls, tools, retrievals) once its trace is
    # done (runtime.trace_buffer says when).
    scope: Literal["span", "trace"] = "span"

    @field_validator("kinds", mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    _not_empty = field_validator("kinds")(_non_empty)

    @model_validator(mode="after")
    def _trace_scope_scores_agents(self) -> ScorerTargets:
        if self.scope == "trace" and self.kinds != ("agent",):
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    _problem(
                        ("kinds",),
                        "scope: trace assembles agent runs (an agent span with its LLM calls, tools and "
                        "retrievals): kinds must be [agent]",
                    )
                ],
            )
        return self


ScorerId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]


class ScorerSettings(_Frozen):
    """One scorer: what it is (``kind``), which judge, its options, and what it scores."""

    id: ScorerId  # unique; becomes the scorer's id in scores, metrics and spans
    kind: str  # a prebuilt kind (PREBUILT_SCORER_KINDS) or "python: package.module:factory"
    judge: str | None = None  # a key of `judges`; required for LLM kinds
    options: dict[str, Any] = Field(default_factory=dict)  # passed to the scorer factory
    sampling: float = Field(default=1.0, ge=0.0, le=1.0)  # fraction of traces scored (deterministic per trace)
    targets: ScorerTargets = ScorerTargets()
    scale: float = Field(default=1.0, gt=0)  # the score's maximum, to normalise metrics to [0, 1]

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        kind = kind.strip()
        kinds = scorer_kinds()
        if kind in kinds or parse_python_kind(kind) is not None:
            return kind
        if kind.startswith("python:"):
            raise PydanticCustomError(
                "settings", "{detail}", {"detail": "a python kind reads 'python: package.module:factory'"}
            )
        close = difflib.get_close_matches(kind, list(kinds), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise PydanticCustomError(
            "settings",
            "{detail}",
            {
                "detail": f"unknown scorer kind{hint}; prebuilt kinds: {', '.join(sorted(kinds))}, "
                "or 'python: package.module:factory'"
            },
        )

    @model_validator(mode="after")
    def _options_fit_kind(self) -> ScorerSettings:
        # Prebuilt kinds validate their options with their own model here, so that a bad option is reported
        # with its key and line, and a typo with the option it was probably meant to be.
        kind = self.prebuilt
        if kind is None:
            return self
        try:
            kind.options.model_validate(self.options)
        except ValidationError as exc:
            raise ValidationError.from_exception_data(
                type(self).__name__, [_option_problem(kind, err) for err in exc.errors()]
            ) from None
        return self

    @property
    def prebuilt(self) -> ScorerKind[Any] | None:
        return scorer_kinds().get(self.kind)

    @property
    def python_factory(self) -> tuple[str, str] | None:
        return parse_python_kind(self.kind)

    @property
    def needs_judge(self) -> bool:
        kind = self.prebuilt
        return kind is not None and kind.needs_judge

    def selection(self) -> Selection:
        return Selection(
            kinds=frozenset(self.targets.kinds),
            agents=self.targets.agents,
            services=self.targets.services,
            where=self.targets.where,
            sample_rate=self.sampling,
            max_input_bytes=self.targets.max_input_bytes,
        )


def _option_problem(kind: ScorerKind[Any], err: Mapping[str, Any]) -> InitErrorDetails:
    loc = ("options", *err["loc"])
    if err["type"] != "extra_forbidden":
        return _problem(loc, _message(err))
    model = _options_model_at(kind.options, err["loc"][:-1])
    if model is None:
        return _problem(loc, f"unknown option of kind {kind.name!r}")
    # Options may be written in snake_case or in Mastra's camelCase.
    fields = model.model_fields
    allowed = sorted({name for name in fields} | {f.alias for f in fields.values() if f.alias})
    close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    what = "option" if model is kind.options else "field"
    return _problem(loc, f"unknown {what} of kind {kind.name!r} ({hint}{what}s: {', '.join(sorted(fields))})")


def _options_model_at(model: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    """The model validating the mapping at ``path`` inside a kind's options (a criterion of a rubric, …)."""
    annotation: Any = model
    for part in path:
        annotation = _strip_optional(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = annotation.model_fields
            field = fields.get(str(part)) or next((f for f in fields.values() if f.alias == part), None)
            if field is None:
                return None
            annotation = field.annotation
            continue
        args = typing.get_args(annotation)
        origin = typing.get_origin(annotation)
        if origin in (list, tuple) and args:
            annotation = args[0]
        elif origin is dict and len(args) == 2:
            annotation = args[1]
        else:
            return None
    annotation = _strip_optional(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


class TraceBufferSettings(_Frozen):
    """When a trace is done for ``scope: trace`` scorers, and how much of them may wait in memory."""

    # Ready when its root span has arrived and no span of it came for idle_s ...
    idle_s: float = Field(default=5.0, gt=0, le=3600)
    # ... or max_wait_s after its first span, whatever arrived (the run says it is incomplete).
    max_wait_s: float = Field(default=120.0, gt=0, le=86400)
    # At either bound intake pauses until traces are scored (nothing is dropped).
    max_traces: int = Field(default=20_000, gt=0)
    max_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # One trace past this is scored at once from what arrived, and marked incomplete (ready reason evicted).
    max_trace_bytes: int = Field(default=4 * 1024 * 1024, gt=0)

    @model_validator(mode="after")
    def _wait_covers_idle(self) -> TraceBufferSettings:
        if self.max_wait_s < self.idle_s:
            raise ValidationError.from_exception_data(
                type(self).__name__, [_problem(("max_wait_s",), "must be at least idle_s")]
            )
        return self


class RuntimeSettings(_Frozen):
    """Flow control and timeouts of the scoring loop."""

    max_in_flight_runs: int = Field(default=512, gt=0)
    max_buffered_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    commit_interval_s: float = Field(default=1.0, gt=0)
    shutdown_timeout_s: float = Field(default=20.0, gt=0)
    revoke_timeout_s: float = Field(default=5.0, gt=0)
    run_timeout_s: float = Field(default=120.0, gt=0)
    # The `agent` label of the metrics: the first max_agent_labels agent names seen keep their own label,
    # later ones read "other"; agent_labels are always labelled (bounded series, whatever the traces say).
    max_agent_labels: int = Field(default=50, ge=0)
    agent_labels: tuple[str, ...] = ()
    # Processes in this pod, each a consumer of the group (Kafka spreads the partitions). Judge limits,
    # spend caps and the in-flight bounds above are the pod's: workers split them.
    workers: int = Field(default=1, ge=1, le=64)
    # A one-line INFO summary of intake (records, spans, runs per scorer, skips by reason, dead letters) this
    # often, when something happened: how a configuration that scores nothing shows why. 0: never.
    intake_log_interval_s: float = Field(default=60.0, ge=0)
    trace_buffer: TraceBufferSettings = TraceBufferSettings()


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


class _Provenance:
    """Where each key was written (dotted path -> line), for error messages after validation. Two settings
    with equal values are equal wherever they were written, so it never takes part in equality."""

    __slots__ = ("lines",)

    def __init__(self) -> None:
        self.lines: dict[str, int] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Provenance)

    def __hash__(self) -> int:
        return 0


class EvalSettings(_Frozen):
    """A configuration ``eval`` can use: judges and scorers (``kafka`` may be left out; ``targets``,
    ``sampling`` and the exporters do not apply offline)."""

    kafka: KafkaSettings | None = None
    judges: dict[str, JudgeSettings] = Field(default_factory=dict)
    scorers: tuple[ScorerSettings, ...]
    runtime: RuntimeSettings = RuntimeSettings()
    exporters: ExportersSettings = ExportersSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    _source: _Provenance = PrivateAttr(default_factory=lambda: _Provenance())

    _not_empty = field_validator("scorers")(_non_empty)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _references(self) -> EvalSettings:
        problems: list[InitErrorDetails] = []
        seen: dict[str, int] = {}
        judges = ", ".join(sorted(self.judges)) or "none defined"
        for i, scorer in enumerate(self.scorers):
            if scorer.id in seen:
                problems.append(
                    _problem(("scorers", i, "id"), f"duplicate scorer id (also scorers[{seen[scorer.id]}])")
                )
            else:
                seen[scorer.id] = i
            if scorer.judge is not None and scorer.judge not in self.judges:
                problems.append(
                    _problem(("scorers", i, "judge"), f"no judge named {scorer.judge!r} (judges: {judges})")
                )
            elif scorer.judge is None and scorer.needs_judge:
                problems.append(
                    _problem(("scorers", i, "judge"), f"kind {scorer.kind!r} needs a judge (judges: {judges})")
                )
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def judge_models(self) -> dict[str, JudgeModel]:
        return {name: judge.to_judge_model() for name, judge in self.judges.items()}

    def line_of(self, path: str) -> int | None:
        """The YAML line of a dotted path (``scorers[1].kind``), or of its nearest parent that has one."""
        while path:
            line = self._source.lines.get(path)
            if line is not None:
                return line
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return None

    def redacted_dict(self) -> dict[str, Any]:
        """A JSON-able dump safe to log: every secret replaced by ``**********``."""
        return typing.cast(dict[str, Any], _redact(self.model_dump(mode="python")))


class Settings(EvalSettings):
    """The configuration of the live service (``run``): Kafka is required."""

    kafka: KafkaSettings

    @model_validator(mode="after")
    def _live(self) -> Settings:
        problems: list[InitErrorDetails] = []
        for i, scorer in enumerate(self.scorers):
            kind = scorer.prebuilt
            if kind is not None and kind.eval_only is not None:
                problems.append(
                    _problem(("scorers", i, "kind"), f"kind {kind.name!r} scores eval datasets only: {kind.eval_only}")
                )
        if self.exporters.phoenix.is_enabled:
            for i, scorer in enumerate(self.scorers):
                if scorer.id == PHOENIX_RESERVED_ANNOTATION_NAME:
                    problems.append(
                        _problem(
                            ("scorers", i, "id"),
                            "Phoenix reserves the annotation name 'note' for notes: rename the scorer",
                        )
                    )
        topic = self.exporters.kafka_scores.topic
        if self.exporters.kafka_scores.enabled and (
            topic in self.kafka.topics or topic == self.kafka.dead_letter_topic
        ):
            problems.append(
                _problem(("exporters", "kafka_scores", "topic"), "must differ from the input and dead-letter topics")
            )
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self


def _redact(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_redact(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    return value
