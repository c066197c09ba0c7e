"""Datasets from anyone who can open a pull request (docs/limits.md): a line that cannot be read is one named,
counted problem, never a traceback; content reaches the judge within the bounds of live runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.cli import main
from sidecar.conventions.session_turns import TurnCaps
from sidecar.eval import load_dataset
from sidecar.eval.dataset import DatasetError

ROOT = Path(__file__).resolve().parents[1]
LIVE_CONFIG = ROOT / "examples" / "sidecar.yaml"
CONFIG = ROOT / "examples" / "eval.yaml"
GOOD = json.dumps({"input": "Where is my order?", "output": "It ships tomorrow."})
NESTED = '{"input": "a", "output": "b", "request_context": ' + '{"k": ' * 10_000 + "1" + "}" * 10_000 + "}"


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ('{"input": "half a character: \\ud800", "output": "b"}', "holds a lone surrogate (\\ud800)"),
        (NESTED, "nests deeper than 64 levels"),
        ('{"input": "a", "output": "b", "request_context": ' + '{"k": ' * 100 + "1" + "}" * 100 + "}", "nests deeper"),
    ],
    ids=["lone surrogate", "10,000 levels", "100 levels"],
)
@pytest.mark.parametrize("command", ["eval", "preview"])
def test_a_line_that_cannot_be_read_is_one_named_problem_in_eval_and_preview(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str, expected: str, command: str
) -> None:
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("\n".join([GOOD, bad, GOOD, bad]) + "\n")
    if command == "eval":
        args = ["eval", str(dataset), "--config", str(CONFIG), "--stand-in-judge", "--no-progress"]
    else:
        args = ["preview", "--config", str(CONFIG), "--scorer", "prompt-alignment", "--dataset", str(dataset)]
        args.append("--show-prompt-only")
    status = main(args)
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and "bug in scoring-sidecar" not in err, err
    assert f"{dataset}:2: {expected}" in err and f"{dataset}:4: {expected}" in err, err
    if command == "eval":
        assert f"dataset INVALID: {dataset} (2 problems; nothing scored)" in err


def test_a_csv_cell_nesting_without_end_is_named_too(tmp_path: Path) -> None:
    dataset = tmp_path / "items.csv"
    nested = '"' + ("[" * 5000 + "]" * 5000) + '"'
    dataset.write_text(f"input,output,context\nq,a,{nested}\nq,a,\n")
    with pytest.raises(DatasetError) as raised:
        load_dataset(dataset)
    assert raised.value.problems == [f"{dataset}:2: nests deeper than 64 levels"]


def test_an_item_larger_than_a_live_span_may_be_is_not_scored_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 5 MB answer: a live span that large is dead-lettered (targets.max_input_bytes, 256 KiB), so eval does not
    send it to the judge either (it was 1.25 M prompt tokens for one item); the others are scored."""
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("\n".join([GOOD, json.dumps({"input": "q", "output": "y" * 5_000_000, "id": "huge"})]) + "\n")
    output = tmp_path / "results.jsonl"
    status = main(
        ["eval", str(dataset), "--config", str(CONFIG), "--stand-in-judge", "--no-progress", "--output", str(output)]
    )
    out = capsys.readouterr().out
    assert status == 3, out  # runs failed
    assert "eval item huge (line 2) is 5000" in out and "over targets.max_input_bytes (262144)" in out
    records = [json.loads(line) for line in output.read_text().splitlines()]
    huge = [r for r in records if r["metadata"].get("evalItemId") == "huge"]
    assert huge and all(r["outcome"] == "failed" for r in huge)
    assert all(r["outcome"] == "scored" for r in records if r["metadata"].get("evalItemId") != "huge")
    assert all(r["error"]["cause"]["name"] == "ItemTooLarge" for r in huge)


def test_a_conversations_turns_are_cut_to_the_caps_of_live_turns(tmp_path: Path) -> None:
    dataset = tmp_path / "conversations.jsonl"
    turns = [{"input": "q" * 100_000, "output": "a" * 100_000}, {"input": "short", "output": "fine"}]
    dataset.write_text(json.dumps({"id": "long", "turns": turns}) + "\n")
    [item] = load_dataset(dataset)
    request = item.request(TurnCaps(text=1000))
    assert request.session is not None
    assert [turn.truncated for turn in request.session.turns] == [True, False]
    first_in, first_out = request.input.input_messages[0], request.output[0]
    assert len(first_in.text) == 1000 and len(first_out.text) == 1000
    assert item.request().session.turns[0].truncated  # the live default caps (8,192 characters)
