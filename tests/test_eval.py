"""``scoring-sidecar eval``: the example dataset and config against a loopback judge."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.cli import main
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.eval import EvalError, Progress, load_dataset, parse_threshold, render_report
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.threaded_judge import ThreadedJudgeServer

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "examples" / "eval-dataset.jsonl"
CONFIG = ROOT / "examples" / "eval.yaml"
THRESHOLDS = ROOT / "examples" / "eval-thresholds.yaml"
LIVE_CONFIG = ROOT / "examples" / "sidecar.yaml"
ITEMS = sum(1 for line in DATASET.read_text().splitlines() if line.strip())
# The fields every Kafka score record has (exporters.kafka_scores.score_record_json).
RECORD_FIELDS = {
    "scoreId",
    "timestamp",
    "traceId",
    "spanId",
    "scorerId",
    "scorerName",
    "scoreSource",
    "score",
    "reason",
    "runId",
    "metadata",
}


_FLAKY_SEEN: set[str] = set()


def _responder(body: dict[str, Any]) -> Reply:
    prompt = json.dumps(body.get("messages"))
    if "FAIL-ME" in prompt:
        return Reply.error(400, "this item makes the judge refuse", code="invalid_request")
    if "FLAKY-ONCE" in prompt and "analyze" not in _FLAKY_SEEN:
        _FLAKY_SEEN.add("analyze")  # the first call for this item fails; the client's retry succeeds
        return Reply.error(503, "overloaded")
    return heuristic_reply(body)


@pytest.fixture(scope="module")
def loopback_judge() -> Iterator[JudgeServer]:
    with ThreadedJudgeServer(_responder) as server:
        yield server


@pytest.fixture
def judge_env(loopback_judge: JudgeServer, monkeypatch: pytest.MonkeyPatch) -> JudgeServer:
    monkeypatch.setenv("JUDGE_API_BASE", loopback_judge.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-eval")
    monkeypatch.delenv("JUDGE_MODEL", raising=False)
    loopback_judge.requests.clear()
    return loopback_judge


def _rows(out: str) -> dict[str, list[str]]:
    return {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.split()[:1] in (["prompt-alignment"], ["similarity"])
    }


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_example_dataset_table_and_results(
    judge_env: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "results.jsonl"
    code = main(
        ["eval", str(DATASET), "--config", str(CONFIG), "--thresholds", str(THRESHOLDS), "--output", str(output)]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = _rows(captured.out)
    # scorer avg scored failed not-scorable tokens-in tokens-out cost threshold...
    assert rows["prompt-alignment"][2:5] == [str(ITEMS), "0", "0"]
    assert rows["similarity"][2:5] == [str(ITEMS), "0", "0"]
    assert int(rows["prompt-alignment"][5]) > 0 and int(rows["similarity"][5]) == 0  # judge tokens: LLM scorer only
    assert rows["prompt-alignment"][-1] == "ok" and rows["similarity"][-1] == "ok"
    assert re.search(r"judge tokens \d+ in / \d+ out, estimated cost \$\d+\.\d{4}", captured.out)
    assert "progress:" in captured.err  # not a terminal: plain progress lines
    assert len(judge_env.requests) == 2 * ITEMS  # analyze + reason per item, through the configured judge

    records = _lines(output)
    assert len(records) == 2 * ITEMS
    assert [r["scorerId"] for r in records[:2]] == ["prompt-alignment", "similarity"]  # dataset order, then scorers
    for record in records:
        assert set(record) >= RECORD_FIELDS, sorted(RECORD_FIELDS - set(record))
        assert record["scoreSource"] == "eval" and record["outcome"] == "scored"
        assert re.fullmatch(r"[0-9a-f]{32}", record["traceId"]) and re.fullmatch(r"[0-9a-f]{16}", record["spanId"])
        assert 0.0 <= record["score"] <= 1.0
        assert "input" not in record and "output" not in record
    judged = [r for r in records if r["scorerId"] == "prompt-alignment"]
    assert all(r["judge"]["analyze"]["executions"][0]["status"] == "success" for r in judged)
    assert all(r["analyzePrompt"] and r["reason"].startswith("The score is") for r in judged)
    assert records[0]["metadata"]["evalItemId"] == "factorial-good" and records[0]["metadata"]["evalItem"] == 0

    # Same dataset, same score ids: runs can be compared record by record.
    again = tmp_path / "again.jsonl"
    assert main(["eval", str(DATASET), "--config", str(CONFIG), "--output", str(again), "--no-progress"]) == 0
    assert [r["scoreId"] for r in _lines(again)] == [r["scoreId"] for r in records]


def test_threshold_breach_exits_non_zero(judge_env: JudgeServer, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["eval", str(DATASET), "--config", str(CONFIG), "--no-progress"]
    assert main([*base, "--threshold", "similarity=0.95"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"similarity .*>= 0\.95 FAIL \(0\.\d\d\)", out), out
    assert "THRESHOLD BREACHED: similarity" in out

    assert main([*base, "--threshold", "prompt-alignment=:0.1"]) == 1  # a maximum only
    assert "THRESHOLD BREACHED: prompt-alignment" in capsys.readouterr().out

    # The file's thresholds hold; a command-line threshold overrides the file's for its scorer.
    assert main([*base, "--thresholds", str(THRESHOLDS)]) == 0
    assert main([*base, "--thresholds", str(THRESHOLDS), "--threshold", "similarity=0.2:0.3"]) == 1
    assert "0.2..0.3 FAIL" in capsys.readouterr().out


def test_a_failed_item_does_not_abort_the_run(
    judge_env: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "with-failure.jsonl"
    bad = {"id": "refused", "input": "Summarise this ticket", "output": "FAIL-ME please"}
    flaky = {"id": "retried", "input": "Summarise this other ticket", "output": "FLAKY-ONCE summary"}
    _FLAKY_SEEN.clear()
    dataset.write_text(DATASET.read_text() + json.dumps(bad) + "\n" + json.dumps(flaky) + "\n")
    output = tmp_path / "results.jsonl"
    code = main(
        ["eval", str(dataset), "--config", str(CONFIG), "--output", str(output), "--no-progress", "--allow-failures"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err  # failures are counted, not fatal; no threshold was given
    rows = _rows(captured.out)
    assert rows["prompt-alignment"][2:4] == [str(ITEMS + 1), "1"]
    assert rows["similarity"][2:4] == [str(ITEMS + 2), "0"]
    records = _lines(output)
    assert len(records) == 2 * (ITEMS + 2)
    retried = next(
        r for r in records if r["metadata"].get("evalItemId") == "retried" and r["scorerId"] == "prompt-alignment"
    )
    # The judge answered its first call for this item with a 503; the client's transport retry got the score.
    assert retried["outcome"] == "scored" and "analyze" in _FLAKY_SEEN
    failed = [r for r in records if r["outcome"] == "failed"]
    assert len(failed) == 1
    record = failed[0]
    assert record["scorerId"] == "prompt-alignment" and record["metadata"]["evalItemId"] == "refused"
    assert record["score"] is None and set(record) >= RECORD_FIELDS
    assert record["error"]["name"] == "ScorerRunError" and record["error"]["failedStep"] == "analyze"
    assert record["error"]["cause"]["name"] == "BadRequestError", record["error"]
    execution = record["judge"]["analyze"]["executions"][0]
    assert execution["status"] == "failed" and execution["error"]["name"] == "BadRequestError", execution

    # A threshold still gates on the items that scored; a scorer with no score at all breaches its threshold.
    assert (
        main(
            [
                *("eval", str(dataset), "--config", str(CONFIG), "--no-progress", "--allow-failures"),
                *("--threshold", "prompt-alignment=0.3"),
            ]
        )
        == 0
    )
    only_bad = tmp_path / "only-bad.jsonl"
    only_bad.write_text(json.dumps(bad) + "\n")
    assert (
        main(["eval", str(only_bad), "--config", str(CONFIG), "--no-progress", "--threshold", "prompt-alignment=0.3"])
        == 1
    )
    assert "FAIL (no score)" in capsys.readouterr().out


def test_failed_runs_exit_3_with_a_line_saying_so_unless_allowed(
    judge_env: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every run failing used to exit 0 when no threshold was given: a CI job passed on nothing scored."""
    dataset = tmp_path / "refused.jsonl"
    dataset.write_text(
        "".join(json.dumps({"id": f"r{i}", "input": "Summarise", "output": f"FAIL-ME {i}"}) + "\n" for i in range(2))
    )
    base = ["eval", str(dataset), "--config", str(CONFIG), "--no-progress"]
    assert main(base) == 3
    out = capsys.readouterr().out
    assert "RUNS FAILED: 2 of 4 runs have no score (the averages leave them out); --allow-failures accepts them" in out
    assert main([*base, "--allow-failures"]) == 0
    assert "RUNS FAILED: 2 of 4 runs (accepted: --allow-failures)" in capsys.readouterr().out
    # A breached threshold is the verdict that matters: 1, failures or not.
    assert main([*base, "--threshold", "prompt-alignment=0.5"]) == 1
    assert main([*base, "--threshold", "similarity=0.99"]) == 1
    capsys.readouterr()
    # Every run scored: 0, and no such line.
    assert main(["eval", str(DATASET), "--config", str(CONFIG), "--no-progress"]) == 0
    assert "RUNS FAILED" not in capsys.readouterr().out


def test_the_exit_statuses_are_documented() -> None:
    """The README's table and the command's help give the same four statuses."""
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    for status in ("| 0 | every run scored", "| 1 | a threshold breached", "| 2 | an invalid", "| 3 | runs failed"):
        assert status in readme
    help_text = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "eval", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--allow-failures" in help_text and "3: runs failed" in " ".join(help_text.split())


def test_csv_dataset_and_the_live_config_with_the_stand_in_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OPENAI_API_KEY", "JUDGE_API_BASE", "JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    dataset = tmp_path / "items.csv"
    dataset.write_text(
        "id,input,output,ground_truth,request_context\n"
        'a,"What is the capital of Australia","The capital of Australia is Canberra.",Canberra,'
        '"{""tenant"": ""acme""}"\n'
        'b,"List three primary colours","Red, yellow and blue.",,\n'
    )
    items = load_dataset(dataset)
    assert [i.id for i in items] == ["a", "b"] and items[0].request_context == {"tenant": "acme"}
    assert items[1].ground_truth is None and items[0].ground_truth == "Canberra"
    # The live configuration (kafka section, targets, sampling) works unchanged: the same scorer definitions.
    code = main(["eval", str(dataset), "--config", str(LIVE_CONFIG), "--stand-in-judge", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "not a language model" in captured.err
    assert "openai/stand-in-heuristic" in captured.out
    assert re.search(r"^prompt-alignment\s+[\d.]+\s+2\s+0\s+0", captured.out, re.MULTILINE), captured.out
    assert re.search(r"^echo-similarity\s+[\d.]+\s+2\s+0\s+0", captured.out, re.MULTILINE), captured.out


def test_invalid_inputs_exit_2(tmp_path: Path, judge_env: JudgeServer, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["eval", str(DATASET), "--config", str(CONFIG), "--no-progress"]
    assert main([*base, "--threshold", "similarity=1.5"]) == 2
    assert "outside [0, 1]" in capsys.readouterr().err
    assert main([*base, "--threshold", "nope=0.5"]) == 2
    assert "unknown scorer(s) nope" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"input": "a", "output": "b"}\n\n{"input": "only input"}\n')
    assert main(["eval", str(broken), "--config", str(CONFIG)]) == 2
    assert f"{broken}:3: 'output' is required" in capsys.readouterr().err
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("scorers:\n  - id: x\n    kind: prompt-alignmnt\n")
    assert main(["eval", str(DATASET), "--config", str(bad_config)]) == 2
    err = capsys.readouterr().err
    assert "config INVALID" in err and "scorers[0].kind (line 3)" in err and "did you mean 'prompt-alignment'" in err


def test_threshold_syntax_and_terminal_progress() -> None:
    assert str(parse_threshold("a=0.7")[1]) == ">= 0.7"
    assert str(parse_threshold("a=0.2:0.9")[1]) == "0.2..0.9"
    assert str(parse_threshold("a=:0.9")[1]) == "<= 0.9"
    for bad in ("a", "=0.5", "a=0.9:0.2", "a=x", "a=:"):
        with pytest.raises(EvalError):
            parse_threshold(bad)
    out = io.StringIO()
    progress = Progress(out, tty=True, width=10)
    progress(1, 4)
    progress(4, 4)
    text = out.getvalue()
    assert "\r[##........] 1/4 runs" in text and "ETA" in text and text.endswith("\n")
    assert "\r[##########] 4/4 runs" in text


def test_a_missing_api_key_is_said_before_scoring_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("JUDGE_API_BASE", raising=False)
    assert main(["eval", str(DATASET), "--config", str(CONFIG), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no table: nothing was scored
    assert "judge 'default' (openai/gpt-4o-mini) has no API key: set OPENAI_API_KEY" in captured.err
    assert "--stand-in-judge" in captured.err


def test_the_all_kinds_example_scores_every_kind_it_lists(capsys: pytest.CaptureFixture[str]) -> None:
    config = ROOT / "examples" / "eval-all-kinds.yaml"
    dataset = ROOT / "examples" / "eval-rag-dataset.jsonl"
    thresholds = ROOT / "examples" / "eval-all-kinds-thresholds.yaml"
    args = ["--config", str(config), "--thresholds", str(thresholds), "--stand-in-judge", "--no-progress"]
    code = main(["eval", str(dataset), *args])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    items = sum(1 for line in dataset.read_text().splitlines() if line.strip())
    kinds = yaml.safe_load(config.read_text())["scorers"]
    ids = {k["id"] for k in kinds}
    rows = {row[0]: row for row in (line.split() for line in captured.out.splitlines()) if row and row[0] in ids}
    assert set(rows) == ids
    for scorer, row in rows.items():
        assert row[2:5] == [str(items), "0", "0"], (scorer, row)  # every item scored, none failed


def test_the_report_counts_in_the_singular_for_one() -> None:
    from sidecar.eval import EvalReport, ScorerTally

    tally = ScorerTally("alignment", failed=1)
    report = EvalReport(tallies={"alignment": tally}, results=[], thresholds={}, elapsed_s=0.1, items=1)
    text = render_report(report)
    assert text.startswith("1 item x 1 scorer in 0.1s"), text
    assert "\n1 run failed (the judges answered every call" in text, text
    assert "RUNS FAILED: 1 run has no score" in text, text
