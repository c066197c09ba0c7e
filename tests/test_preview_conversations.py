"""``preview`` of a scope session scorer: the conversations of a dataset, each shown as a session run (its id,
turns, close reason), the rendered transcript and the judge's per-turn verdicts, through the real judge client
against the stand-in judge server; and the conversations a file of OTLP records holds, assembled as the session
stage assembles them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.cli import main
from tests.support.conversations import Turn, conversation

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


def test_preview_of_a_session_scorer_reads_the_conversations_a_file_of_records_holds(
    tmp_path: Path, capsys: Any
) -> None:
    turns = [Turn("My order 4411 is late.", "It ships tomorrow."), Turn("Again: where is it?", "Tomorrow, as I said.")]
    records = b"".join(record for trace in conversation("conv-7", turns) for record in trace.records)
    trace_file = tmp_path / "turns.otlp"
    trace_file.write_bytes(records)  # one protobuf export: concatenated messages merge their spans
    base = ["preview", "--config", str(CONFIG), "--scorer", "frustration", "--show-prompt-only"]
    assert main([*base, "--file", str(trace_file)]) == 0
    printed = capsys.readouterr().out
    assert "── run 1/1: conversation conv-7, 2 turns (session scope, closed: idle)" in printed
    assert "My order 4411 is late." in printed and "Tomorrow, as I said." in printed
    # Records holding no conversation have nothing for it.
    (tmp_path / "empty.jsonl").write_text("{}\n")
    assert main([*base, "--file", str(tmp_path / "empty.jsonl")]) == 1
    assert "none selected by frustration" in capsys.readouterr().out
    # A one-turn dataset has nothing for it, and the single-turn example config nothing for a conversation.
    assert main([*base, "--dataset", str(ROOT / "examples" / "eval-dataset.jsonl")]) == 1
    assert "none for frustration, which scores conversations (items with turns)" in capsys.readouterr().out
