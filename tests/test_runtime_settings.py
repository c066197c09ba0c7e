"""sidecar.settings and scorer_factory: schema, YAML loading with lines, ${ENV}, secrets, CLI validate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from sidecar.app.scorer_factory import ScorerBuildError, build_scorer, build_scorers
from sidecar.cli import main
from sidecar.conventions.selection import AttributePredicate, NameFilter, Selection
from sidecar.scorers.catalog import scorer_kinds
from sidecar.scoring import JudgeModel, Scorer
from sidecar.settings import (
    JudgeSettings,
    ScorerSettings,
    Settings,
    SettingsError,
    expand_env,
    load_settings,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sidecar.yaml"
SECRET = "sk-live-0123456789abcdefSECRETVALUE"
SASL_SECRET = "sasl-pa55word-SECRETVALUE"
TOKEN_SECRET = "otlp-token-SECRETVALUE"

MINIMAL = """\
kafka:
  bootstrap_servers: localhost:9092
scorers:
  - id: sim
    kind: content-similarity
"""


def yaml_text(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def problems_of(text: str, environ: dict[str, str] | None = None) -> list[tuple[str, int | None, str]]:
    with pytest.raises(SettingsError) as caught:
        load_settings(yaml_text(text), environ=environ or {})
    return [(p.path, p.line, p.message) for p in caught.value.problems]


# -- valid configurations ------------------------------------------------------------------------


def test_example_config_is_valid_and_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "JUDGE_MODEL", "OPENAI_API_KEY", "OTLP_ENDPOINT", "OTLP_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(EXAMPLE)
    assert settings.kafka.bootstrap_servers == ("localhost:9092",)
    assert settings.judges["default"].model == "openai/gpt-4o-mini"
    assert settings.judges["default"].api_key is None  # ${OPENAI_API_KEY:-} → empty → unset
    assert not settings.exporters.otlp.is_enabled
    scorers = build_scorers(settings)
    assert list(scorers) == ["prompt-alignment", "echo-similarity", "tool-use"]
    selection = settings.scorers[0].selection()
    assert selection.sample_rate == 0.25
    assert selection.agents.allows("support-bot") and not selection.agents.allows("support-canary")


def settings_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key the configuration file takes, dotted, blocks and the keys inside them."""
    keys = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        keys.append(key)
        for inner in _models_in(field.annotation):
            keys += settings_keys(inner, key + ".")
    return keys


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def test_the_example_config_documents_every_key() -> None:
    """The README promises that examples/sidecar.yaml documents every key: each one stands there, set or as a
    commented line, so a key added to the settings without its line here fails."""
    text = EXAMPLE.read_text(encoding="utf-8")
    keys = settings_keys(Settings)
    assert {"kafka.key_sampling", "exporters.datadog.remember_sent", "sessions.caps"} <= set(keys)
    # set or commented, in block style, in a list item (- id:) or inside a flow mapping ({min: 0.7})
    absent = [k for k in keys if not re.search(rf"(^|[\s{{,#-]){re.escape(k.rsplit('.', 1)[-1])}:", text)]
    assert absent == [], f"keys missing from {EXAMPLE.name}: {absent}"


def test_minimal_config_defaults() -> None:
    settings = load_settings(MINIMAL)
    assert settings.kafka.topics == ("otlp_spans",)
    assert settings.kafka.group_id == "scoring-sidecar"
    assert settings.kafka.encoding == "otlp_proto"
    assert settings.kafka.dead_letter_topic == "otlp_spans.dead_letter"
    assert settings.kafka.enable_idempotence is False
    assert settings.kafka.security.security_protocol == "PLAINTEXT"
    assert settings.runtime.max_in_flight_runs == 512
    assert settings.runtime.max_buffered_bytes == 64 * 1024 * 1024
    assert (settings.runtime.commit_interval_s, settings.runtime.shutdown_timeout_s) == (1.0, 20.0)
    assert (settings.runtime.revoke_timeout_s, settings.runtime.run_timeout_s) == (5.0, 120.0)
    assert (settings.exporters.prometheus.host, settings.exporters.prometheus.port) == ("0.0.0.0", 9464)
    assert settings.exporters.kafka_scores.enabled and settings.exporters.kafka_scores.topic == "agent_scores"
    assert not settings.exporters.otlp.is_enabled
    assert settings.exporters.otlp.events == "span"  # most trace backends take no OTLP logs
    assert settings.exporters.otlp.resource_attributes == (
        "openinference.project.name",
        "deployment.environment",
        "deployment.environment.name",
        "service.namespace",
    )
    assert not settings.exporters.phoenix.is_enabled
    assert settings.scorers[0].selection() == Selection()
    assert settings.log_level == "INFO"


FULL = """\
log_level: debug
kafka:
  bootstrap_servers: "broker-1:9093, broker-2:9093"
  topics: [spans-a, spans-b]
  group_id: g1
  encoding: otlp_json
  dead_letter_topic: dlq
  max_record_bytes: 2048
  auto_offset_reset: latest
  max_poll_records: 50
  enable_idempotence: true
  security:
    security_protocol: SASL_SSL
    sasl_mechanism: SCRAM-SHA-512
    sasl_username: sidecar
    sasl_password: ${SASL_PASSWORD}
judges:
  fast:
    model: hosted_vllm/qwen
    api_base: http://vllm:8000/v1
    api_key: ${JUDGE_KEY}
    timeout_s: 5
    max_retries: 1
    deadline_s: 12
    transport: http
    structured_output: prompt
    temperature: 0
    max_tokens: 512
    max_concurrency: 4
    rpm: 60
    tpm: 10000
    spend_cap_usd_per_hour: 2.5
    circuit_breaker: {failure_threshold: 3, reset_after_s: 10}
scorers:
  - id: align
    kind: prompt-alignment
    judge: fast
    options: {evaluation_mode: user, scale: 10}
    sampling: 0.5
    scale: 10
    targets:
      kinds: [agent, inference]
      agents: {include: ["a-*"], exclude: ["a-test"]}
      services: {include: [checkout]}
      where:
        - {key: env, value: prod}
        - {key: tenant, op: exists}
  - id: custom
    kind: "python: tests.support.custom_scorer:create_length_scorer"
    judge: fast
    options: {limit: 10}
runtime: {max_in_flight_runs: 64, run_timeout_s: 30}
exporters:
  prometheus: {host: 127.0.0.1, port: 0}
  otlp:
    endpoint: https://collector:4318
    protocol: http/protobuf
    headers: {authorization: "Bearer ${OTLP_TOKEN}", x-tenant: acme}
  kafka_scores: {topic: scores}
"""
FULL_ENV = {"SASL_PASSWORD": SASL_SECRET, "JUDGE_KEY": SECRET, "OTLP_TOKEN": TOKEN_SECRET}


def test_full_config_round_trip() -> None:
    settings = load_settings(FULL, environ=FULL_ENV)
    assert settings.log_level == "DEBUG"
    assert settings.kafka.bootstrap_servers == ("broker-1:9093", "broker-2:9093")
    assert settings.kafka.bootstrap_servers_str == "broker-1:9093,broker-2:9093"
    assert settings.kafka.security.sasl_password == SecretStr(SASL_SECRET)
    # A dump with secrets revealed validates back to the same settings.
    assert Settings.model_validate(settings.model_dump()) == settings
    assert load_settings(FULL, environ=FULL_ENV) == settings

    judge = settings.judges["fast"].to_judge_model()
    assert judge == JudgeModel(
        model="hosted_vllm/qwen",
        api_base="http://vllm:8000/v1",
        api_key=SecretStr(SECRET),
        timeout_s=5,
        max_retries=1,
        deadline_s=12,
        transport="http",
        structured_output="prompt",
        temperature=0,
        max_tokens=512,
    )
    fast = settings.judges["fast"]
    assert (fast.max_concurrency, fast.rpm, fast.tpm, fast.spend_cap_usd_per_hour) == (4, 60, 10000, 2.5)
    assert (fast.circuit_breaker.failure_threshold, fast.circuit_breaker.reset_after_s) == (3, 10)

    align = settings.scorers[0]
    assert align.scale == 10
    assert align.selection() == Selection(
        kinds=frozenset({"agent", "inference"}),
        agents=NameFilter(include=("a-*",), exclude=("a-test",)),
        services=NameFilter(include=("checkout",)),
        where=(AttributePredicate(key="env", value="prod"), AttributePredicate(key="tenant", op="exists")),
        sample_rate=0.5,
    )
    otlp = settings.exporters.otlp
    assert otlp.is_enabled and otlp.protocol == "http/protobuf"
    assert otlp.header_values() == {"authorization": f"Bearer {TOKEN_SECRET}", "x-tenant": "acme"}

    ingest = settings.kafka.ingest_config("spans-b")
    assert (ingest.topic, ingest.encoding, ingest.dead_letter_topic, ingest.max_record_bytes) == (
        "spans-b",
        "otlp_json",
        "dlq",
        2048,
    )
    options = settings.kafka.consumer_options()
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_password"] == SASL_SECRET
    assert options["auto_offset_reset"] == "latest" and options["max_poll_records"] == 50
    assert "ssl_context" in options

    scorers = build_scorers(settings)
    assert scorers["align"].id == "align"
    assert scorers["align"].judge is not None and scorers["align"].judge.model == judge
    assert scorers["custom"].id == "custom"


def test_settings_from_path(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(MINIMAL)
    assert load_settings(path) == load_settings(MINIMAL)
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")


# -- errors with path and line -------------------------------------------------------------------


def test_unknown_key_is_named_with_its_line_and_a_suggestion() -> None:
    problems = problems_of(
        """
        kafka:
          bootstrap_servers: localhost:9092
          topcs: [a]
        scorers:
          - id: sim
            kind: content-similarity
            sampleing: 0.5
        """
    )
    assert [(path, line) for path, line, _ in problems] == [("kafka.topcs", 3), ("scorers[0].sampleing", 7)]
    assert "did you mean 'topics'?" in problems[0][2]
    assert "did you mean 'sampling'?" in problems[1][2]


def test_wrong_type_names_path_and_line() -> None:
    problems = problems_of(
        """
        kafka:
          bootstrap_servers: localhost:9092
        judges:
          j:
            model: openai/gpt-4o-mini
            rpm: lots
        scorers:
          - id: sim
            kind: content-similarity
            sampling: 2
        exporters:
          prometheus:
            port: http
        """
    )
    assert [(path, line) for path, line, _ in problems] == [
        ("judges.j.rpm", 6),
        ("scorers[0].sampling", 10),
        ("exporters.prometheus.port", 13),
    ]
    assert "integer" in problems[0][2]
    assert "less than or equal to 1" in problems[1][2]


def test_judge_ca_bundle_is_a_file_that_must_exist(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    text = """
        kafka: {bootstrap_servers: x}
        judges:
          j:
            model: hosted_vllm/qwen
            ca_bundle: ${CA_BUNDLE:-}
        scorers: [{id: sim, kind: content-similarity}]
        """
    settings = load_settings(yaml_text(text), environ={"CA_BUNDLE": str(ca)})
    assert settings.judges["j"].to_judge_model().ca_bundle == ca
    assert load_settings(yaml_text(text), environ={}).judges["j"].ca_bundle is None  # empty: unset
    problems = problems_of(text, environ={"CA_BUNDLE": str(tmp_path / "missing.pem")})
    assert [(path, line) for path, line, _ in problems] == [("judges.j.ca_bundle", 5)]
    assert "file" in problems[0][2]


def test_error_message_lists_every_problem() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings("kafka:\n  bootstrap_servers: x\n  topcs: [a]\nscorers: []\n")
    message = str(caught.value)
    assert "2 problem(s)" in message
    assert "  - kafka.topcs (line 3): unknown key" in message
    assert "  - scorers (line 4): must list at least one item" in message


def test_missing_required_keys() -> None:
    problems = problems_of("log_level: INFO\n")
    assert [(p, m) for p, _, m in problems] == [
        ("kafka", "required key is missing"),
        ("scorers", "required key is missing"),
    ]
    problems = problems_of("kafka: {}\nscorers: [{id: a, kind: content-similarity}]\n")
    assert problems == [("kafka.bootstrap_servers", 1, "required key is missing")]


def test_unknown_scorer_kind_and_bad_prebuilt_options() -> None:
    problems = problems_of(
        """
        kafka: {bootstrap_servers: x}
        judges: {j: {model: openai/gpt-4o-mini}}
        scorers:
          - id: a
            kind: prompt-alignmnt
          - id: b
            kind: prompt-alignment
            judge: j
            options:
              evaluation_mode: everything
          - id: c
            kind: "python: not a module"
          - id: d
            kind: content-similarity
            options: {ignore_kase: true}
        """
    )
    assert [(path, line) for path, line, _ in problems] == [
        ("scorers[0].kind", 5),
        ("scorers[1].options.evaluation_mode", 10),
        ("scorers[2].kind", 12),
        ("scorers[3].options.ignore_kase", 15),
    ]
    assert "did you mean 'prompt-alignment'?" in problems[0][2]
    assert "python: package.module:factory" in problems[2][2]


def test_yaml_syntax_error_has_a_line() -> None:
    problems = problems_of("kafka:\n  bootstrap_servers: [a\nscorers: x\n")
    assert problems[0][0] == "" and problems[0][1] is not None
    assert problems[0][2].startswith("YAML syntax error")


def test_duplicate_yaml_key_is_an_error() -> None:
    problems = problems_of("kafka: {bootstrap_servers: x}\nscorers: [{id: a, kind: content-similarity}]\nkafka: {}\n")
    assert problems == [("kafka", 3, "duplicate key (first on line 1)")]


def test_top_level_must_be_a_mapping() -> None:
    assert problems_of("- a\n- b\n")[0][2].startswith("the configuration must be a mapping")


def test_kafka_security_consistency() -> None:
    problems = problems_of(
        """
        kafka:
          bootstrap_servers: x
          security:
            security_protocol: SASL_PLAINTEXT
            ssl_cafile: /ca.pem
        scorers: [{id: a, kind: content-similarity}]
        """
    )
    assert {path for path, _, _ in problems} == {
        "kafka.security.sasl_mechanism",
        "kafka.security.sasl_username",
        "kafka.security.sasl_password",
        "kafka.security.ssl_cafile",
    }
    assert all(line == 5 or line == 3 for _, line, _ in problems)


def test_a_record_the_dead_letter_producer_could_not_carry_is_refused_at_validate() -> None:
    """kafka.max_record_bytes above the producer's max_request_size: the letter of a record just under the bound
    would be cut (or, before letters were bounded, refused and the partition stopped)."""
    problems = problems_of(
        """
        kafka:
          bootstrap_servers: x
          max_record_bytes: 4194304
        scorers: [{id: a, kind: content-similarity}]
        """
    )
    assert problems == [
        (
            "kafka.max_record_bytes",
            3,
            "4194304 is over max_request_size (1048576): the dead letter of a record the sidecar reads could not carry "
            "it; raise max_request_size (and the dead-letter topic's max.message.bytes) or lower max_record_bytes",
        )
    ]
    raised = load_settings(
        yaml_text(
            """
            kafka: {bootstrap_servers: x, max_record_bytes: 4194304, max_request_size: 4259840}
            scorers: [{id: a, kind: content-similarity}]
            """
        )
    )
    assert raised.kafka.max_request_size == 4259840


def test_otlp_enabled_needs_an_endpoint() -> None:
    problems = problems_of(MINIMAL + "exporters:\n  otlp: {enabled: true}\n")
    assert problems == [("exporters.otlp.endpoint", 7, "required when the OTLP exporter is enabled")]


def test_otlp_resource_attributes_never_take_the_sidecars_own() -> None:
    problems = problems_of(MINIMAL + "exporters:\n  otlp:\n    resource_attributes: [service.name, '']\n")
    assert problems == [
        ("exporters.otlp.resource_attributes[0]", 8, "service.name is the sidecar's own (the loop guard); not copied"),
        ("exporters.otlp.resource_attributes[1]", 8, "must not be empty"),
    ]


def test_phoenix_exporter_settings() -> None:
    problems = problems_of(MINIMAL + "exporters:\n  phoenix: {enabled: true}\n")
    assert problems == [("exporters.phoenix.base_url", 7, "required when the Phoenix exporter is enabled")]
    problems = problems_of(MINIMAL + "exporters:\n  phoenix: {base_url: phoenix:6006}\n")
    assert problems == [("exporters.phoenix.base_url", 7, "must start with http:// or https://")]

    settings = load_settings(MINIMAL + "exporters:\n  phoenix: {base_url: 'http://phoenix:6006'}\n")
    phoenix = settings.exporters.phoenix
    assert phoenix.is_enabled
    assert (phoenix.batch_size, phoenix.timeout_s, phoenix.max_pending, phoenix.span_wait_s) == (
        100,
        10.0,
        10_000,
        300.0,
    )
    assert phoenix.api_key_value({"PHOENIX_API_KEY": "px-key"}) == "px-key"  # from the environment
    assert phoenix.api_key_value({}) is None
    keyed = load_settings(MINIMAL + "exporters:\n  phoenix: {base_url: 'http://p:6006', api_key: px-set}\n")
    assert keyed.exporters.phoenix.api_key_value({"PHOENIX_API_KEY": "other"}) == "px-set"
    assert "px-set" not in repr(keyed) and "px-set" not in str(keyed.redacted_dict())
    # an empty ${PHOENIX_URL:-} switches it off
    assert not load_settings(MINIMAL + "exporters:\n  phoenix: {base_url: ''}\n").exporters.phoenix.is_enabled


def test_phoenix_reserves_the_annotation_name_note() -> None:
    text = MINIMAL.replace("id: sim", "id: note") + "exporters:\n  phoenix: {base_url: 'http://p:6006'}\n"
    problems = problems_of(text)
    assert [(path, message) for path, _, message in problems] == [
        ("scorers[0].id", "Phoenix reserves the annotation name 'note' for notes: rename the scorer")
    ]


# -- ${ENV} ----------------------------------------------------------------------------------------


def test_env_expansion_and_defaults() -> None:
    text = """
    kafka:
      bootstrap_servers: ${BROKERS}
      group_id: ${GROUP:-fallback-group}
      client_id: "${CLIENT:-}x"
    scorers: [{id: "${PREFIX}-sim", kind: content-similarity}]
    exporters:
      prometheus: {port: "${PORT:-9100}"}
    """
    settings = load_settings(yaml_text(text), environ={"BROKERS": "b1:9092,b2:9092", "PREFIX": "p", "CLIENT": ""})
    assert settings.kafka.bootstrap_servers == ("b1:9092", "b2:9092")
    assert settings.kafka.group_id == "fallback-group"
    assert settings.kafka.client_id == "x"
    assert settings.scorers[0].id == "p-sim"
    assert settings.exporters.prometheus.port == 9100  # expanded text, then validated as an int
    settings = load_settings(yaml_text(text), environ={"BROKERS": "b", "PREFIX": "p", "GROUP": "g", "PORT": "1"})
    assert (settings.kafka.group_id, settings.exporters.prometheus.port) == ("g", 1)


def test_expand_env_rules() -> None:
    env = {"A": "1", "EMPTY": ""}
    assert expand_env("${A}/${A:-x}/${EMPTY:-d}/${UNSET:-}", env) == "1/1/d/"
    assert expand_env("$${A} costs $5", env) == "${A} costs $5"
    assert expand_env("${EMPTY}", env) == ""  # set but empty, no default: empty


def test_missing_env_var_is_named_with_its_line_and_never_the_values() -> None:
    text = f"""
    kafka:
      bootstrap_servers: x
    judges:
      j:
        model: openai/gpt-4o-mini
        api_key: ${{JUDGE_API_KEY}}
    scorers: [{{id: a, kind: content-similarity}}]
    exporters:
      otlp:
        endpoint: http://collector:4317
        headers: {{authorization: "Bearer {TOKEN_SECRET}", x-key: "${{MISSING_HEADER}}"}}
      prometheus: {{port: "${{MISSING_PORT}}"}}
    """
    with pytest.raises(SettingsError) as caught:
        load_settings(yaml_text(text), environ={"OTHER": SECRET})
    problems = [(p.path, p.line) for p in caught.value.problems]
    assert problems == [
        ("judges.j.api_key", 6),
        ("exporters.otlp.headers.x-key", 11),
        ("exporters.prometheus.port", 12),  # only the variable problem, not also "not an integer"
    ]
    message = str(caught.value)
    assert "environment variable JUDGE_API_KEY is not set" in message
    assert "MISSING_HEADER" in message and "MISSING_PORT" in message
    assert SECRET not in message and TOKEN_SECRET not in message


def test_bad_variable_reference() -> None:
    problems = problems_of("kafka: {bootstrap_servers: '${1BAD}'}\nscorers: [{id: a, kind: content-similarity}]\n")
    assert problems[0][:2] == ("kafka.bootstrap_servers", 1)
    assert "bad variable reference" in problems[0][2]


# -- secrets -------------------------------------------------------------------------------------


def test_secrets_never_in_repr_or_redacted_dump() -> None:
    settings = load_settings(FULL, environ=FULL_ENV)
    dumps = [repr(settings), str(settings), json.dumps(settings.redacted_dict()), repr(settings.judges["fast"])]
    dumps.append(repr(settings.judges["fast"].to_judge_model()))
    for text in dumps:
        for secret in (SECRET, SASL_SECRET, TOKEN_SECRET):
            assert secret not in text
    redacted = settings.redacted_dict()
    assert redacted["judges"]["fast"]["api_key"] == "**********"
    assert redacted["kafka"]["security"]["sasl_password"] == "**********"
    assert redacted["exporters"]["otlp"]["headers"] == {"authorization": "**********", "x-tenant": "**********"}
    assert redacted["judges"]["fast"]["model"] == "hosted_vllm/qwen"  # the rest is intact
    json.dumps(redacted)  # JSON-able


def test_secrets_never_in_errors() -> None:
    # Secrets of the wrong type, secrets next to errors, secrets inside unknown keys: none is echoed.
    text = FULL.replace("max_retries: 1", f"max_retries: {SECRET}")
    text = text.replace("sasl_username: sidecar", f"sasl_username: [{SASL_SECRET}]")
    text = text.replace("x-tenant: acme", f"x-tenant: {{nested: {TOKEN_SECRET}}}")
    text += f"extra_key: {SECRET}\n"
    with pytest.raises(SettingsError) as caught:
        load_settings(text, environ=FULL_ENV)
    message = str(caught.value)
    assert {p.path for p in caught.value.problems} == {
        "judges.fast.max_retries",
        "kafka.security.sasl_username",
        "exporters.otlp.headers.x-tenant",
        "extra_key",
    }
    for secret in (SECRET, SASL_SECRET, TOKEN_SECRET):
        assert secret not in message
        assert secret not in repr(caught.value)


# -- references between sections -----------------------------------------------------------------


def test_scorer_referencing_a_missing_judge() -> None:
    problems = problems_of(
        """
        kafka: {bootstrap_servers: x}
        judges: {main: {model: openai/gpt-4o-mini}}
        scorers:
          - id: a
            kind: prompt-alignment
            judge: mian
        """
    )
    assert problems == [("scorers[0].judge", 6, "no judge named 'mian' (judges: main)")]


def test_llm_kind_needs_a_judge() -> None:
    problems = problems_of("kafka: {bootstrap_servers: x}\nscorers:\n  - id: a\n    kind: prompt-alignment\n")
    assert problems == [("scorers[0].judge", 3, "kind 'prompt-alignment' needs a judge (judges: none defined)")]


def test_duplicate_scorer_ids() -> None:
    problems = problems_of(
        """
        kafka: {bootstrap_servers: x}
        scorers:
          - {id: sim, kind: content-similarity}
          - {id: other, kind: content-similarity}
          - {id: sim, kind: content-similarity}
        """
    )
    assert problems == [("scorers[2].id", 5, "duplicate scorer id (also scorers[0])")]


def test_score_topic_must_differ_from_inputs() -> None:
    problems = problems_of(MINIMAL + "exporters:\n  kafka_scores: {topic: otlp_spans}\n")
    assert problems == [("exporters.kafka_scores.topic", 7, "must differ from the input and dead-letter topics")]


# -- scorer factory ------------------------------------------------------------------------------


# Kinds that, as in Mastra, cannot be built without saying what to expect.
REQUIRED_OPTIONS: dict[str, dict[str, Any]] = {
    "tool-call-accuracy": {"expectedTool": "search"},
    "checks": {"checks": [{"type": "usedNoTools"}]},
    "llm-judge": {"instructions": "Judge the answer.", "prompt": "{{ output }}", "output": {"type": "boolean"}},
}


def test_every_registered_kind_builds_and_validates_its_options() -> None:
    kinds = scorer_kinds()
    assert {"prompt-alignment", "content-similarity"} <= set(kinds)
    judge = JudgeModel(model="openai/gpt-4o-mini")
    for name, kind in kinds.items():
        assert kind.description and kind.options.model_config.get("extra") == "forbid"
        settings = ScorerSettings(
            id=f"x-{name}",
            kind=name,
            judge="j" if kind.needs_judge else None,
            options=REQUIRED_OPTIONS.get(name, {}),
            # Each kind at a scope it scores (the conversation kinds score sessions only).
            targets={"scope": "span" if "span" in kind.scopes else "session"},
        )
        scorer = build_scorer(settings, {"j": judge})
        assert scorer.id == f"x-{name}"


def test_python_factory_with_judge_and_options() -> None:
    judge = JudgeModel(model="openai/gpt-4o-mini")
    settings = ScorerSettings(
        id="len", kind="python: tests.support.custom_scorer:create_length_scorer", judge="j", options={"limit": 4}
    )
    scorer = build_scorer(settings, {"j": judge})
    assert isinstance(scorer, Scorer)
    assert scorer.id == "len" and scorer.name == "len"
    assert scorer.description == "judge=openai/gpt-4o-mini"


async def test_python_factory_without_judge_gets_options_as_keywords() -> None:
    settings = ScorerSettings(
        id="const", kind="python:tests.support.custom_scorer:create_constant_scorer", options={"value": 0.25}
    )
    scorer = build_scorer(settings, {})
    assert (scorer.id, scorer.name) == ("const", "Constant scorer")
    result = await scorer.run(input="q", output="a")
    assert result.score == 0.25


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("python: tests.support.custom_scorer:create_not_a_scorer", "returned str, not a sidecar.scoring.Scorer"),
        ("python: tests.support.custom_scorer:create_failing_scorer", "raised RuntimeError: the factory failed"),
        ("python: tests.support.custom_scorer:missing", "is not a callable"),
        ("python: tests.support.custom_scorer:NOT_CALLABLE", "is not a callable"),
        ("python: tests.support.no_such_module:factory", "cannot import 'tests.support.no_such_module'"),
    ],
)
def test_python_factory_errors(kind: str, expected: str) -> None:
    with pytest.raises(ScorerBuildError) as caught:
        build_scorer(ScorerSettings(id="x", kind=kind), {})
    assert caught.value.key == "kind"
    assert expected in caught.value.message


def test_build_scorers_reports_every_problem() -> None:
    text = MINIMAL + "  - {id: bad, kind: 'python: tests.support.custom_scorer:create_not_a_scorer'}\n"
    text += "  - {id: worse, kind: 'python: tests.support.custom_scorer:create_failing_scorer'}\n"
    with pytest.raises(SettingsError) as caught:
        build_scorers(load_settings(text))
    assert [(p.path, p.line) for p in caught.value.problems] == [("scorers[1].kind", 6), ("scorers[2].kind", 7)]


def test_build_scorer_missing_judge_without_settings_validation() -> None:
    settings = ScorerSettings(id="a", kind="prompt-alignment", judge="gone")
    with pytest.raises(ScorerBuildError, match="no judge named 'gone'"):
        build_scorer(settings, {})


def test_judge_settings_defaults_match_judge_model() -> None:
    judge = JudgeSettings(model="openai/gpt-4o-mini")
    assert judge.to_judge_model() == JudgeModel(model="openai/gpt-4o-mini")
    assert judge.max_concurrency == 16 and judge.rpm is None and judge.spend_cap_usd_per_hour is None


# -- CLI -----------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


def test_cli_validate_ok() -> None:
    done = run_cli("validate", "--config", str(EXAMPLE))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "config OK: 3 scorers (prompt-alignment, echo-similarity, tool-use), 1 judge (default), topics (otlp_spans)"
    )


def test_cli_validate_warns_about_a_judge_without_its_key() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "JUDGE_MODEL"}
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(EXAMPLE)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False, env=environment,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # a warning: where the service runs, the key may be set
    assert done.stdout.startswith("config OK: 3 scorers")
    assert (
        "warning: judge 'default' (openai/gpt-4o-mini) has no API key: set OPENAI_API_KEY or judges.default.api_key "
        "(in this environment)"
    ) in done.stderr
    environment["OPENAI_API_KEY"] = SECRET
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(EXAMPLE)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False, env=environment,
    )  # fmt: skip
    assert done.returncode == 0 and "has no API key" not in done.stderr and SECRET not in done.stderr + done.stdout


def test_cli_validate_invalid(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        f"kafka:\n  bootstrap_servers: x\n  topcs: [a]\njudges:\n  j: {{model: m, api_key: {SECRET}, rpm: x}}\n"
    )
    done = run_cli("validate", "--config", str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"config INVALID: {path}" in done.stderr
    assert "kafka.topcs (line 3): unknown key" in done.stderr
    assert "judges.j.rpm (line 5)" in done.stderr
    assert "scorers: required key is missing" in done.stderr
    assert SECRET not in done.stderr


def test_cli_validate_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(MINIMAL)
    assert main(["validate", "--config", str(path)]) == 0
    assert capsys.readouterr().out.startswith("config OK: 1 scorer (sim), 0 judges (none), topics (otlp_spans)")


# -- whole-trace scope -----------------------------------------------------------------------------


def test_trace_scope_defaults_and_bounds() -> None:
    settings = load_settings(
        yaml_text(
            """
            kafka: {bootstrap_servers: localhost:9092}
            scorers:
              - {id: sim, kind: content-similarity}
              - {id: whole, kind: content-similarity, targets: {scope: trace}}
            runtime: {trace_buffer: {idle_s: 2}}
            """
        ),
        environ={},
    )
    assert [s.targets.scope for s in settings.scorers] == ["span", "trace"]
    buffer = settings.runtime.trace_buffer
    assert (buffer.idle_s, buffer.max_wait_s, buffer.max_traces) == (2, 120, 20_000)


def test_trace_scope_assembles_agent_spans_only_and_max_wait_covers_idle() -> None:
    found = problems_of(
        """
        kafka: {bootstrap_servers: localhost:9092}
        scorers:
          - {id: calls, kind: content-similarity, targets: {kinds: [inference], scope: trace}}
        runtime: {trace_buffer: {idle_s: 10, max_wait_s: 5}}
        """
    )
    assert [(path, line) for path, line, _ in found] == [
        ("scorers[0].targets.kinds", 3),
        ("runtime.trace_buffer.max_wait_s", 4),
    ]
    assert "kinds must be [agent]" in found[0][2] and found[1][2] == "must be at least idle_s"
