"""The ``sessions`` block and ``scope: session`` in the configuration: what it requires, what ``validate`` refuses and
why, and a worker's share of the conversations' buffer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sidecar.app.scorer_factory import build_scorers
from sidecar.app.worker_share import settings_for_worker
from sidecar.runtime.sessions import SessionLimits, TurnCaps
from sidecar.settings import SettingsError, load_settings

TURN_COUNT = "python: tests.support.session_scorers:create_turn_count_scorer"
LAST_ANSWER = "python: tests.support.session_scorers:create_last_answer_length"


def config(scorers: str, sessions: str = "sessions: {topic: conversations}") -> str:
    return (
        textwrap.dedent(
            f"""\
        kafka: {{bootstrap_servers: localhost:9092}}
        {sessions}
        scorers:
        """
        )
        + textwrap.indent(textwrap.dedent(scorers).strip("\n"), "  ")
        + "\n"
    )


def problems_of(text: str) -> list[tuple[str, int | None, str]]:
    with pytest.raises(SettingsError) as caught:
        load_settings(text, environ={})
    return [(p.path, p.line, p.message) for p in caught.value.problems]


def test_the_sessions_block_defaults_to_the_design_and_maps_onto_the_engines_limits() -> None:
    settings = load_settings(
        config(
            f"- {{id: turns, kind: '{TURN_COUNT}', targets: {{scope: session}}, sampling: 0.5}}",
            "sessions: {topic: conversations, idle_s: 30, caps: {text: 100}}",
        ),
        environ={},
    )
    assert settings.sessions is not None
    limits = settings.sessions.limits()
    assert limits == SessionLimits(topic="conversations", idle_s=30.0, caps=TurnCaps(text=100))
    assert limits.id_attributes == ("gen_ai.conversation.id", "session.id")
    assert (limits.max_duration_s, limits.max_turns, limits.max_session_bytes, limits.max_bytes) == (
        14_400.0, 50, 256 * 1024, 256 * 1024 * 1024,
    )  # fmt: skip
    assert build_scorers(settings)  # a kind declaring scope session builds at scope session


def test_scope_session_needs_the_sessions_block_and_agent_spans() -> None:
    [(path, line, message)] = problems_of(
        config(f"- {{id: turns, kind: '{TURN_COUNT}', targets: {{scope: session}}}}", sessions="")
    )
    assert (path, line) == ("scorers[0].targets.scope", 4) and "needs the sessions block" in message
    [(path, line, message)] = problems_of(
        config(f"- {{id: calls, kind: '{LAST_ANSWER}', targets: {{scope: session, kinds: [inference]}}}}")
    )
    assert (path, line) == ("scorers[0].targets.kinds", 4) and "kinds must be [agent]" in message


def test_a_single_turn_kind_at_scope_session_is_refused_with_the_reason() -> None:
    [(path, line, message)] = problems_of(config("- {id: sim, kind: content-similarity, targets: {scope: session}}"))
    assert (path, line) == ("scorers[0].targets.scope", 4)
    assert "would read the conversation's first turn only" in message and "scope: trace" in message


def test_a_python_kind_declares_its_scopes_as_a_prebuilt_kind_does() -> None:
    # Declared session-only: refused at another scope, by the same check (validate runs build_scorers).
    settings = load_settings(config(f"- {{id: turns, kind: '{TURN_COUNT}'}}"), environ={})
    with pytest.raises(SettingsError) as caught:
        build_scorers(settings)
    [problem] = caught.value.problems
    assert problem.path == "scorers[0].targets.scope"
    assert "reads whole conversations" in problem.message
    # A plain python factory (no declared kind) may score a conversation.
    plain = load_settings(config(f"- {{id: last, kind: '{LAST_ANSWER}', targets: {{scope: session}}}}"), environ={})
    assert list(build_scorers(plain)) == ["last"]


def test_the_internal_topic_is_its_own_and_the_bounds_agree() -> None:
    found = problems_of(
        config(
            f"- {{id: turns, kind: '{TURN_COUNT}', targets: {{scope: session}}}}",
            "sessions: {topic: otlp_spans, idle_s: 600, max_duration_s: 60, max_bytes: 10, max_session_bytes: 100}",
        )
    )
    assert sorted(path for path, _, _ in found) == ["sessions.max_bytes", "sessions.max_duration_s"]
    [(path, _, message)] = problems_of(
        config(f"- {{id: turns, kind: '{TURN_COUNT}', targets: {{scope: session}}}}", "sessions: {topic: otlp_spans}")
    )
    assert path == "sessions.topic" and "must differ" in message


def test_workers_share_the_conversations_buffer() -> None:
    settings = load_settings(
        config(
            f"- {{id: turns, kind: '{TURN_COUNT}', targets: {{scope: session}}}}",
            "sessions: {topic: conversations, max_bytes: 1000000, max_session_bytes: 1000}",
        ),
        environ={},
    )
    shares = [settings_for_worker(settings, i, 3).sessions for i in range(3)]
    assert [s.max_bytes for s in shares if s is not None] == [333_334, 333_333, 333_333]


def test_cli_validate_names_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "sessions.yaml"
    path.write_text(config("- {id: sim, kind: content-similarity, targets: {scope: session}}"))
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "scorers[0].targets.scope (line 4): kind 'content-similarity' scores one agent run" in done.stderr
