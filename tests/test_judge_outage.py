"""A judge outage loses nothing: ``scoring-sidecar run`` as a subprocess, a real broker, a judge that goes down.

Held runs keep their records uncommitted, nothing is shed, the work drains as soon as the judge is back, a
kill -9 during the hold loses nothing, and the judge metrics equal what the judge itself handed out.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from tests.support.faulty_judge import FaultyJudge
from tests.support.judge import SECRET_KEY
from tests.support.sidecar_process import SidecarProcess, free_port, read_topic, sidecar_config
from tests.test_service_e2e import sample

PARTITIONS = 3
SCORERS = ("prompt-alignment", "similarity")
Position = tuple[int, int]  # (partition, offset)


async def produce(bootstrap: str, topic: str, traces: Iterable[GeneratedTrace]) -> dict[str, Position]:
    """Write the traces; return where each landed (trace id → partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [(t.trace_id, await producer.send(topic, t.request.SerializeToString(), key=t.key)) for t in traces]
        return {trace_id: ((m := await f).partition, m.offset) for trace_id, f in sent}
    finally:
        await producer.stop()


async def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) or 0 for p in range(PARTITIONS)}
    finally:
        await consumer.stop()


async def scored(bootstrap: str, topic: str, *, expect: int = 0, timeout_s: float = 3) -> dict[str, dict[str, Any]]:
    """Score records by score id, once ``expect`` distinct ids arrived or the time is up (a redelivered
    score has the same id, so the topic may hold more records than ids)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = await read_topic(bootstrap, topic, expect=expect, timeout_s=max(0.5, deadline - time.monotonic()))
        values = {v["scoreId"]: v for v in (json.loads(r.value) for r in records)}
        if len(values) >= expect or time.monotonic() >= deadline:
            return values
        await asyncio.sleep(0.5)


async def check_nothing_committed_past_unscored(
    bootstrap: str, group: str, topics: tuple[str, str], positions: dict[str, Position]
) -> int:
    """Every record below a committed offset has both its scores exported; returns how many are committed."""
    spans, scores = topics
    offsets = await committed(bootstrap, group, spans)
    done: dict[str, set[str]] = {}
    for value in (await scored(bootstrap, scores)).values():
        done.setdefault(value["traceId"], set()).add(value["scorerId"])
    for trace_id, (partition, offset) in positions.items():
        if offset < offsets[partition]:
            assert done.get(trace_id) == set(SCORERS), f"{trace_id} at {partition}@{offset} committed unscored"
    return sum(offsets.values())


async def readyz(sidecar: SidecarProcess) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(sidecar.metrics_url + "/readyz") as response:
        return response.status, await response.text()


async def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)


def outage_sidecar(
    tmp_path: Path, bootstrap: str, topics: tuple[str, str, str], group: str, judge: FaultyJudge
) -> SidecarProcess:
    spans, scores, dead = topics
    config = sidecar_config(
        bootstrap=bootstrap,
        spans_topic=spans,
        scores_topic=scores,
        dead_topic=dead,
        group=group,
        judge_url=judge.url,
        metrics_port=free_port(),
        judge={
            "timeout_s": 3,
            "max_retries": 2,
            "max_concurrency": 16,
            "circuit_breaker": {"failure_threshold": 5, "reset_after_s": 2},
        },
        runtime={"max_in_flight_runs": 64, "run_timeout_s": 20},
    )
    return SidecarProcess(config, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})


@pytest.mark.slow
async def test_a_judge_outage_then_a_503_storm_loses_nothing_and_recovers_at_once(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
) -> None:
    judge = FaultyJudge()
    await judge.up()
    topics = (
        await new_topic("spans", partitions=PARTITIONS),
        await new_topic("scores", partitions=1),
        await new_topic("dead", partitions=1),
    )
    spans, scores, _ = topics
    group = unique_name("group")
    generator = TrafficGenerator(seed=21)
    positions = await produce(kafka_bootstrap, spans, generator.traces(40))
    sidecar = outage_sidecar(tmp_path, kafka_bootstrap, topics, group, judge)
    sidecar.start()
    try:
        await sidecar.wait_ready()
        await scored(kafka_bootstrap, scores, expect=20, timeout_s=30)

        # 60 s of refused connections, with traffic arriving meanwhile.
        await judge.down()
        positions |= await produce(kafka_bootstrap, spans, generator.traces(40))
        deadline = time.monotonic() + 60
        await asyncio.sleep(10)
        text = await sidecar.metrics_text()
        assert sample(text, "scoring_sidecar_judge_held_runs", {}) > 0
        assert sample(text, "scoring_sidecar_judge_paused", {}) == 1
        assert sample(text, "scoring_sidecar_judge_calls_total", {"outcome": "connection_error"}) >= 5
        assert sample(text, "scoring_sidecar_consumer_lag_records", {}) > 0
        status, reason = await readyz(sidecar)
        assert status == 503 and "runs held" in reason, reason
        committed_during = await check_nothing_committed_past_unscored(
            kafka_bootstrap, group, (spans, scores), positions
        )
        assert committed_during < len(positions)
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))

        # Back, but answering 503 to everything for 10 s.
        judge.mode = "storm"
        await judge.up()
        await asyncio.sleep(10)
        text = await sidecar.metrics_text()
        assert sample(text, "scoring_sidecar_judge_calls_total", {"outcome": "error"}) > 0
        assert sample(text, "scoring_sidecar_judge_held_runs", {}) > 0
        await check_nothing_committed_past_unscored(kafka_bootstrap, group, (spans, scores), positions)

        # Healthy, and 100 new traces at that very moment: everything is scored within seconds.
        judge.mode = "healthy"
        recovered = time.monotonic()
        positions |= await produce(kafka_bootstrap, spans, generator.traces(100))
        expected = len(positions) * len(SCORERS)
        values = await scored(kafka_bootstrap, scores, expect=expected, timeout_s=60)
        drained_s = time.monotonic() - recovered
        await asyncio.sleep(1.0)  # a checkpoint after the last export
        text = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
        await judge.down()

    # Every trace scored by both scorers, exactly once per score id.
    assert len(values) == expected, f"{len(values)} of {expected}"
    assert {(v["traceId"], v["scorerId"]) for v in values.values()} == {(t, s) for t in positions for s in SCORERS}
    assert drained_s < 20, f"the held work and 100 new traces took {drained_s:.1f}s after the judge came back"
    # Nothing shed, nothing failed; the hold was seen and measured.
    assert sample(text, "scoring_sidecar_scorer_runs_total", {"outcome": "shed"}) == 0
    assert sample(text, "scoring_sidecar_scorer_runs_total", {"outcome": "failed"}) == 0
    assert sample(text, "scoring_sidecar_judge_hold_seconds_count", {}) > 0
    assert sample(text, "scoring_sidecar_judge_held_runs", {}) == 0
    judge.assert_billed(text)  # the judge metrics are the judge's bill
    assert sum((await committed(kafka_bootstrap, group, spans)).values()) == len(positions)


@pytest.mark.slow
async def test_kill_9_and_sigterm_while_runs_are_held_lose_nothing(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
) -> None:
    judge = FaultyJudge()  # down from the start
    topics = (
        await new_topic("spans", partitions=PARTITIONS),
        await new_topic("scores", partitions=1),
        await new_topic("dead", partitions=1),
    )
    spans, scores, _ = topics
    group = unique_name("group")
    positions = await produce(kafka_bootstrap, spans, TrafficGenerator(seed=22).traces(60))
    expected = len(positions) * len(SCORERS)
    sidecar = outage_sidecar(tmp_path, kafka_bootstrap, topics, group, judge)

    async def holding() -> bool:
        return sample(await sidecar.metrics_text(), "scoring_sidecar_judge_held_runs", {}) > 0

    async def joined() -> bool:
        try:
            status, reason = await readyz(sidecar)
        except aiohttp.ClientError:
            return False
        return status == 200 or "runs held" in reason  # /readyz is 503 while the judge holds runs

    try:
        sidecar.start()
        await wait_for(joined, 30, "the consumer group")
        await wait_for(holding, 30, "held runs")
        # The code scorer scored while the judge scorer held every record: nothing is committable.
        assert await check_nothing_committed_past_unscored(kafka_bootstrap, group, (spans, scores), positions) == 0
        sidecar.kill()
        sidecar.start()
        await wait_for(joined, 30, "the consumer group after the restart")
        await wait_for(holding, 30, "held runs after the restart")
        # SIGTERM while holding: drains what it can within shutdown_timeout_s (10 s), commits nothing held.
        stopping = time.monotonic()
        assert sidecar.terminate() == 0
        assert time.monotonic() - stopping < 10 + 5
        assert "draining" in sidecar.log_path.read_text()
        assert await check_nothing_committed_past_unscored(kafka_bootstrap, group, (spans, scores), positions) == 0
        sidecar.start()
        await wait_for(joined, 30, "the consumer group after SIGTERM")
        await judge.up()
        values = await scored(kafka_bootstrap, scores, expect=expected, timeout_s=60)
        await asyncio.sleep(1.0)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
        await judge.down()
    assert len(values) == expected
    assert {(v["traceId"], v["scorerId"]) for v in values.values()} == {(t, s) for t in positions for s in SCORERS}
    # Redelivered runs produced the same score ids with the same scores.
    records = [json.loads(r.value) for r in await read_topic(kafka_bootstrap, scores, expect=expected)]
    for record in records:
        assert record["score"] == values[record["scoreId"]]["score"]
    assert sum((await committed(kafka_bootstrap, group, spans)).values()) == len(positions)


@pytest.mark.slow
async def test_a_rebalance_abandons_held_runs_to_the_new_owner(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
) -> None:
    judge = FaultyJudge()  # down: the first sidecar holds every record of its three partitions
    topics = (
        await new_topic("spans", partitions=PARTITIONS),
        await new_topic("scores", partitions=1),
        await new_topic("dead", partitions=1),
    )
    spans, scores, _ = topics
    group = unique_name("group")
    positions = await produce(kafka_bootstrap, spans, TrafficGenerator(seed=23).traces(45))
    expected = len(positions) * len(SCORERS)
    first = outage_sidecar(tmp_path / "a", kafka_bootstrap, topics, group, judge)
    second = outage_sidecar(tmp_path / "b", kafka_bootstrap, topics, group, judge)
    for sidecar in (first, second):
        sidecar.workdir.mkdir()

    async def holding(sidecar: SidecarProcess) -> bool:
        try:
            return sample(await sidecar.metrics_text(), "scoring_sidecar_judge_held_runs", {}) > 0
        except aiohttp.ClientError:
            return False

    try:
        first.start()
        await wait_for(lambda: holding(first), 30, "held runs in the first sidecar")
        second.start()  # the group rebalances: the first loses partitions with held runs
        await wait_for(lambda: holding(second), 60, "held runs in the second sidecar")
        await judge.up()
        values = await scored(kafka_bootstrap, scores, expect=expected, timeout_s=60)
        await asyncio.sleep(1.0)
        assert first.terminate() == 0 and second.terminate() == 0
    finally:
        first.kill()
        second.kill()
        await judge.down()
    assert "left to their new owner" in first.log_path.read_text()
    assert len(values) == expected
    assert {(v["traceId"], v["scorerId"]) for v in values.values()} == {(t, s) for t in positions for s in SCORERS}
    assert sum((await committed(kafka_bootstrap, group, spans)).values()) == len(positions)
