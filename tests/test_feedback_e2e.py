"""Human feedback through the real broker and ``scoring-sidecar run`` as a subprocess (docs/feedback.md): traces
scored by two judges written in YAML (a boolean verdict, a 0–10 rating) through the scripted judge, then feedback
for a subset with a known agreement pattern: some sent after the score, some before it exists (and a SIGKILL
between those and their scores), some for traces that never existed, some unreadable. The pairs topic holds one
record per pair; the counters, and the agreement, kappa and MAE gauges, equal what this test computes itself
(scikit-learn's kappa and MAE) from the same pairs."""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sklearn.metrics import cohen_kappa_score, mean_absolute_error

from sidecar.core.names import DL_REASON
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer
from tests.support.feedback import RATING, VERDICT, create_feedback_topics, feedback_judge, metric, send_feedback
from tests.support.judge import SECRET_KEY
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    produce_traces,
    read_topic,
    sidecar_config,
)

HOLD_S = 25
AGREE_WITHIN = 0.2


async def until(check: Callable[[], Any], what: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)


async def scores_of(bootstrap: str, topic: str, traces: list[GeneratedTrace]) -> dict[tuple[str, str], dict[str, Any]]:
    """(scorer, trace id) → its score record, once both judges scored every trace."""
    wanted = {(scorer, t.trace_id) for t in traces for scorer in ("verdict", "rating")}

    async def found() -> dict[tuple[str, str], dict[str, Any]] | None:
        records = await read_topic(bootstrap, topic, expect=len(wanted), timeout_s=2)
        values = {(v["scorerId"], v["traceId"]): v for v in (json.loads(r.value) for r in records)}
        return values if wanted <= set(values) else None

    return dict(await until(found, "the scores"))


def labelled(trace: GeneratedTrace, scorer: str, value: Any, *, span: bool, author: str) -> dict[str, Any]:
    item = {"traceId": trace.trace_id, "name": scorer, "value": value, "source": "human", "author": author}
    if span:
        item["spanId"] = trace.agent_span_id
    return item


def disagreeing(scorer: str, judged: dict[str, Any]) -> Any:
    if scorer == "verdict":
        return judged["label"] != "pass"
    return 0.0 if judged["score"] >= 0.5 else 1.0


def agreeing(scorer: str, judged: dict[str, Any]) -> Any:
    return judged["label"] == "pass" if scorer == "verdict" else round(min(1.0, judged["score"] + 0.1), 2)


def agrees(scorer: str, judged: dict[str, Any], human: Any) -> bool:
    if scorer == "verdict":
        return (judged["label"] == "pass") == human
    return abs(judged["score"] - human) <= AGREE_WITHIN + 1e-9


async def test_feedback_meets_its_score_in_either_order_across_a_kill_and_the_gauges_equal_the_pairs(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge_server.reset(feedback_judge)
    bootstrap = kafka_bootstrap
    spans, scores = await new_topic("spans", partitions=2), await new_topic("scores", partitions=2)
    dead = await new_topic("dead", partitions=1)
    topics = await create_feedback_topics(bootstrap, unique_name, new_topic, partitions=2)
    group = unique_name("group")
    config = sidecar_config(
        bootstrap=bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=group,
        judge_url=judge_server.url, metrics_port=free_port(), scorers=[VERDICT, RATING],
    )  # fmt: skip
    config["feedback"] = topics.config(hold_s=HOLD_S, window=500, agree_within=AGREE_WITHIN)
    sidecar = SidecarProcess(config, tmp_path / "sidecar", env={"JUDGE_API_KEY": SECRET_KEY})
    sidecar.workdir.mkdir()
    rng = random.Random(37)
    traces = list(TrafficGenerator(seed=37).traces(18))
    early, before, after = traces[:6], traces[6:12], traces[12:]
    ghosts = [f"{i:032x}" for i in range(901, 905)]
    sent: list[dict[str, Any]] = []  # every feedback that must meet its score
    sent_after_restart: list[dict[str, Any]] = []

    sidecar.start()
    try:
        await sidecar.wait_ready(60)
        # 1. Scores first, then their feedback: a known pattern (every fourth disagrees), by span id.
        await produce_traces(bootstrap, spans, early)
        judged = await scores_of(bootstrap, scores, early)
        for i, trace in enumerate(early):
            for scorer in ("verdict", "rating"):
                mine = judged[(scorer, trace.trace_id)]
                value = disagreeing(scorer, mine) if i % 4 == 0 else agreeing(scorer, mine)
                sent.append(labelled(trace, scorer, value, span=True, author=f"early-{i}"))
        await send_feedback(bootstrap, topics.feedback, sent)
        pairs_group = f"{group}-feedback"

        async def early_committed() -> bool:
            return await committed_total(bootstrap, pairs_group, topics.feedback, 2) >= len(sent)

        await until(early_committed, "the early feedback committed (its pairs and state flushed first)")

        # 2. Feedback before its score exists (half without a span id: the trace's run), for traces never to exist,
        # and two records that cannot be used; once all are held, SIGKILL.
        waiting: list[dict[str, Any]] = []
        for i, trace in enumerate(before):
            waiting.append(labelled(trace, "verdict", rng.random() < 0.5, span=i % 2 == 0, author=f"before-{i}"))
            waiting.append(labelled(trace, "rating", round(rng.random(), 2), span=i % 2 == 1, author=f"before-{i}"))
        lost = [{"traceId": ghost, "name": "verdict", "value": True, "author": "ghost"} for ghost in ghosts]
        unreadable = [b"not json", json.dumps({"traceId": ghosts[0], "name": "no-such-scorer", "value": 1}).encode()]
        await send_feedback(bootstrap, topics.feedback, [*waiting, *lost, *unreadable])

        async def all_held() -> bool:
            held = metric(await sidecar.metrics_text(), "scoring_sidecar_feedback_held", kind="feedback")
            return held == len(waiting) + len(lost)

        await until(all_held, "the feedback held")
        sidecar.kill()

        # 3. Restarted: the held feedback is restored, the traces arrive and are scored, then feedback for the last
        # traces after their scores.
        sidecar.start()
        await sidecar.wait_ready(60)
        await produce_traces(bootstrap, spans, before + after)
        judged = await scores_of(bootstrap, scores, traces)
        sent.extend(waiting)
        sent_after_restart.extend(waiting)
        late: list[dict[str, Any]] = []
        for i, trace in enumerate(after):
            for scorer in ("verdict", "rating"):
                mine = judged[(scorer, trace.trace_id)]
                value = disagreeing(scorer, mine) if i % 4 == 1 else agreeing(scorer, mine)
                late.append(labelled(trace, scorer, value, span=True, author=f"after-{i}"))
        await send_feedback(bootstrap, topics.feedback, late)
        sent.extend(late)
        sent_after_restart.extend(late)

        # What this test expects, from the same pairs.
        def pairs_of(items: list[dict[str, Any]], scorer: str) -> list[tuple[dict[str, Any], Any]]:
            return [(judged[(scorer, item["traceId"])], item["value"]) for item in items if item["name"] == scorer]

        async def settled() -> str | None:
            text = await sidecar.metrics_text()
            ready = all(
                metric(text, "scoring_sidecar_judge_human_pairs", scorer=scorer) == len(pairs_of(sent, scorer))
                for scorer in ("verdict", "rating")
            )
            unmatched = metric(text, "scoring_sidecar_feedback_unmatched_total", scorer="verdict")
            return text if ready and unmatched == len(ghosts) else None

        text = await until(settled, "every pair in the gauges and the ghosts expired", timeout_s=HOLD_S + 40)
        for scorer in ("verdict", "rating"):
            everything = pairs_of(sent, scorer)
            agreed = [agrees(scorer, j, h) for j, h in everything]
            assert metric(text, "scoring_sidecar_judge_human_agreement", scorer=scorer) == sum(agreed) / len(agreed)
            kappa = metric(text, "scoring_sidecar_judge_human_kappa", scorer=scorer)
            mae = metric(text, "scoring_sidecar_judge_human_mae", scorer=scorer)
            assert kappa is not None and mae is not None
            if scorer == "verdict":
                expected = cohen_kappa_score([j["label"] == "pass" for j, _ in everything], [h for _, h in everything])
                assert abs(kappa - expected) < 1e-9 and math.isnan(mae)
            else:
                expected = mean_absolute_error([j["score"] for j, _ in everything], [h for _, h in everything])
                assert abs(mae - expected) < 1e-9 and math.isnan(kappa)
            # The counters are this process's: the pairs made since the restart.
            since = [agrees(scorer, j, h) for j, h in pairs_of(sent_after_restart, scorer)]
            for outcome in (True, False):
                counted = metric(
                    text, "scoring_sidecar_feedback_pairs_total", scorer=scorer, agreed=str(outcome).lower()
                )
                assert counted == since.count(outcome), (scorer, outcome)
        assert agreed.count(False) >= 3 and agreed.count(True) >= 3  # the pattern shows in both directions

        # One pair record per pair, each naming the score, the judge and the person.
        records = await read_topic(bootstrap, topics.pairs, expect=len(sent), timeout_s=10)
        values = [json.loads(r.value) for r in records]
        assert len(values) == len({v["pairId"] for v in values}) == len(sent)
        by_author = {(v["author"], v["scorerId"]): v for v in values}
        for item in sent:
            pair = by_author[(item["author"], item["name"])]
            score = judged[(item["name"], item["traceId"])]
            assert (pair["scoreId"], pair["traceId"], pair["humanValue"]) == (
                score["scoreId"],
                item["traceId"],
                item["value"],
            )
            assert pair["agreed"] == agrees(item["name"], score, item["value"])
            assert pair["judgeModel"] == "openai/gpt-4o-mini" and pair["scorerVersion"].startswith("llm-judge:")
        # The unreadable records are dead letters, with their reason.
        letters = await read_topic(bootstrap, dead, expect=2, timeout_s=5)
        reasons = [dict(r.headers).get(DL_REASON) for r in letters]
        assert reasons == [b"invalid_feedback", b"invalid_feedback"]
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    log = sidecar.log_path.read_text()
    assert "feedback: lanes" in log and "restored" in log
    assert SECRET_KEY not in log


async def test_feedback_waiting_on_a_lane_moves_with_it_when_a_second_process_joins(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """Feedback held by one process for scores to come; a second process joins the group and takes a lane over (the
    range assignor gives it partition p of both topics): it restores what waits there from the state topic, and
    every feedback ends in one pair, on whichever process owns its lane."""
    judge_server.reset(feedback_judge)
    bootstrap = kafka_bootstrap
    spans, scores = await new_topic("spans", partitions=2), await new_topic("scores", partitions=2)
    dead = await new_topic("dead", partitions=1)
    topics = await create_feedback_topics(bootstrap, unique_name, new_topic, partitions=2)
    group = unique_name("group")

    def process(name: str) -> SidecarProcess:
        config = sidecar_config(
            bootstrap=bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=group,
            judge_url=judge_server.url, metrics_port=free_port(), scorers=[VERDICT],
        )  # fmt: skip
        config["feedback"] = topics.config(hold_s=120)
        sidecar = SidecarProcess(config, tmp_path / name, env={"JUDGE_API_KEY": SECRET_KEY})
        sidecar.workdir.mkdir()
        return sidecar

    traces = list(TrafficGenerator(seed=53).traces(12))
    labels = [labelled(t, "verdict", i % 3 != 0, span=True, author=f"a-{i}") for i, t in enumerate(traces)]
    first, second = process("first"), process("second")
    first.start()
    try:
        await first.wait_ready(60)
        await send_feedback(bootstrap, topics.feedback, labels)

        async def held(sidecars: list[SidecarProcess]) -> bool:
            counts = [
                metric(await s.metrics_text(), "scoring_sidecar_feedback_held", kind="feedback") for s in sidecars
            ]
            return sum(c or 0 for c in counts) == len(labels) and all(c for c in counts)

        await until(lambda: held([first]), "the feedback held by the first process")
        second.start()
        await second.wait_ready(60)
        # Both own a lane now, and between them still hold every feedback: the moved lane was restored.
        await until(lambda: held([first, second]), "the feedback held across both processes")
        await produce_traces(bootstrap, spans, traces)
        records = await read_topic(bootstrap, topics.pairs, expect=len(labels), timeout_s=60)
        values = [json.loads(r.value) for r in records]
        assert sorted(v["author"] for v in values) == sorted(label["author"] for label in labels)
        assert len({v["pairId"] for v in values}) == len(values) == len(labels)
        assert first.terminate() == 0 and second.terminate() == 0
    finally:
        first.kill()
        second.kill()
    assert "feedback: lanes" in second.log_path.read_text()
