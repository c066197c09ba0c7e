"""``eval`` tells an operator what is wrong before it scores anything: a whole dataset's problems at once,
a judge without its key, and, after a run, the real reason runs failed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

import pytest

from sidecar.cli import main
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.eval import DatasetError, load_dataset
from sidecar.testing.judge_server import JudgeServer
from tests.support.sidecar_process import free_port

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "eval.yaml"


def test_every_bad_jsonl_line_is_reported_at_once_and_nothing_is_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "items.jsonl"
    lines = [
        json.dumps({"input": "q1", "output": "a1"}),
        "{not json",
        json.dumps({"input": "q3"}),
        json.dumps({"input": "q4", "ouptut": "a4", "grond_truth": "g"}),
        "",
        json.dumps({"input": "q6", "output": "a6", "context": "[1, 2]"}),
        json.dumps({"input": "q7", "output": "a7", "weird": 1}),
    ]
    dataset.write_text("\n".join(lines) + "\n")
    output = tmp_path / "results.jsonl"

    code = main(["eval", str(dataset), "--config", str(CONFIG), "--stand-in-judge", "--output", str(output)])

    captured = capsys.readouterr()
    assert code == 2  # the documented code for an invalid dataset (`scoring-sidecar --help`)
    assert captured.out == "" and not output.exists()  # no table, no results: nothing was scored
    assert f"dataset INVALID: {dataset} (5 problems; nothing scored)" in captured.err
    problems = [line.strip() for line in captured.err.splitlines() if line.strip().startswith(f"- {dataset}:")]
    assert [p.split(":")[1] for p in problems] == ["2", "3", "4", "6", "7"]  # every bad line, in file order
    assert "not valid JSON" in problems[0]
    assert "'output' is required" in problems[1]
    assert "'grond_truth' (did you mean 'ground_truth'?)" in problems[2]
    assert "'ouptut' (did you mean 'output'?)" in problems[2]
    assert "'context' must be a list of strings" in problems[3]
    assert "'weird' (allowed: input, output" in problems[4]  # nothing close: the allowed fields instead


def test_csv_header_problems_are_reported_once_with_row_problems(tmp_path: Path) -> None:
    dataset = tmp_path / "items.csv"
    dataset.write_text(
        "input,output,groundtruth\n"  # a misspelt column: said once, on the header, not on every row
        '"q1","a1","g"\n'
        '"q2",,"g"\n'
        '"q3","a3","g"\n'
        '"","a4","g"\n'
    )
    with pytest.raises(DatasetError) as raised:
        load_dataset(dataset)
    assert raised.value.problems == [
        f"{dataset}:1: unknown column 'groundtruth' (did you mean 'ground_truth'?)",
        f"{dataset}:3: 'output' is required",
        f"{dataset}:5: 'input' is required",
    ]

    headless = tmp_path / "headless.csv"
    headless.write_text("Input,answer\n" + "q,a\n" * 50)
    with pytest.raises(DatasetError) as raised:
        load_dataset(headless)
    # Without input and output columns every row is unusable: the header says so, not 50 row lines.
    assert raised.value.problems == [
        f"{headless}:1: unknown column 'Input' (did you mean 'input'?)",
        f"{headless}:1: unknown column 'answer' (allowed: input, output, ground_truth, request_context, context, "
        "id, system, expected)",
        f"{headless}:1: the header has no 'input' column",
        f"{headless}:1: the header has no 'output' column",
    ]


def _env_without_keys(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("JUDGE_")}
    return {**env, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


async def _eval_process(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar.cli", "eval", *args, env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_a_judge_without_its_providers_key_is_named_before_scoring(tmp_path: Path) -> None:
    config = tmp_path / "anthropic.yaml"
    config.write_text(
        "judges:\n  claude:\n    model: anthropic/claude-3-5-haiku-latest\n"
        "scorers:\n  - {id: alignment, kind: prompt-alignment, judge: claude}\n"
    )
    dataset = tmp_path / "items.jsonl"
    dataset.write_text(json.dumps({"input": "q", "output": "a"}) + "\n")

    code, out, err = await _eval_process(str(dataset), "--config", str(config), env=_env_without_keys())

    assert code == 2, err  # the configuration exit code
    assert out == ""  # no table: nothing was scored
    assert (
        "judge 'claude' (anthropic/claude-3-5-haiku-latest) has no API key: set ANTHROPIC_API_KEY or "
        "judges.claude.api_key" in err
    )
    assert "--stand-in-judge" in err


async def test_a_judge_with_an_api_base_of_its_own_needs_no_key(tmp_path: Path, judge_server: JudgeServer) -> None:
    """A local OpenAI-compatible server often takes no key: eval must not refuse it for want of one."""
    judge_server.reset(heuristic_reply)
    dataset = tmp_path / "items.jsonl"
    dataset.write_text(json.dumps({"input": "Name a colour", "output": "Blue is a colour."}) + "\n")
    env = _env_without_keys(JUDGE_API_BASE=judge_server.url)

    code, out, err = await _eval_process(str(dataset), "--config", str(CONFIG), "--no-progress", env=env)

    assert code == 0, err
    assert re.search(r"^prompt-alignment\s+[\d.]+\s+1\s+0\s+0", out, re.MULTILINE), out
    assert judge_server.requests  # scored through the configured server, with no key
    assert all("authorization" not in {h.lower() for h in r.headers} for r in judge_server.requests)


def test_an_unreachable_judge_is_named_as_the_reason_runs_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "shed" nor a spend cap: the circuit opened on a judge nobody answers, and the table says so with the
    judge's last error."""
    closed_port = free_port()  # bound then released: nothing listens there
    config = tmp_path / "unreachable.yaml"
    config.write_text(
        "judges:\n  default:\n"
        f"    model: openai/gpt-4o-mini\n    api_base: http://127.0.0.1:{closed_port}/v1\n    api_key: sk-x\n"
        "    max_retries: 0\n    spend_cap_usd_per_hour: 1.0\n"
        "    circuit_breaker: {failure_threshold: 3, reset_after_s: 600}\n"
        "scorers:\n  - {id: alignment, kind: prompt-alignment, judge: default}\n"
        "runtime:\n  run_timeout_s: 1\n"  # eval's bound on a hold: the held runs give up after it
    )
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps({"input": f"q{i}", "output": f"a{i}"}) + "\n" for i in range(8)))

    code = main(
        ["eval", str(dataset), "--config", str(config), "--no-progress", "--concurrency", "2", "--allow-failures"]
    )

    out = capsys.readouterr().out
    assert code == 0, out  # no threshold: failures are reported, not fatal
    assert re.search(r"^alignment\s+-\s+0\s+8\s+0", out, re.MULTILINE), out
    assert "8 runs failed:" in out
    note = next(line for line in out.splitlines() if line.strip().startswith("judge openai/gpt-4o-mini:"))
    assert "circuit open for" in note and "runs refused: its circuit stayed open" in note, note
    assert "calls failed (3 connection error" in note, note
    assert "last error: APIConnectionError, no HTTP answer" in note and str(closed_port) in note, note
    assert "shed" not in out and "spend cap" not in out and "rate" not in note
