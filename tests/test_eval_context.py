"""``eval`` datasets carry retrieved context: the ``context`` field, validated and delivered as
``request_context["context"]``; the eval-only RAG kinds read the item's ground truth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar.eval import EvalError, load_dataset, run_eval
from sidecar.settings import EvalSettings
from sidecar.testing.judge_server import JudgeServer, RecordedRequest, Reply


def write_jsonl(path: Path, *items: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def test_jsonl_and_csv_context(tmp_path: Path) -> None:
    jsonl = write_jsonl(
        tmp_path / "items.jsonl",
        {"input": "q", "output": "a", "context": ["doc one", "doc two"], "request_context": {"tenant": "acme"}},
        {"input": "q", "output": "a", "context": []},
        {"input": "q", "output": "a"},
    )
    with_context, empty, without = load_dataset(jsonl)
    assert with_context.context == ("doc one", "doc two")
    assert with_context.run_request_context() == {"tenant": "acme", "context": ["doc one", "doc two"]}
    assert with_context.request_context == {"tenant": "acme"}  # the item's own field is left as it was
    assert empty.run_request_context() == {"context": []}  # "retrieval found nothing" is kept, not dropped
    assert without.context is None and without.run_request_context() is None

    csv_file = tmp_path / "items.csv"
    csv_file.write_text('input,output,context,ground_truth\n"q","a","[""doc one"", ""doc, two""]","truth"\n"q","a",,\n')
    first, second = load_dataset(csv_file)
    assert first.context == ("doc one", "doc, two") and first.ground_truth == "truth"
    assert second.context is None


def test_items_without_context_keep_their_score_ids(tmp_path: Path) -> None:
    """Adding the field must not change the ids of existing datasets' scores."""
    item = load_dataset(write_jsonl(tmp_path / "a.jsonl", {"input": "q", "output": "a", "ground_truth": "g"}))[0]
    old_canonical = json.dumps(
        {"input": "q", "output": "a", "ground_truth": "g", "request_context": None, "system": None},
        sort_keys=True,
        ensure_ascii=False,
    )
    assert item.canonical() == old_canonical
    with_context = load_dataset(write_jsonl(tmp_path / "b.jsonl", {"input": "q", "output": "a", "context": ["d"]}))
    assert with_context[0].target().span_id != item.target().span_id


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not json", "'context' is not valid JSON"),
        ({"doc": "x"}, "'context' must be a list of strings"),
        (["doc", 3], "'context' must be a list of strings"),
        ('{"doc": "x"}', "'context' must be a list of strings"),
    ],
)
def test_invalid_context_names_the_line(tmp_path: Path, value: Any, message: str) -> None:
    path = write_jsonl(
        tmp_path / "bad.jsonl", {"input": "q", "output": "a"}, {"input": "q", "output": "a", "context": value}
    )
    with pytest.raises(EvalError, match=f"{path}:2: {message}"):
        load_dataset(path)


def test_context_given_twice_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "twice.jsonl", {"input": "q", "output": "a", "context": ["a"], "request_context": {"context": ["b"]}}
    )
    with pytest.raises(EvalError, match="'context' is given twice"):
        load_dataset(path)
    # request_context.context alone is fine: it is where the field would have gone.
    alone = write_jsonl(tmp_path / "alone.jsonl", {"input": "q", "output": "a", "request_context": {"context": ["b"]}})
    assert load_dataset(alone)[0].run_request_context() == {"context": ["b"]}


def test_unknown_field_suggests_context(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "typo.jsonl", {"input": "q", "output": "a", "contxt": ["a"]})
    with pytest.raises(EvalError, match=r"unknown field 'contxt' \(did you mean 'context'\?\)"):
        load_dataset(path)


async def test_eval_runs_the_rag_kinds_with_the_items_context_and_ground_truth(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        prompt = RecordedRequest(body=body, headers={}).user_prompt
        if prompt.startswith("Break the"):
            return Reply.json({"claims": ["Canberra is the capital of Australia"]})
        if '"verdicts"' in prompt and "statement" in prompt:
            return Reply.json({"verdicts": [{"statement": "s", "verdict": "no", "reason": "supported"}]})
        if '"verdicts"' in prompt:
            return Reply.json({"verdicts": [{"verdict": "yes", "reason": "in the context"}]})
        return Reply(content="The score is fine because the scripted judge says so.")

    judge_server.reset(respond)
    dataset = write_jsonl(
        tmp_path / "rag.jsonl",
        {
            "id": "capital",
            "input": "What is the capital of Australia?",
            "output": "Canberra is the capital of Australia.",
            "context": ["Canberra is the capital city of Australia."],
            "ground_truth": "Canberra is the capital of Australia.",
        },
        {"id": "no-context", "input": "What is the capital of Australia?", "output": "Canberra."},
    )
    settings = EvalSettings.model_validate(
        {
            "judges": {"j": {"model": "openai/gpt-4o-mini", "api_base": judge_server.url, "api_key": "sk-test"}},
            "scorers": [
                {"id": "faithfulness", "kind": "faithfulness", "judge": "j"},
                {"id": "hallucination", "kind": "hallucination", "judge": "j"},
                {"id": "recall", "kind": "context-recall", "judge": "j"},
            ],
        }
    )
    report = await run_eval(settings, load_dataset(dataset))
    outcomes = {(r.item.id, r.scorer_id): (r.outcome, r.score) for r in report.results}
    assert outcomes == {
        ("capital", "faithfulness"): ("scored", 1.0),
        ("capital", "hallucination"): ("scored", 0.0),
        ("capital", "recall"): ("scored", 1.0),
        ("no-context", "faithfulness"): ("not_scorable", None),
        ("no-context", "hallucination"): ("not_scorable", None),
        ("no-context", "recall"): ("not_scorable", None),
    }
    prompts = [r.user_prompt for r in judge_server.requests]
    assert sum("Canberra is the capital city of Australia." in p for p in prompts) >= 3  # each kind's analyze
    assert any("<untrusted_reference_answer>\nCanberra is the capital of Australia." in p for p in prompts)
    assert report.tallies["recall"].not_scorable == 1
