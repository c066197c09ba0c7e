"""``kafka``: the brokers, the trace input, the security settings, the consumer and producer tuning."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from sidecar.conventions.versions import DEFAULT_VERSIONS, VersionAttributes
from sidecar.ingest.deadletter import DEFAULT_MAX_REQUEST_SIZE
from sidecar.ingest.decode import Encoding
from sidecar.ingest.pipeline import IngestConfig
from sidecar.runtime.limits import RuntimeLimits
from sidecar.settings.base import _empty_is_unset, _Frozen, _non_empty
from sidecar.settings.errors import _problem

__all__ = ["KafkaSecuritySettings", "KafkaSettings"]

_RUNTIME = RuntimeLimits()  # the engine declares the defaults it shares with this block


class KafkaSecuritySettings(_Frozen):
    """How to reach the brokers: TLS and/or SASL. Defaults to plaintext."""

    # The Kafka security.protocol: SSL for TLS, SASL_* for a user and password (over TLS with SASL_SSL).
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None  # required with SASL_*
    sasl_username: str | None = None  # required with SASL_*
    sasl_password: SecretStr | None = None  # required with SASL_*; e.g. ${KAFKA_PASSWORD}, never logged
    ssl_cafile: str | None = None  # PEM file of the CAs to trust instead of the system's
    ssl_certfile: str | None = None  # client certificate (PEM) for mutual TLS, with ssl_keyfile
    ssl_keyfile: str | None = None  # the client certificate's private key (PEM)
    ssl_check_hostname: bool = True  # check the broker certificate's host name

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
    topics: tuple[str, ...] = ("otlp_spans",)  # topics of OTLP traces, as the Collector's Kafka exporter writes them
    # Topics of OTLP logs (the Collector's otlp_logs): content that instrumentations write as log events, joined to
    # its LLM call spans (runtime.log_join). Key both topics by trace id and give them the same partition count: a
    # call's span and its content are then read by the same consumer (docs/ingest.md).
    log_topics: tuple[str, ...] = ()
    # The consumer group: replicas with the same group share the partitions (scaling out = more replicas).
    group_id: str = Field(default="scoring-sidecar", min_length=1)
    client_id: str = Field(default="scoring-sidecar", min_length=1)  # names this client in the broker's logs
    encoding: Encoding = "otlp_proto"  # the Collector exporter's encoding: otlp_proto or otlp_json
    # Where records and spans that cannot be scored go, with the reason in a header (docs/ingest.md).
    dead_letter_topic: str = Field(default="otlp_spans.dead_letter", min_length=1)
    # A record larger than this is not decoded: dead-lettered as record_too_large (docs/limits.md).
    max_record_bytes: int = Field(default=1024 * 1024, gt=0)
    security: KafkaSecuritySettings = KafkaSecuritySettings()
    # Where a group with no committed offset starts: earliest (the whole retained topic) or latest (new traffic).
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    fetch_max_wait_ms: int = Field(default=500, ge=0)  # how long a fetch waits for records (the consumer's own)
    max_poll_records: int = Field(default=_RUNTIME.max_poll_records, gt=0)  # records taken per poll
    # The broker drops a consumer it has not heard from this long and gives its partitions to the others.
    session_timeout_ms: int = Field(default=45_000, gt=0)
    heartbeat_interval_ms: int = Field(default=3_000, gt=0)  # how often the consumer tells the group it lives
    # A broker not reachable at start-up is retried (1 s doubling to 30 s) for this long, /readyz saying
    # so, before the process exits with 4: pods commonly start before Kafka does.
    startup_timeout_s: float = Field(default=_RUNTIME.startup_timeout_s, gt=0)
    # A record keyed by a trace id (the Collector's partition_traces_by_id) holds that trace alone: when every
    # scorer samples it out, it is done without being decoded, once a decoded record has confirmed that keys are
    # trace ids (a decoded record whose spans are not all of its key's trace turns it off, with a warning).
    # False: every record is decoded, and every sampled-out agent span counted in scorer_runs_total
    # (docs/ingest.md).
    key_sampling: bool = True
    # producer (dead letters, score records)
    enable_idempotence: bool = False
    # The most one dead letter may weigh (the dead-letter producer's max_request_size): a letter is cut to fit it
    # (docs/limits.md). At least max_record_bytes, so that a letter carries any record the sidecar reads whole
    # beside its headers; the dead-letter topic's max.message.bytes must take it too.
    max_request_size: int = Field(default=DEFAULT_MAX_REQUEST_SIZE, ge=64 * 1024)

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split_servers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(s.strip() for s in value.split(",") if s.strip())
        return value

    @field_validator("topics", "log_topics", mode="before")
    @classmethod
    def _one_topic(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    _not_empty = field_validator("bootstrap_servers", "topics")(_non_empty)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        problems: list[InitErrorDetails] = []
        if len(set(self.topics)) != len(self.topics):
            problems.append(_problem(("topics",), "topics are listed more than once"))
        if self.dead_letter_topic in self.topics or self.dead_letter_topic in self.log_topics:
            problems.append(_problem(("dead_letter_topic",), "the dead-letter topic must not be an input topic"))
        if self.max_record_bytes > self.max_request_size:
            problems.append(
                _problem(
                    ("max_record_bytes",),
                    f"{self.max_record_bytes} is over max_request_size ({self.max_request_size}): the dead letter of "
                    "a record the sidecar reads could not carry it; raise max_request_size (and the dead-letter "
                    "topic's max.message.bytes) or lower max_record_bytes",
                )
            )
        if len(set(self.log_topics)) != len(self.log_topics):
            problems.append(_problem(("log_topics",), "topics are listed more than once"))
        if set(self.log_topics) & set(self.topics):
            problems.append(_problem(("log_topics",), "a topic is both a traces topic (topics) and a logs topic"))
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            problems.append(_problem(("heartbeat_interval_ms",), "must be lower than session_timeout_ms"))
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @property
    def bootstrap_servers_str(self) -> str:
        return ",".join(self.bootstrap_servers)

    def consumer_options(self) -> dict[str, Any]:
        """aiokafka consumer keyword arguments beyond bootstrap_servers/group_id (secrets included). With logs topics,
        the range assignor: partition i of every topic goes to the same member, so a trace's spans and its content
        (keyed alike, on topics of as many partitions) meet in one process."""
        assignor: dict[str, Any] = {}
        if self.log_topics:
            from aiokafka.coordinator.assignors.range import RangePartitionAssignor

            assignor = {"partition_assignment_strategy": (RangePartitionAssignor,)}
        return {
            **assignor,
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
        self,
        topic: str,
        *,
        resource_attributes: Iterable[str] = (),
        span_attributes: Iterable[str] = (),
        versions: VersionAttributes = DEFAULT_VERSIONS,
    ) -> IngestConfig:
        """What ingest reads and keeps; ``versions``' resource attributes are kept with the others."""
        return IngestConfig(
            topic=topic,
            encoding=self.encoding,
            dead_letter_topic=self.dead_letter_topic,
            max_record_bytes=self.max_record_bytes,
            resource_attributes=frozenset(resource_attributes) | versions.resource_keys,
            span_attributes=frozenset(span_attributes),
            versions=versions,
            log_topics=frozenset(self.log_topics),
        )
