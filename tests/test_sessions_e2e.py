"""``scope: session`` through the real broker: ``scoring-sidecar run`` as subprocesses scores whole conversations
whose turns (one trace each, keyed by trace id) are spread over the traces topic's partitions, through the
compacted internal topic, once per window after ``idle_s``; the same score ids across kills and rebalances."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from sidecar.conventions.session_turns import TurnSummary
from sidecar.core.scored import score_id_of
from sidecar.testing.judge_server import JudgeServer
from tests.support.conversations import Turn, turn_trace
from tests.support.faulty_judge import FaultyJudge
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.session_scorers import TurnCountOptions, create_turn_count_scorer
from tests.support.sessions import (
    create_session_topic,
    read_internal_topic,
    say,
    scores_by_conversation,
    session_sidecar,
    wait_for_scores,
)
from tests.support.sidecar_process import SidecarProcess, free_port, read_topic
from tests.support.trace_scope import SplitTrace
from tests.test_service_e2e import sample
from tests.test_service_workers import worker_pids

NS = 1_000_000_000


def dialogue(n: int, turns: int) -> list[Turn]:
    return [Turn(f"c{n} question {i + 1}", f"c{n} answer {i + 1}") for i in range(turns)]


def reason_of(turns: list[Turn]) -> str:
    return " | ".join(f"turn {i + 1}: {t.question} -> {t.answer}" for i, t in enumerate(turns))


async def test_conversations_spread_over_partitions_and_workers_are_scored_once_per_window_after_idle_s(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    otlp_receiver: OtlpReceiver,
) -> None:
    idle_s = 3.0
    setup = await session_sidecar(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server,
        sessions={"idle_s": idle_s}, runtime={"workers": 2}, otlp_endpoint=otlp_receiver.endpoint("http/protobuf"),
    )  # fmt: skip
    said = {f"conv-{n}": dialogue(n, 3) for n in range(6)}
    traces: dict[str, list[SplitTrace]] = {}
    sidecar = setup.process
    sidecar.start()
    try:
        await sidecar.wait_ready(60)
        for i in range(3):  # the turns of every conversation, one round each, a second apart (< idle_s)
            await say(kafka_bootstrap, setup.spans, said, i, traces)
            await asyncio.sleep(1.0)
        records = await wait_for_scores(kafka_bootstrap, setup.scores, len(said), timeout_s=60)
        await asyncio.sleep(2 * idle_s)  # nothing more comes: no window is scored twice
        records = await read_topic(kafka_bootstrap, setup.scores, expect=len(said), timeout_s=5)
        await asyncio.sleep(1.0)  # a checkpoint: the OTLP batch, the tombstones
        internal = await read_internal_topic(kafka_bootstrap, setup.internal)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()

    scores = scores_by_conversation(records)
    assert set(scores) == set(said)
    for cid, [score] in scores.items():  # exactly one score per conversation
        turns = traces[cid]
        assert score["turnTraceIds"] == [t.trace_id for t in turns]  # every turn, in order
        assert (score["traceId"], score["spanId"]) == (turns[-1].trace_id, turns[-1].agent_span_id)
        assert score["reason"] == reason_of(said[cid])
        assert score["metadata"]["session"] == {"turns": 3, "closeReason": "idle", "complete": True, "truncated": False}
        # Scored only once the conversation was quiet for idle_s after its last turn.
        last_end = max(span.end_time or 0 for span in turns[-1].spans) / NS
        assert datetime.fromisoformat(score["timestamp"]).timestamp() >= last_end + idle_s
    # The turns went through the internal topic on their conversation's partition, then were tombstoned with a
    # marker once their scores were confirmed.
    turn_records = [r for r in internal if r.value is not None and b"/scored:" not in r.key]
    assert len(turn_records) == 18
    partitions: dict[str, set[int]] = {}
    for record in turn_records:
        partitions.setdefault(TurnSummary.decode(record.value).conversation_id, set()).add(record.partition)
    assert all(len(p) == 1 for p in partitions.values()) and len(set().union(*partitions.values())) > 1
    tombstoned = {r.key for r in internal if r.value is None}
    assert {r.key for r in turn_records} <= tombstoned
    # Before them, each window's marker (its turns), tombstoned after them: what a restore skips.
    markers = {r.key: json.loads(r.value) for r in internal if b"/scored:" in r.key and r.value is not None}
    assert {key.split(b"/")[0].decode(): sorted(value["turns"]) for key, value in markers.items()} == {
        cid: sorted(f"{t.trace_id}:{t.agent_span_id}" for t in turns) for cid, turns in traces.items()
    }
    assert set(markers) <= tombstoned
    # The scorer-run span hangs under the last turn's agent span, with the conversation.
    run_spans = [s for s in otlp_receiver.spans if s.attributes.get("scoring_sidecar.scorer.id") == "turns"]
    assert {(s.attributes["gen_ai.conversation.id"], s.parent_span_id) for s in run_spans} == {
        (cid, t[-1].agent_span_id) for cid, t in traces.items()
    }
    assert {s.attributes["scoring_sidecar.session.turns"] for s in run_spans} == {3}
    assert "sessions: " in sidecar.log_path.read_text()  # the restores said what they rebuilt


def expected_score_id(cid: str, turns: list[SplitTrace]) -> str:
    """The score id of a conversation's window: named by its first turn (the same on every restore and replica)."""
    scorer = dataclasses.replace(create_turn_count_scorer(None, TurnCountOptions()), id="turns")
    return score_id_of(scorer.fingerprint, f"session:{cid}:{turns[0].trace_id}:{turns[0].agent_span_id}")


async def published_turns(bootstrap: str, topic: str) -> int:
    return sum(
        1 for r in await read_internal_topic(bootstrap, topic) if r.value is not None and b"/scored:" not in r.key
    )


async def wait_published(bootstrap: str, topic: str, turns: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while await published_turns(bootstrap, topic) < turns:
        assert time.monotonic() < deadline, f"fewer than {turns} turns on {topic} after {timeout_s} s"
        await asyncio.sleep(0.3)


def assert_scored_once_each(
    records: list[Any], traces: dict[str, list[SplitTrace]], said: dict[str, list[Turn]]
) -> None:
    """Each conversation has one score id (copies of it allowed: at least once), named by its first turn, over
    every turn."""
    scores = scores_by_conversation(records)
    assert set(scores) == set(traces)
    for cid, values in scores.items():
        assert {v["scoreId"] for v in values} == {expected_score_id(cid, traces[cid])}, values
        assert values[-1]["turnTraceIds"] == [t.trace_id for t in traces[cid]]
        assert values[-1]["reason"] == reason_of(said[cid])


async def test_the_same_score_ids_after_kill_9_of_the_process_while_windows_are_open(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    # idle_s longer than a kill and restart: every conversation stays one window across them.
    setup = await session_sidecar(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, sessions={"idle_s": 12.0}
    )
    said = {f"k-{n}": dialogue(n, 3) for n in range(8)}
    traces: dict[str, list[SplitTrace]] = {}
    sidecar = setup.process
    try:
        for i in range(3):
            sidecar.start()
            await sidecar.wait_ready(30)
            await say(kafka_bootstrap, setup.spans, said, i, traces)
            await wait_published(kafka_bootstrap, setup.internal, 8 * (i + 1))
            if i < 2:
                sidecar.kill()  # kill -9 with every window open: their turns are only on the internal topic
        records = await wait_for_scores(kafka_bootstrap, setup.scores, len(said), timeout_s=60)
        await asyncio.sleep(3.0)
        records = await read_topic(kafka_bootstrap, setup.scores, expect=len(said), timeout_s=5)
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    assert_scored_once_each(records, traces, said)
    # The last start rebuilt 16 turns from the topic (its restores), then buffered the third round's 8.
    assert sample(metrics, "scoring_sidecar_session_restore_seconds_count", {}) == 3
    assert sample(metrics, "scoring_sidecar_session_turns_total", {"outcome": "buffered"}) == 24
    assert sample(metrics, "scoring_sidecar_sessions_closed_total", {"reason": "idle"}) == 8
    assert "sessions: " in sidecar.log_path.read_text()


async def test_a_killed_worker_and_a_rebalance_move_the_open_windows_to_their_new_owner_which_scores_them_once(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    setup = await session_sidecar(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, sessions={"idle_s": 12.0},
        runtime={"workers": 2},
    )  # fmt: skip
    said = {f"w-{n}": dialogue(n, 3) for n in range(8)}
    traces: dict[str, list[SplitTrace]] = {}
    sidecar = setup.process
    sidecar.start()
    try:
        await sidecar.wait_ready(60)
        await say(kafka_bootstrap, setup.spans, said, 0, traces)
        await wait_published(kafka_bootstrap, setup.internal, 8)
        # SIGKILL one worker: its partitions (of both groups) move to the other one, which rebuilds the
        # windows; the supervisor restarts it and they move again.
        workers = worker_pids(sidecar)
        os.kill(workers[0], signal.SIGKILL)
        await say(kafka_bootstrap, setup.spans, said, 1, traces)
        await wait_published(kafka_bootstrap, setup.internal, 16)
        await sidecar.wait_ready(60)
        await say(kafka_bootstrap, setup.spans, said, 2, traces)
        records = await wait_for_scores(kafka_bootstrap, setup.scores, len(said), timeout_s=60)
        await asyncio.sleep(3.0)
        records = await read_topic(kafka_bootstrap, setup.scores, expect=len(said), timeout_s=5)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    assert_scored_once_each(records, traces, said)
    assert len(records) == len(said)  # no window was closed by the moves: each scored exactly once
    log = sidecar.log_path.read_text()
    assert "restarting" in log or "restarted" in log


async def test_a_member_joining_takes_partitions_with_open_windows_and_scores_them_once(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    setup = await session_sidecar(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, sessions={"idle_s": 12.0}
    )
    first = setup.process
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second_config = json.loads(json.dumps(first.config))
    second_config["exporters"]["prometheus"]["port"] = free_port()
    second = SidecarProcess(second_config, second_dir, env=first.env)
    said = {f"r-{n}": dialogue(n, 2) for n in range(9)}
    traces: dict[str, list[SplitTrace]] = {}
    first.start()
    try:
        await first.wait_ready(30)
        await say(kafka_bootstrap, setup.spans, said, 0, traces)
        await wait_published(kafka_bootstrap, setup.internal, 9)
        second.start()  # the groups rebalance: some partitions of the internal topic move to it
        await second.wait_ready(30)
        await first.wait_ready(30)
        await say(kafka_bootstrap, setup.spans, said, 1, traces)
        records = await wait_for_scores(kafka_bootstrap, setup.scores, len(said), timeout_s=60)
        await asyncio.sleep(3.0)
        records = await read_topic(kafka_bootstrap, setup.scores, expect=len(said), timeout_s=5)
        assert second.terminate() == 0 and first.terminate() == 0
    finally:
        first.kill()
        second.kill()
    assert_scored_once_each(records, traces, said)
    assert len(records) == len(said)
    # The new member rebuilt open windows from the topic (turns read in its restores).
    restored = [line for line in second.log_path.read_text().splitlines() if "restored in" in line]
    assert any(" 0 records" not in line for line in restored), restored


async def produce_stamped(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes, int]], partition: int | None = None
) -> None:
    """(key, value, timestamp ms), stamped as they were when they happened (on ``partition``, else by key)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1024 * 1024)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=key, partition=partition, timestamp_ms=ts)
            for key, value, ts in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def last_end_ms(trace: SplitTrace) -> int:
    return max(span.end_time or 0 for span in trace.spans) // 1_000_000


def summary(conversation_id: str, n: int, start_ms: int, scorers: tuple[str, ...], answer: str = "") -> TurnSummary:
    return TurnSummary(
        conversation_id=conversation_id,
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        start_time_unix_nano=start_ms * 1_000_000,
        end_time_unix_nano=(start_ms + 500) * 1_000_000,
        user=f"{conversation_id} question {n}",
        answer=answer or f"{conversation_id} answer {n}",
        scorers=scorers,
    )


async def test_a_partition_read_behind_closes_no_window_whose_next_turn_is_waiting_unread(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """Two turns of a conversation published ten minutes ago, 3 s apart (idle_s 5), with a backlog of other
    conversations' turns between them: while the partition is read behind, its clock is the newest record
    timestamp read, so the window stays open for its second turn; the wall clock (ten minutes later) would have
    closed it as soon as its first turn was read."""
    setup = await session_sidecar(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, session_partitions=1,
        sessions={"idle_s": 5.0, "max_turns": 100_000, "max_session_bytes": 64 * 1024 * 1024},
        kafka={"session_timeout_ms": 30_000},
    )  # fmt: skip
    sidecar = setup.process
    then = time.time_ns() // 1_000_000 - 600_000
    first, second = summary("slow", 1, then, ("turns",)), summary("slow", 2, then + 3000, ("turns",))
    backlog = 60_000
    records = [(first.key, first.encode(), then)]
    for i in range(backlog):  # read by no scorer: they only keep the partition busy
        filler = summary(f"filler-{i % 20}", 1000 + i, then + 1 + i * 2900 // backlog, (), "words " * 80)
        records.append((filler.key, filler.encode(), then + 1 + i * 2900 // backlog))
    records.append((second.key, second.encode(), then + 3000))
    sidecar.start()
    try:
        await sidecar.wait_ready(30)
        assert sidecar.process is not None
        # The process stalls (SIGSTOP: a long pause, within the group's session timeout) while the turns arrive:
        # once it runs again its partition is read behind, every record already there.
        os.kill(sidecar.process.pid, signal.SIGSTOP)
        try:
            await produce_stamped(kafka_bootstrap, setup.internal, records, partition=0)
        finally:
            os.kill(sidecar.process.pid, signal.SIGCONT)
        resumed = time.monotonic()
        for _ in range(600):
            metrics = await sidecar.metrics_text()
            if sample(metrics, "scoring_sidecar_session_turns_total", {"outcome": "buffered"}) >= len(records):
                break
            await asyncio.sleep(0.1)
        read_s = time.monotonic() - resumed
        found = await wait_for_scores(kafka_bootstrap, setup.scores, 1, timeout_s=30)
        await asyncio.sleep(1.0)
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    # The backlog took ticks (0.25 s) to read: the first turn's window was due on the wall clock all along.
    assert read_s > 0.75, f"the backlog was read in {read_s:.2f} s: too fast to show anything"
    [score] = scores_by_conversation(found)["slow"]
    assert score["turnTraceIds"] == [first.trace_id, second.trace_id]
    assert sample(metrics, "scoring_sidecar_session_turns_total", {"outcome": "late"}) == 0
    assert sample(metrics, "scoring_sidecar_sessions_closed_total", {"reason": "idle"}) == 21


async def test_the_bounds_cut_and_mark_windows_a_full_buffer_evicts_the_oldest_and_the_metrics_say_so(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    long_text = "x" * 3000
    sessions = {"idle_s": 3.0, "max_turns": 3, "max_session_bytes": 8000, "max_bytes": 16000}
    setup = await session_sidecar(tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, sessions=sessions)
    chatty = dialogue(0, 5)  # past max_turns
    wordy = [Turn(f"{long_text} question {i + 1}", f"answer {i + 1}") for i in range(3)]  # past max_session_bytes
    said = {"chatty": chatty, "wordy": wordy}
    traces: dict[str, list[SplitTrace]] = {}
    crowd = {f"crowd-{n}": [Turn(f"{long_text} {n}", "ok")] for n in range(8)}
    sidecar = setup.process
    sidecar.start()
    try:
        await sidecar.wait_ready(30)
        for i in range(5):
            await say(kafka_bootstrap, setup.spans, said, i, traces)
            await asyncio.sleep(0.5)
        records = await wait_for_scores(kafka_bootstrap, setup.scores, 2, timeout_s=30, windows=4)
        await asyncio.sleep(1.0)
        # Eight conversations of one ~3.3 KB turn each, at once: more than max_bytes (16 KB) holds.
        await say(kafka_bootstrap, setup.spans, crowd, 0, {})
        records = await wait_for_scores(kafka_bootstrap, setup.scores, 10, timeout_s=30)
        await asyncio.sleep(1.0)
        records = await read_topic(kafka_bootstrap, setup.scores, expect=2 + 2 + 8, timeout_s=5)
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    scores = scores_by_conversation(records)
    cut = sorted(scores["chatty"], key=lambda v: len(v["turnTraceIds"]), reverse=True)
    assert [v["turnTraceIds"] for v in cut] == [
        [t.trace_id for t in traces["chatty"][:3]],
        [t.trace_id for t in traces["chatty"][3:]],
    ]
    assert [v["metadata"]["session"]["closeReason"] for v in cut] == ["max_turns", "idle"]
    assert [v["metadata"]["session"]["complete"] for v in cut] == [False, True]
    wordy_scores = sorted(scores["wordy"], key=lambda v: len(v["turnTraceIds"]), reverse=True)
    assert [len(v["turnTraceIds"]) for v in wordy_scores] == [2, 1]
    assert wordy_scores[0]["metadata"]["session"]["closeReason"] == "too_large"
    evicted = [v for cid in crowd for v in scores[cid] if v["metadata"]["session"]["closeReason"] == "evicted"]
    assert evicted and all(not v["metadata"]["session"]["complete"] for v in evicted)
    assert all(len(scores[cid]) == 1 for cid in crowd)  # evicted: scored now, from what it had, once
    assert sample(metrics, "scoring_sidecar_sessions_closed_total", {"reason": "max_turns"}) == 1
    assert sample(metrics, "scoring_sidecar_sessions_closed_total", {"reason": "too_large"}) == 1
    assert sample(metrics, "scoring_sidecar_sessions_closed_total", {"reason": "evicted"}) == len(evicted)
    assert "sessions.max_bytes" in sidecar.log_path.read_text()  # the eviction's warning says what to raise


async def test_the_service_refuses_to_start_without_its_internal_topic_or_with_one_that_does_not_compact(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    setup = await session_sidecar(tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, sessions={})
    sidecar = setup.process
    sidecar.config["sessions"]["topic"] = unique_name("missing")
    try:
        sidecar.start()
        assert sidecar.process is not None and sidecar.process.wait(60) == 2
        assert "does not exist: create it with cleanup.policy=compact,delete" in sidecar.log_path.read_text()
        deleting = unique_name("deleting")
        await create_session_topic(kafka_bootstrap, deleting, 1, {"cleanup.policy": "delete"})
        sidecar.config["sessions"]["topic"] = deleting
        sidecar.start()
        assert sidecar.process.wait(60) == 2
        assert f"sessions.topic {deleting!r} has cleanup.policy=delete: it must compact" in sidecar.log_path.read_text()
        # A broker that does not say (here: a topic created without a policy): a warning, and the service runs.
        sidecar.config["sessions"]["topic"] = await new_topic("unsaid", partitions=1)
        sidecar.start()
        await sidecar.wait_ready(30)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    assert "it should be compact,delete" in sidecar.log_path.read_text()


async def test_a_backlog_of_traces_keeps_each_conversation_in_one_window_while_stage_1_reads_it(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """The traces topic holds a backlog when the service starts (a restart, an outage): the first turns of
    twenty conversations, then thousands of other traces, then their second turns, seconds of reading later.
    Windows are cut on the turns' own time and close only once stage 1 has read the traces topic past it, so each
    conversation is one window; on the wall clock (or on publish times) the first turns would close alone."""
    setup = await session_sidecar(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, sessions={"idle_s": 2.0}
    )
    said = {f"b-{n}": dialogue(n, 2) for n in range(20)}
    firsts = {cid: turn_trace(cid, turns[0]) for cid, turns in said.items()}
    filler = turn_trace("none", Turn("a question of no conversation", "an answer"), id_on="nowhere")
    await asyncio.sleep(1.0)  # the users answer a second later (idle_s is 2)
    seconds = {cid: turn_trace(cid, turns[1]) for cid, turns in said.items()}
    # As the Collector wrote them when they happened: each record stamped with its spans' end.
    records = [(t.key, r, last_end_ms(t)) for t in firsts.values() for r in t.records]
    start, end = last_end_ms(filler), last_end_ms(next(iter(seconds.values())))
    for i in range(8000):
        trace_id, old = os.urandom(16), bytes.fromhex(filler.trace_id)
        stamp = start + (end - start) * i // 8000
        records.extend((trace_id.hex().encode(), r.replace(old, trace_id), stamp) for r in filler.records)
    records.extend((t.key, r, last_end_ms(t)) for t in seconds.values() for r in t.records)
    await produce_stamped(kafka_bootstrap, setup.spans, records)
    sidecar = setup.process
    sidecar.start()
    try:
        await sidecar.wait_ready(30)
        found = await wait_for_scores(kafka_bootstrap, setup.scores, len(said), timeout_s=90)
        await asyncio.sleep(3.0)
        found = await read_topic(kafka_bootstrap, setup.scores, expect=len(said), timeout_s=5)
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    scores = scores_by_conversation(found)
    assert {cid: [v["turnTraceIds"] for v in values] for cid, values in scores.items()} == {
        cid: [[firsts[cid].trace_id, seconds[cid].trace_id]] for cid in said
    }
    assert sample(metrics, "scoring_sidecar_session_turns_total", {"outcome": "late"}) == 0
    assert sample(metrics, "scoring_sidecar_session_turns_total", {"outcome": "no_conversation"}) == 8000


@pytest.mark.slow
async def test_a_judge_outage_holds_the_closed_windows_and_the_judge_metrics_equal_what_the_judge_answered(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
) -> None:
    """Windows that close while the judge refuses connections are held, not shed or scored empty: once it is back,
    each conversation is scored once over all its turns, and the call and token counters are the judge's own."""
    judge = FaultyJudge()
    await judge.up()
    frustration = {"id": "frustration", "kind": "user-frustration", "judge": "default", "targets": {"scope": "session"}}
    setup = await session_sidecar(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge,  # type: ignore[arg-type]  # only its url is read
        sessions={"idle_s": 2.0}, scorers=[frustration],
        judge={"timeout_s": 3, "max_retries": 1, "circuit_breaker": {"failure_threshold": 3, "reset_after_s": 2}},
    )  # fmt: skip
    said = {f"held-{n}": dialogue(n, 2) for n in range(4)}
    traces: dict[str, list[SplitTrace]] = {}
    sidecar = setup.process
    sidecar.start()
    try:
        await sidecar.wait_ready(60)
        await judge.down()
        for i in range(2):
            await say(kafka_bootstrap, setup.spans, said, i, traces)
            await asyncio.sleep(0.5)
        await asyncio.sleep(10)  # every window closed (idle_s 2) and met a judge that is down
        text = await sidecar.metrics_text()
        assert sample(text, "scoring_sidecar_judge_held_runs", {}) == len(said)
        assert sample(text, "scoring_sidecar_scorer_runs_total", {"outcome": "shed"}) == 0
        assert sample(text, "scoring_sidecar_scorer_runs_total", {"outcome": "failed"}) == 0
        assert await read_topic(kafka_bootstrap, setup.scores, expect=1, timeout_s=1) == []

        await judge.up()
        records = await wait_for_scores(kafka_bootstrap, setup.scores, len(said), timeout_s=60)
        await asyncio.sleep(1.0)  # a checkpoint after the last export
        text = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
        await judge.down()

    scores = scores_by_conversation(records)
    assert set(scores) == set(said)
    for cid, values in scores.items():
        assert len({v["scoreId"] for v in values}) == 1
        assert values[-1]["turnTraceIds"] == [t.trace_id for t in traces[cid]]
    assert sample(text, "scoring_sidecar_judge_held_runs", {}) == 0
    judge.assert_billed(text)  # the judge metrics are the judge's bill
