"""The corrections round trip (docs/feedback.md), through the broker and ``scoring-sidecar run`` as a subprocess: a
judge written in YAML scores traces, people disagree with some of its labels, ``scoring-sidecar corrections`` writes
those disagreements as JSONL (input and output as the judge read them, the person's label, their comment), the file
goes back as the judge's ``examples_file``, the next service renders it in every prompt (read back from the scripted
judge's log), and the score ids change once: the same file gives the same ids in any process."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.app.scorer_factory import build_scorers
from sidecar.cli import main
from sidecar.core.scored import score_id_of
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.settings import load_settings
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import quoted
from tests.support.feedback import create_feedback_topics, send_feedback
from tests.support.judge import SECRET_KEY
from tests.support.sidecar_process import SidecarProcess, free_port, produce_traces, read_topic, sidecar_config

POLICY = {
    "id": "policy",
    "kind": "llm-judge",
    "judge": "default",
    "options": {
        "instructions": "POLICY: check the answer against the support policy.",
        "prompt": "The user asked: {{ input }}\nThe agent answered: {{ output }}",
        "output": {"type": "categories", "labels": {"compliant": 1, "violation": 0}},
    },
}


def policy_judge(body: dict[str, Any]) -> Reply:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    run = prompt.split("The run to judge:\n\n")[-1]  # the examples, when there are some, come first
    label = "violation" if int(hashlib.sha256(run.encode()).hexdigest(), 16) % 2 else "compliant"
    return Reply.json({"reason": f"looks {label}", "label": label})


async def scores_by_trace(bootstrap: str, topic: str, n: int, fingerprint: str | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        records = [json.loads(r.value) for r in await read_topic(bootstrap, topic, expect=n, timeout_s=2)]
        found = {
            r["traceId"]: r for r in records if fingerprint is None or r["metadata"]["scorerFingerprint"] == fingerprint
        }
        if len(found) >= n:
            return found
        assert time.monotonic() < deadline, f"{len(found)} of {n} scores"
        await asyncio.sleep(0.3)


async def test_disagreements_become_examples_rendered_in_the_prompt_and_the_score_ids_change_once(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUDGE_API_KEY", SECRET_KEY)  # the commands read the configuration as the service does
    judge_server.reset(policy_judge)
    bootstrap = kafka_bootstrap
    spans, scores, dead = await new_topic("spans"), await new_topic("scores"), await new_topic("dead")
    topics = await create_feedback_topics(bootstrap, unique_name, new_topic, partitions=1)
    config = sidecar_config(
        bootstrap=bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=unique_name("group"),
        judge_url=judge_server.url, metrics_port=free_port(), scorers=[POLICY],
    )  # fmt: skip
    config["feedback"] = topics.config()
    traces = list(TrafficGenerator(seed=41).traces(8))
    await produce_traces(bootstrap, spans, traces)

    # 1. Scored; people label every trace, disagreeing with the judge on three of them.
    first = SidecarProcess(config, tmp_path / "first", env={"JUDGE_API_KEY": SECRET_KEY})
    first.workdir.mkdir()
    first.start()
    try:
        await first.wait_ready(60)
        judged = await scores_by_trace(bootstrap, scores, len(traces))
        labels: list[dict[str, Any]] = []
        for i, trace in enumerate(traces):
            said = judged[trace.trace_id]["label"]
            other = "compliant" if said == "violation" else "violation"
            label = {"traceId": trace.trace_id, "spanId": trace.agent_span_id, "name": "policy", "author": "ana"}
            if i in (1, 4, 6):
                labels.append({**label, "value": other, "comment": f"should be {other}: trace {i}"})
            else:
                labels.append({**label, "value": said})
        await send_feedback(bootstrap, topics.feedback, labels)
        pairs = await read_topic(bootstrap, topics.pairs, expect=len(labels), timeout_s=30)
        assert len(pairs) == len(labels)
        assert first.terminate() == 0
    finally:
        first.kill()

    # 2. The disagreements, written as the judge's examples file.
    config_path = tmp_path / "sidecar.yaml"
    config_path.write_text(yaml.safe_dump(config))
    corrections = tmp_path / "policy.corrections.jsonl"
    args = ["corrections", "--config", str(config_path), "--scorer", "policy", "--from", "-1h", "-o", str(corrections)]
    assert await asyncio.to_thread(main, args) == 0
    rows = [json.loads(line) for line in corrections.read_text().splitlines()]
    wanted = {traces[i].trace_id: labels[i] for i in (1, 4, 6)}
    assert sorted(row["traceId"] for row in rows) == sorted(wanted)
    for row in rows:
        label, score = wanted[row["traceId"]], judged[row["traceId"]]
        assert (row["expected"], row["reason"], row["judged"]) == (label["value"], label["comment"], score["label"])
        # The run's input and output, as the judge's template read them when it scored.
        assert row["input"] == quoted(score["analyzePrompt"], "input")
        assert row["output"] == quoted(score["analyzePrompt"], "output")
        assert row["scoreId"] == score["scoreId"]

    # 3. The reviewed file goes back; a new service (its own group: it scores the topic again) renders it.
    reviewed = json.loads(json.dumps(config))
    reviewed["scorers"][0]["options"]["examples_file"] = str(corrections)
    reviewed["kafka"]["group_id"] = unique_name("group")
    reviewed["exporters"]["prometheus"]["port"] = free_port()
    judge_server.requests.clear()
    second = SidecarProcess(reviewed, tmp_path / "second", env={"JUDGE_API_KEY": SECRET_KEY})
    second.workdir.mkdir()
    reviewed_path = tmp_path / "reviewed.yaml"
    reviewed_path.write_text(yaml.safe_dump(reviewed))
    fingerprint = build_scorers(load_settings(reviewed_path))["policy"].fingerprint
    second.start()
    try:
        await second.wait_ready(60)
        rescored = await scores_by_trace(bootstrap, scores, len(traces), fingerprint)
        assert second.terminate() == 0
    finally:
        second.kill()
    prompts = [request.user_prompt for request in judge_server.requests]
    assert len(prompts) >= len(traces)
    for prompt in prompts:
        section, _ = prompt.split("The run to judge:\n\n")
        for number, row in enumerate(rows, start=1):
            example = section.split(f"Example {number}:\n")[1]
            assert quoted(example, "example_input") == row["input"]
            assert quoted(example, "example_output") == row["output"]
            assert json.loads(quoted(example, "example_verdict")) == {"reason": row["reason"], "label": row["expected"]}

    # Score ids changed once: every subject has a new id, and the ids are those any process makes from the file.
    before = {trace: record["scoreId"] for trace, record in judged.items()}
    after = {trace: record["scoreId"] for trace, record in rescored.items()}
    assert set(before) == set(after) and not set(before.values()) & set(after.values())
    for trace in traces:
        assert after[trace.trace_id] == score_id_of(fingerprint, f"{trace.trace_id}:{trace.agent_span_id}")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"scorer": "nope"}, "no scorer 'nope'"),
        ({"scorer": "similarity"}, "kind llm-judge"),
        ({"feedback": None}, "the configuration has none"),
        ({"from": "2026-01-01T00:00:00"}, "has no zone"),
    ],
)
def test_corrections_refuses_what_it_cannot_use_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], problem: str
) -> None:
    config = sidecar_config(
        bootstrap="127.0.0.1:1", spans_topic="spans", scores_topic="scores", dead_topic="dead", group="g",
        judge_url="http://127.0.0.1:1/v1", metrics_port=0,
        scorers=[POLICY, {"id": "similarity", "kind": "content-similarity"}],
    )  # fmt: skip
    config["judges"]["default"]["api_key"] = "sk-unused"
    config["feedback"] = {"topic": "feedback"}
    if "feedback" in change:
        del config["feedback"]
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    scorer = change.get("scorer", "policy")
    args = ["corrections", "--config", str(path), "--scorer", scorer, "--from", change.get("from", "-1d")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1
