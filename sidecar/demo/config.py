"""The demo's configuration: what a user would write to run the same service against the demo's broker and
judge (``demo_config``), validated by the settings' own loader, and its options."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sidecar.embedded.heuristic_judge import STAND_IN_MODEL
from sidecar.settings import Settings, load_settings

__all__ = [
    "COMPACTED",
    "CONVERSATION_EVERY",
    "DEAD_LETTER_TOPIC",
    "DEFAULT_REAL_JUDGE",
    "DEMO_SCORERS",
    "FEEDBACK_TOPIC",
    "FEEDBACK_TOPICS",
    "GROUP_ID",
    "SCORES_TOPIC",
    "SESSIONS_TOPIC",
    "SPANS_TOPIC",
    "DemoOptions",
    "conversation_scorers",
    "demo_config",
    "demo_settings",
    "empty_key_notice",
    "judge_config",
    "serve_config_yaml",
    "stand_in_judge_config",
    "wants_real_judge",
    "write_private",
]

DEFAULT_REAL_JUDGE = "openai/gpt-4o-mini"
SPANS_TOPIC = "otlp_spans"
SCORES_TOPIC = "agent_scores"
DEAD_LETTER_TOPIC = "otlp_spans.dead_letter"
GROUP_ID = "scoring-sidecar-demo"
DEMO_SCORERS = ("prompt-alignment", "answer-relevancy", "toxicity")  # the judged ones
# Every CONVERSATION_EVERY-th trace produced is a turn of a multi-turn conversation (a few open at a time).
CONVERSATION_EVERY = 3
# The conversations' internal topic (compacted, as an operator creates it: docs/sessions.md), and how long a
# conversation stays quiet before it is scored: short, so that a demo of a minute shows conversation scores.
SESSIONS_TOPIC = "otlp_spans.session_turns"
SESSION_IDLE_S = 8.0
COMPACTED = {"cleanup.policy": "compact,delete"}
# Human labels joined to the scores (docs/feedback.md): the feedback topic (as many partitions as the score topic),
# the join's compacted state topic and the pairs' topic, as an operator creates them.
FEEDBACK_TOPIC = "agent_feedback"
FEEDBACK_STATE_TOPIC = "agent_feedback.join_state"
FEEDBACK_TOPICS = {FEEDBACK_TOPIC: 3, FEEDBACK_STATE_TOPIC: 3, f"{SCORES_TOPIC}.feedback_pairs": 1}
CANARY_EVERY_S = 30.0


@dataclass(frozen=True)
class DemoOptions:
    judge_model: str | None = None
    api_base: str | None = None
    duration_s: float | None = None  # None: until SIGINT/SIGTERM
    rate: float = 5.0  # traces per second
    max_records: int = 3000  # traces produced at most (the broker keeps every record in memory)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9464  # 0: a free port
    otlp_endpoint: str | None = None
    otlp_protocol: str = "grpc"
    interval_s: float = 5.0  # summary table period
    spend_cap_usd_per_hour: float = 1.0  # real judges only
    seed: int = 7


def demo_config(
    *,
    bootstrap: str,
    judge: dict[str, Any],
    metrics_host: str,
    metrics_port: int | str,
    otlp_endpoint: str | None = None,
    otlp_protocol: str = "grpc",
    canary_dataset: Path | None = None,
) -> dict[str, Any]:
    """The demo's configuration as the YAML a user would write: the targets select the synthetic agents' spans
    (agent spans, no sampling; tool-call accuracy on the one agent that calls tools); with ``canary_dataset``, prompt
    alignment's judge canary on it every 30 s."""
    alignment: dict[str, Any] = {"id": "prompt-alignment", "kind": "prompt-alignment", "judge": "default"}
    if canary_dataset is not None:
        alignment["canary"] = {"dataset": str(canary_dataset), "every_s": CANARY_EVERY_S}
    return {
        "log_level": "WARNING",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "topics": [SPANS_TOPIC],
            "group_id": GROUP_ID,
            "dead_letter_topic": DEAD_LETTER_TOPIC,
            "fetch_max_wait_ms": 100,
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
        },
        "judges": {"default": judge},
        "scorers": [
            alignment,
            {"id": "answer-relevancy", "kind": "answer-relevancy", "judge": "default"},
            {"id": "toxicity", "kind": "toxicity", "judge": "default"},
            {
                "id": "tool-call-accuracy",
                "kind": "tool-call-accuracy",
                "options": {"expected_tool": "lookup_account"},
                "targets": {"agents": {"include": ["support-bot"]}},  # the agent that calls tools
            },
            {"id": "completeness", "kind": "completeness"},
            *conversation_scorers(),
        ],
        "sessions": {"topic": SESSIONS_TOPIC, "idle_s": SESSION_IDLE_S},
        "feedback": {"topic": FEEDBACK_TOPIC, "state_topic": FEEDBACK_STATE_TOPIC, "hold_s": 600, "window": 100},
        "runtime": {"commit_interval_s": 1.0, "shutdown_timeout_s": 5, "run_timeout_s": 60},
        "exporters": {
            "prometheus": {"host": metrics_host, "port": metrics_port},
            "kafka_scores": {"topic": SCORES_TOPIC},
            "otlp": {"endpoint": otlp_endpoint, "protocol": otlp_protocol} if otlp_endpoint else {"enabled": False},
        },
    }


def conversation_scorers() -> list[dict[str, Any]]:
    """The conversation judges, on the demo's multi-turn conversations (sidecar.embedded.conversations)."""
    kinds = ("conversation-completeness", "user-frustration", "knowledge-retention", "role-adherence")
    return [{"id": kind, "kind": kind, "judge": "default", "targets": {"scope": "session"}} for kind in kinds]


def demo_settings(
    *,
    bootstrap: str,
    judge: dict[str, Any],
    metrics_host: str,
    metrics_port: int,
    otlp_endpoint: str | None = None,
    otlp_protocol: str = "grpc",
    canary_dataset: Path | None = None,
) -> Settings:
    """The demo's configuration, validated by the same loader as a user's file (and its ${VAR} rules)."""
    config = demo_config(
        bootstrap=bootstrap,
        judge=judge,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        otlp_endpoint=otlp_endpoint,
        otlp_protocol=otlp_protocol,
        canary_dataset=canary_dataset,
    )
    return load_settings(yaml.safe_dump(config, sort_keys=False), environ={})


def _variable(name: str, default: str | None) -> str:
    return f"${{{name}:-{default}}}" if default else f"${{{name}}}"


def serve_config_yaml(
    options: DemoOptions,
    *,
    bootstrap: str | None = None,
    judge_url: str | None = None,
    canary_dataset: Path | None = None,
) -> str:
    """A configuration for ``scoring-sidecar run`` against ``demo --serve``: the demo's scorers, with the
    broker, the stand-in judge and the metrics port as ``${VAR}`` (defaulting to the running demo's, when
    given), so the same file serves a demo on another port or a broker of your own."""
    stand_in = not wants_real_judge(options)
    judge, _ = judge_config(options, "${JUDGE_API_BASE}" if stand_in else None)
    if stand_in:
        judge["api_base"] = _variable("JUDGE_API_BASE", judge_url)
    config = demo_config(
        bootstrap=_variable("KAFKA_BOOTSTRAP_SERVERS", bootstrap),
        judge=judge,
        metrics_host=options.metrics_host,
        metrics_port=_variable("METRICS_PORT", str(options.metrics_port or 9464)),
        otlp_endpoint=options.otlp_endpoint,
        otlp_protocol=options.otlp_protocol,
        canary_dataset=canary_dataset,
    )
    config["log_level"] = "INFO"  # a newcomer sees the service join the group and start scoring
    header = (
        "# scoring-sidecar run --config THIS_FILE: the real service against `scoring-sidecar demo --serve`\n"
        "# (its embedded broker, stand-in judge and synthetic traffic). KAFKA_BOOTSTRAP_SERVERS, JUDGE_API_BASE\n"
        "# and METRICS_PORT override the defaults below; examples/sidecar.yaml documents every key.\n"
    )
    return header + yaml.safe_dump(config, sort_keys=False)


def stand_in_judge_config(url: str) -> dict[str, Any]:
    """The ``judges.<name>`` block of a judge pointing at the stand-in judge server at ``url``."""
    return {
        "model": STAND_IN_MODEL,
        "api_base": url,
        "api_key": "stand-in",
        "transport": "http",
        "timeout_s": 10,
        "max_retries": 1,
        "max_concurrency": 32,
    }


def judge_config(options: DemoOptions, stand_in_url: str | None) -> tuple[dict[str, Any], str]:
    if stand_in_url is not None:
        return stand_in_judge_config(stand_in_url), STAND_IN_MODEL
    model = options.judge_model or DEFAULT_REAL_JUDGE
    judge: dict[str, Any] = {
        "model": model,
        "max_concurrency": 8,
        "spend_cap_usd_per_hour": options.spend_cap_usd_per_hour,
        "temperature": 0,
    }
    if options.api_base:
        judge["api_base"] = options.api_base
    return judge, model


def wants_real_judge(options: DemoOptions, environ: Mapping[str, str] | None = None) -> bool:
    """``--judge-model`` given, or an OpenAI key in the environment (then ``openai/gpt-4o-mini``). A key set but
    empty (``OPENAI_API_KEY=``, as a shell or a compose file leaves it) is no key: the stand-in judges."""
    env = os.environ if environ is None else environ
    return options.judge_model is not None or bool(env.get("OPENAI_API_KEY", "").strip())


def empty_key_notice(options: DemoOptions, environ: Mapping[str, str] | None = None) -> str | None:
    """The line that says an empty ``OPENAI_API_KEY`` was taken for none (None: the key is absent or set)."""
    env = os.environ if environ is None else environ
    if options.judge_model is None and "OPENAI_API_KEY" in env and not env["OPENAI_API_KEY"].strip():
        return "OPENAI_API_KEY is set but empty: judging with the local stand-in (set the key, or pass --judge-model)"
    return None


def write_private(path: Path, text: str) -> None:
    """``text`` to ``path``, readable by its owner only, never through a symlink planted at ``path`` (``O_NOFOLLOW``:
    the demo's configuration names its broker and judge, and a shared temporary directory is anyone's)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
