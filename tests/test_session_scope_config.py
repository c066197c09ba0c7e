"""``targets.scope: session`` in a configuration: single-turn kinds refused by `validate` with the reason and the
line, conversation kinds refused at the single-run scopes with what to write instead, and accepted at session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.settings import SettingsError, load_settings

ROOT = Path(__file__).resolve().parent.parent

HEAD = """\
kafka:
  bootstrap_servers: localhost:9092
judges:
  default: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:9/v1", api_key: sk-test}
scorers:
"""


def scorer_yaml(kind: str, scope: str, options: str = "") -> str:
    return (
        HEAD
        + f"""\
  - id: s
    kind: {kind}
    judge: default
    targets:
      scope: {scope}
{options}"""
        # Where the conversations' turns go (the engine needs it at scope session).
        + "sessions: {topic: conversations}\n"
    )


WHOLE = "conversation-completeness, knowledge-retention, llm-judge, role-adherence, user-frustration"


@pytest.mark.parametrize("kind", ["answer-relevancy", "prompt-alignment", "toxicity", "rubric"])
def test_a_single_turn_kind_at_scope_session_is_refused_with_the_reason_and_its_line(kind: str) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(scorer_yaml(kind, "session"))
    assert [str(p) for p in raised.value.problems] == [
        f"scorers[0].targets.scope (line 10): kind {kind!r} scores one agent run, one request and its answer (its "
        "scopes: span, trace): at scope session it would read the conversation's first turn only; use a kind that "
        f"reads whole conversations ({WHOLE}), or scope: trace to score every turn on its own"
    ]


def test_validate_prints_it(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(scorer_yaml("answer-relevancy", "session"))
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "scorers[0].targets.scope (line 10): kind 'answer-relevancy' scores one agent run" in (
        done.stdout + done.stderr
    )


@pytest.mark.parametrize("scope", ["span", "trace"])
def test_a_conversation_kind_at_a_single_run_scope_says_to_score_sessions(scope: str) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(scorer_yaml("user-frustration", scope))
    assert [str(p) for p in raised.value.problems] == [
        "scorers[0].targets.scope (line 10): kind 'user-frustration' reads whole conversations: it scores at scope "
        "session only (set targets.scope: session)"
    ]


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("conversation-completeness", ""),
        ("user-frustration", ""),
        ("knowledge-retention", ""),
        ("role-adherence", "    options: {role: a billing agent}\n"),
    ],
)
def test_a_conversation_kind_at_scope_session_is_accepted(kind: str, options: str) -> None:
    [scorer] = load_settings(scorer_yaml(kind, "session", options)).scorers
    assert (scorer.kind, scorer.targets.scope) == (kind, "session")
