"""``preview`` of a scope session scorer: the conversations of a dataset, each shown as a session run (its id,
turns, close reason), the rendered transcript and the judge's per-turn verdicts, through the real judge client
against the stand-in judge server; the topic and OTLP files, which hold turns and not closed conversations,
refused with what to use instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "eval-conversations.yaml"
DATASET = ROOT / "examples" / "eval-conversations-dataset.jsonl"


def test_preview_shows_the_session_runs_of_a_conversation_dataset(capsys: Any) -> None:
    base = ["preview", "--config", str(CONFIG), "--dataset", str(DATASET), "--scorer", "frustration"]
    assert main([*base, "-n", "3", "--show-prompt-only", "--max-chars", "40"]) == 0
    printed = capsys.readouterr().out
    assert "preview of frustration (user-frustration, session scope" in printed
    assert printed.count("── run ") == 3
    assert "── run 1/3: conversation calm-password-reset, 3 turns (session scope, closed: idle)" in printed
    assert "Turn 2 of 4" in printed and "<untrusted_tool_call>" in printed  # the transcript, tool calls included
    assert main([*base, "-n", "5", "--stand-in-judge"]) == 0
    printed = capsys.readouterr().out
    assert "5 runs: 5 scored, 0 failed" in printed
    assert "labels: none 3 (60%), resolved 1 (20%), unresolved 1 (20%)" in printed
    assert "reason: The user became frustrated in turn 3" in printed  # the reason names the turn
    assert '"endedSatisfied"' in printed  # the judge's answer: per-turn verdicts, shown as it answered


def test_preview_of_a_session_scorer_refuses_the_topic_and_files_and_says_what_to_use(
    tmp_path: Path, capsys: Any
) -> None:
    trace_file = tmp_path / "traces.jsonl"
    trace_file.write_text("{}\n")
    base = ["preview", "--config", str(CONFIG), "--scorer", "frustration", "--show-prompt-only"]
    assert main([*base, "--file", str(trace_file)]) == 2
    assert "frustration scores whole conversations (scope session): preview it on a conversation dataset" in (
        capsys.readouterr().err
    )
    # A one-turn dataset has nothing for it, and the single-turn example config nothing for a conversation.
    assert main([*base, "--dataset", str(ROOT / "examples" / "eval-dataset.jsonl")]) == 1
    assert "none for frustration, which scores conversations (items with turns)" in capsys.readouterr().out
