"""``eval`` with the example's two custom judges (examples/eval-custom-judges.yaml) against a scripted judge
that decides as a careful reviewer would on these items: exit status by thresholds, labels in the table and in
the results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import quoted
from tests.support.threaded_judge import ThreadedJudgeServer

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "examples" / "eval-custom-judges-dataset.jsonl"
CONFIG = ROOT / "examples" / "eval-custom-judges.yaml"
THRESHOLDS = ROOT / "examples" / "eval-custom-judges-thresholds.yaml"
VIOLATIONS = ("refunded the gift card", "as an exception")


def reviewer(body: dict[str, Any]) -> Reply:
    """Refund policy: the two answers that promise what the policy forbids are violations, the one that hints at
    an exception is borderline. Language: the German customer answered in English fails."""
    messages = body["messages"]
    system = next(m["content"] for m in messages if m["role"] == "system")
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    answer = quoted(prompt, "output")
    if "refund policy" in system:
        label = "compliant"
        if any(marker in answer for marker in VIOLATIONS):
            label = "violation"
        elif "responsable" in answer:
            label = "borderline"
        return Reply.json({"reason": f"judged {label}", "label": label})
    passed = not answer.startswith("Your order 7710")
    return Reply.json({"reason": "same language" if passed else "answered in English", "passed": passed})


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    with ThreadedJudgeServer(reviewer) as server:
        monkeypatch.setenv("JUDGE_API_BASE", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-custom-judges")
        monkeypatch.delenv("JUDGE_MODEL", raising=False)
        yield server


def test_custom_judges_in_eval_exit_by_their_thresholds(
    judge: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "results.jsonl"
    base = ["eval", str(DATASET), "--config", str(CONFIG), "--no-progress"]
    assert main([*base, "--thresholds", str(THRESHOLDS), "--output", str(output)]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split()[:1] in (["refund-policy"], ["language-match"]) and line.split()[1] != "labels:"
    }
    # refund-policy: compliant 1 ×3, borderline 0.5, violation 0 ×2 → 3.5 / 6; language-match: 5 of 6 pass.
    assert rows["refund-policy"][1:5] == ["0.583", "6", "0", "0"] and rows["refund-policy"][-1] == "ok"
    assert rows["language-match"][1:5] == ["0.833", "6", "0", "0"] and rows["language-match"][-1] == "ok"
    assert "refund-policy labels: compliant 3, violation 2, borderline 1" in out
    assert "language-match labels: pass 5, fail 1" in out
    assert len(judge.requests) == 12  # one judge call per item and judge
    records = [json.loads(line) for line in output.read_text().splitlines()]
    by_item = {(r["metadata"]["evalItemId"], r["scorerId"]): r for r in records}
    gift = by_item[("gift-card-violation-en", "refund-policy")]
    assert (gift["score"], gift["label"], gift["reason"]) == (0.0, "violation", "judged violation")
    assert by_item[("wrong-language-de", "language-match")]["label"] == "fail"

    # A stricter bar breaches: exit 1, and the table says which.
    assert main([*base, "--thresholds", str(THRESHOLDS), "--threshold", "language-match=0.9"]) == 1
    out = capsys.readouterr().out
    assert "THRESHOLD BREACHED: language-match" in out and ">= 0.9 FAIL (0.83)" in out
    # The policy judge's bar: two violations in six answers keep its average under 0.6.
    assert main([*base, "--threshold", "refund-policy=0.6"]) == 1
    assert "THRESHOLD BREACHED: refund-policy" in capsys.readouterr().out


def test_the_example_runs_without_a_key_against_the_stand_in_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--stand-in-judge`` on the example: every item scored, the verdicts spread over the labels (not the
    first label for every item), each reason naming the stand-in and its word rule; the language gate breaches,
    as the example's comment says, since the stand-in does not read languages."""
    monkeypatch.delenv("JUDGE_MODEL", raising=False)
    monkeypatch.delenv("JUDGE_API_BASE", raising=False)
    output = tmp_path / "results.jsonl"
    args = ["eval", str(DATASET), "--config", str(CONFIG), "--thresholds", str(THRESHOLDS), "--no-progress"]
    assert main([*args, "--stand-in-judge", "--output", str(output)]) == 1
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[1:2] and "labels:" not in line}
    assert rows["refund-policy"][2:4] == ["6", "0"] and rows["language-match"][2:4] == ["6", "0"]  # none failed
    assert "refund-policy labels: borderline 3, compliant 2, violation 1" in out
    assert "language-match labels: fail 3, pass 3" in out
    assert "THRESHOLD BREACHED: language-match\n" in out
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert all(r["reason"].startswith("stand-in heuristic (word rules, not a language model): ") for r in records)
    by_item = {(r["metadata"]["evalItemId"], r["scorerId"]): r for r in records}
    in_window = by_item[("refund-in-window-en", "refund-policy")]
    assert (in_window["score"], in_window["label"]) == (1.0, "compliant")
    assert "'compliant', the best of 3 labels from best to worst" in in_window["reason"]
