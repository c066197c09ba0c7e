"""The judge canary (``sidecar.runtime.canary``): its dataset read and checked with the configuration, a round through
the real judge client and the scripted judge (the judge's gate in the way, failures counted, runs kept out of the
run events), its baseline; one canary per replica with workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar.app.assembly import assemble
from sidecar.app.worker_share import settings_for_worker
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.canary import CanaryPlan, DatasetProblem, JudgeCanary, load_canary_items
from sidecar.scoring.agreement import AgreementStats
from sidecar.settings import SettingsError, load_eval_settings, load_settings
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.feedback import VERDICT
from tests.support.judge import SECRET_KEY


class Heard(ServiceObserver):
    def __init__(self) -> None:
        self.rounds: list[tuple[str, AgreementStats, float | None, int, float | None]] = []
        self.runs: list[ScoredRun] = []

    def canary_finished(
        self, scorer: str, stats: AgreementStats, mean_score: float | None, failed: int, baseline: float | None
    ) -> None:
        self.rounds.append((scorer, stats, mean_score, failed, baseline))

    def run_finished(self, run: ScoredRun) -> None:
        self.runs.append(run)


def dataset(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


ITEMS = [{"id": f"i{i}", "input": f"question {i} [{'yes' if i % 2 else 'no'}]", "output": "ok", "expected": i % 2 == 1}
         for i in range(6)]  # fmt: skip


def config(canary: dict[str, Any], judge_url: str = "http://127.0.0.1:1/v1", **scorer: Any) -> str:
    judge = {"model": "openai/gpt-4o-mini", "api_base": judge_url, "api_key": SECRET_KEY, "max_retries": 0}
    kafka = {"bootstrap_servers": "127.0.0.1:1", "topics": ["spans"]}
    return json.dumps(
        {"kafka": kafka, "judges": {"default": judge}, "scorers": [{**VERDICT, "canary": canary, **scorer}]}
    )


def test_a_canary_dataset_is_read_with_every_bad_line_named(tmp_path: Path) -> None:
    items = load_canary_items(dataset(tmp_path / "ok.jsonl", ITEMS))
    assert [item.expected for item in items] == [False, True, False, True, False, True]
    assert items[0].request.target.span_name == "canary i0" and items[0].request.input.input_messages
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ITEMS[0]) + "\nnot json\n" + json.dumps({"input": "x", "output": "y"}) + "\n")
    with pytest.raises(DatasetProblem, match=r"line 2: not JSON.*line 3: expected: Field required"):
        load_canary_items(bad)
    with pytest.raises(DatasetProblem, match="no items"):
        load_canary_items(dataset(tmp_path / "empty.jsonl", []))
    with pytest.raises(DatasetProblem, match="Extra inputs"):
        load_canary_items(dataset(tmp_path / "typo.jsonl", [{**ITEMS[0], "expectd": True}]))


def test_the_configuration_checks_the_canary(tmp_path: Path) -> None:
    path = dataset(tmp_path / "canary.jsonl", ITEMS)
    settings = load_settings(config({"dataset": str(path), "every_s": 60}))
    canary = settings.scorers[0].canary
    assert canary is not None and (canary.min_agreement, canary.max_drift, canary.baseline) == (0.8, 0.1, None)
    with pytest.raises(SettingsError, match=r"scorers\[0\]\.canary\.dataset.*line 1"):
        load_settings(config({"dataset": str(dataset(tmp_path / "bad.jsonl", [{"input": "x"}]))}))
    with pytest.raises(SettingsError, match=r"canary\.dataset"):
        load_settings(config({"dataset": str(tmp_path / "missing.jsonl")}))
    with pytest.raises(SettingsError, match="a conversation scorer has no canary"):
        load_settings(config({"dataset": str(path)}, targets={"scope": "session"}))


def test_the_canary_runs_in_the_first_worker_of_each_replica_only(tmp_path: Path) -> None:
    settings = load_settings(config({"dataset": str(dataset(tmp_path / "canary.jsonl", ITEMS))}))
    assert settings_for_worker(settings, 0, 3).scorers[0].canary is not None
    assert settings_for_worker(settings, 1, 3).scorers[0].canary is None
    # The scorer itself is the same: its score ids do not depend on where the canary runs.
    assert settings_for_worker(settings, 1, 3).scorers[0].options == settings.scorers[0].options


async def test_a_round_goes_through_the_live_judge_and_counts_what_it_could_not_score(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    calls: list[str] = []

    def judge(body: dict[str, Any]) -> Reply:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        calls.append(prompt)
        if "question 4" in prompt:
            return Reply.error(400, "bad request")  # a failure: the item has no score
        passed = "[yes]" in prompt
        if "question 5" in prompt:
            passed = False  # the judge disagrees with this one label
        return Reply.json({"reason": "as it reads", "passed": passed})

    judge_server.reset(judge)
    settings = load_eval_settings(config({"dataset": str(dataset(tmp_path / "c.jsonl", ITEMS))}, judge_server.url))
    heard = Heard()
    assembly = assemble(settings, observers=[heard], max_hold_s=5)
    try:
        [configured] = assembly.scorers
        items = tuple(load_canary_items(tmp_path / "c.jsonl"))
        canary = JudgeCanary([CanaryPlan(configured, items, 60, 0.2)], assembly.observer, timeout_s=10)
        await canary.round(canary.plans[0])
        await canary.round(CanaryPlan(configured, items, 60, 0.2, baseline=0.5))
    finally:
        await assembly.aclose()
    assert len(calls) >= 12
    (scorer, stats, mean, failed, baseline), (_, _, _, _, pinned) = heard.rounds
    assert scorer == "verdict" and failed == 1 and stats.pairs == 5
    assert stats.agreed == 4 and stats.share == 0.8 and baseline == 0.8 and pinned == 0.5
    assert mean == pytest.approx(2 / 5)  # items 1 and 3 passed of the five scored
    assert stats.kappa is not None
    assert heard.runs == []  # canary runs are in no run event: kept out of the score and run metrics
