"""``eval`` on conversation datasets: items with ``turns`` read and checked (every problem with its line), built
into the session run the service hands to scope session scorers (the contract of sidecar/core/runs.py), scored
through the real judge client against a scripted judge server, gated by thresholds with the usual exit
statuses; the example (examples/eval-conversations.yaml) end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.eval import EvalError, load_dataset
from sidecar.eval.command import run_eval
from sidecar.eval.dataset import DatasetError
from sidecar.scorers.conversation.transcript import conversation_of
from sidecar.settings import load_eval_settings
from sidecar.testing.judge_server import JudgeServer, Reply

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "eval-conversations.yaml"
EXAMPLE_DATASET = ROOT / "examples" / "eval-conversations-dataset.jsonl"
EXAMPLE_THRESHOLDS = ROOT / "examples" / "eval-conversations-thresholds.yaml"

CONVERSATION = {
    "id": "lost-order",
    "system": "You are a support agent.",
    "turns": [
        {
            "input": "Where is order 1234?",
            "output": "It is lost.",
            "tool_calls": [{"name": "lookup_order", "arguments": {"id": 1234}, "result": {"status": "lost"}}],
        },
        {"input": "Refund it.", "output": "Refunded."},
        {"input": "Thanks!", "output": "You are welcome."},
    ],
}
SINGLE = {"id": "one-turn", "input": "Hello?", "output": "Hello! How can I help?"}


def dataset(tmp_path: Path, *items: dict[str, Any], name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


# -- the dataset --------------------------------------------------------------------------------------------------


def test_a_conversation_item_becomes_the_session_run_of_the_contract(tmp_path: Path) -> None:
    [item] = load_dataset(dataset(tmp_path, CONVERSATION))
    assert item.is_conversation and item.input is None and item.output is None
    request = item.request()
    window = request.session
    assert window is not None and request.scope == "session"
    assert window.conversation_id == "lost-order" and window.close_reason == "idle" and window.complete
    assert len(window.turns) == 3
    # The target is the last turn's agent span; the subject names the window by its first turn.
    assert (request.target.trace_id, request.target.span_id) == (window.turns[-1].trace_id, window.turns[-1].span_id)
    assert request.subject == f"session:lost-order:{window.turns[0].trace_id}:{window.turns[0].span_id}"
    assert request.record_key == b"lost-order"
    # Turn i is input message i and output message i, its tool calls inside its answer.
    assert [m.text for m in request.input.input_messages] == ["Where is order 1234?", "Refund it.", "Thanks!"]
    assert [m.text for m in request.output] == ["It is lost.", "Refunded.", "You are welcome."]
    assert [m.id for m in request.input.input_messages] == [f"{t.span_id}-in-0" for t in window.turns]
    [call] = request.output[0].tool_invocations
    assert (call.tool_name, call.args, call.result, call.state) == (
        "lookup_order",
        {"id": 1234},
        {"status": "lost"},
        "result",
    )
    assert [m.content for m in request.input.system_messages] == ["You are a support agent."]
    assert conversation_of(request.input, request.output).turns[0].tool_calls[0].name == "lookup_order"
    # The same item gives the same ids in every run: score ids can be compared record by record.
    [again] = load_dataset(dataset(tmp_path, CONVERSATION, name="again.jsonl"))
    assert again.request().subject == request.subject


def test_every_problem_of_a_conversation_dataset_is_reported_with_its_line(tmp_path: Path) -> None:
    bad = [
        {**CONVERSATION, "input": "also this"},
        {"turns": []},
        {"turns": [{"input": "hi", "ouput": "hello"}]},
        {"turns": [{"input": "hi", "output": "hello", "tool_calls": [{"tool": "x"}]}]},
        {"turns": [{"input": "", "output": "hello"}]},
        {"turns": "not json"},
    ]
    with pytest.raises(DatasetError) as raised:
        load_dataset(dataset(tmp_path, *bad))
    path = tmp_path / "data.jsonl"
    assert raised.value.problems == [
        f"{path}:1: an item holds one turn (input, output) or a conversation (turns), not both: 'input' belongs in "
        "its turns",
        f"{path}:2: 'turns' must be a non-empty list of {{input, output, tool_calls}}",
        f"{path}:3: turns[0] (turn 1): unknown field 'ouput' (did you mean 'output'?)",
        f"{path}:4: turns[0] (turn 1).tool_calls[0]: unknown field 'tool' (allowed: name, arguments, result)",
        f"{path}:5: turns[0] (turn 1): 'input' (the user's message) must be a non-empty string",
        f"{path}:6: 'turns' is not valid JSON (a list of {{input, output, tool_calls}})",
    ]


def test_a_csv_dataset_holds_conversations_in_a_turns_column(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    turns = json.dumps(CONVERSATION["turns"]).replace('"', '""')
    path.write_text(f'id,system,turns\nlost-order,You are a support agent.,"{turns}"\n')
    [item] = load_dataset(path)
    [from_jsonl] = load_dataset(dataset(tmp_path, CONVERSATION))
    assert item.turns == from_jsonl.turns and item.request().subject == from_jsonl.request().subject


# -- scoring ------------------------------------------------------------------------------------------------------

CONFIG = """\
judges:
  default: {{model: openai/gpt-4o-mini, api_base: "{url}", api_key: sk-test, max_retries: 0}}
scorers:
  - id: frustration
    kind: user-frustration
    judge: default
    targets: {{scope: session}}
  - id: length
    kind: completeness
"""


async def test_session_scorers_score_the_conversations_and_the_others_the_single_turns(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    judge_server.script(
        Reply.json(
            {
                "turns": [
                    {"turn": 1, "frustrated": False, "evidence": ""},
                    {"turn": 2, "frustrated": True, "evidence": "Refund it."},
                    {"turn": 3, "frustrated": False, "evidence": ""},
                ],
                "endedSatisfied": True,
            }
        )
    )
    settings = load_eval_settings(CONFIG.format(url=judge_server.url))
    items = load_dataset(dataset(tmp_path, CONVERSATION, SINGLE))
    report = await run_eval(settings, items)
    by_scorer = {(r.scorer_id, r.item.id): r for r in report.results}
    assert set(by_scorer) == {("frustration", "lost-order"), ("length", "one-turn")}
    scored = by_scorer["frustration", "lost-order"]
    assert (scored.outcome, scored.score, scored.record["label"]) == ("scored", 0.5, "resolved")
    assert scored.record["reason"] == (
        'The user became frustrated in turn 2 ("Refund it.") and ended the conversation satisfied (turn 3): resolved.'
    )
    session = items[0].request()
    assert (scored.record["traceId"], scored.record["spanId"]) == (session.target.trace_id, session.target.span_id)
    assert "Turn 3 of 3" in judge_server.requests[0].user_prompt  # one call: the whole conversation
    assert report.tallies["frustration"].scored == 1 and report.tallies["length"].scored == 1


async def test_a_scorer_with_no_item_of_its_scope_is_reported_and_a_gate_on_it_is_an_error(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    judge_server.script(
        Reply.json({"turns": [{"turn": i, "frustrated": False} for i in (1, 2, 3)], "endedSatisfied": True})
    )
    settings = load_eval_settings(CONFIG.format(url=judge_server.url))
    conversations = load_dataset(dataset(tmp_path, CONVERSATION))
    report = await run_eval(settings, conversations)
    assert set(report.tallies) == {"frustration"}
    assert report.skipped == [
        "length not run: it scores one turn (scope span) and every item of the dataset is a conversation (turns): "
        "score conversations with scope session scorers"
    ]
    with pytest.raises(EvalError, match="threshold for length, which scores one turn"):
        await run_eval(settings, conversations, thresholds={"length": _min(0.5)})
    singles = load_dataset(dataset(tmp_path, SINGLE, name="singles.jsonl"))
    with pytest.raises(EvalError, match="threshold for frustration, which scores conversations"):
        await run_eval(settings, singles, thresholds={"frustration": _min(0.5)})


def _min(value: float) -> Any:
    from sidecar.eval import parse_threshold

    return parse_threshold(f"x={value}")[1]


def test_the_example_gates_a_conversation_judge_in_ci(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = sum(1 for line in EXAMPLE_DATASET.read_text().splitlines() if line.strip())
    output = tmp_path / "results.jsonl"
    base = ["eval", str(EXAMPLE_DATASET), "--config", str(EXAMPLE), "--stand-in-judge", "--no-progress"]
    code = main([*base, "--thresholds", str(EXAMPLE_THRESHOLDS), "--output", str(output)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    rows = {row[0]: row for row in (line.split() for line in captured.out.splitlines()) if row and "labels:" not in row}
    for scorer in ("completeness", "frustration", "retention", "in-role", "escalation"):
        assert rows[scorer][2:5] == [str(items), "0", "0"], rows[scorer]  # every conversation scored, none failed
    assert "frustration labels: none 3, resolved 1, unresolved 1" in captured.out
    records = [json.loads(line) for line in output.read_text().splitlines()]
    frustration = {r["metadata"]["evalItemId"]: r for r in records if r["scorerId"] == "frustration"}
    # The stand-in judge reads frustration where the user shows it, and the score says so (lower is better).
    assert frustration["refund-never-done"]["score"] > frustration["lost-order-recovered"]["score"]
    assert frustration["lost-order-recovered"]["score"] > frustration["calm-password-reset"]["score"]
    assert "turn 3" in frustration["refund-never-done"]["reason"]
    # A gate that fails exits 1; a gate on a scorer the dataset has nothing for exits 2.
    assert main([*base, "--threshold", "frustration=:0.1"]) == 1
    assert "THRESHOLD BREACHED: frustration" in capsys.readouterr().out
    assert main(["eval", str(ROOT / "examples" / "eval-dataset.jsonl"), "--config", str(EXAMPLE), "--stand-in-judge",
                 "--no-progress", "--threshold", "frustration=0.5"]) == 2  # fmt: skip
    assert "threshold for frustration, which scores conversations" in capsys.readouterr().err
