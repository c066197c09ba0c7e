"""``scoring-sidecar backfill`` through the real broker, with the scripted judge server on loopback and the command
as a real process: a sub-window scored exactly (against the producer's manifest) under the ids ``run`` gives the
same traces, within its estimate; kill -9 mid-window and the same command again scores every trace once per
scorer; a topic that does not exist and a window past retention end in one line and exit status 2.

Tansu's time index holds the time it wrote each batch, not the producer's record timestamp (real Kafka indexes
the record's CreateTime by default). So the traffic is produced in bursts a second apart, each record's timestamp
inside its burst, and the windows are taken between bursts: they hold the same records by either time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sidecar.backfill.plan import plan_window
from sidecar.backfill.window import Window
from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY
from tests.support.s3 import S3Emulator
from tests.support.sidecar_process import SidecarProcess, free_port, read_scores, read_topic, sidecar_config

BURST_GAP_S = 1.2
SCORERS = [
    {"id": "prompt-alignment", "kind": "prompt-alignment", "judge": "default"},
    {"id": "similarity", "kind": "content-similarity"},
]


def iso(unix_ms: int) -> str:
    return datetime.fromtimestamp(unix_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Manifest:
    """What the producer wrote: each trace's burst, and the wall-clock time before each burst and after the last."""

    marks: list[int] = field(default_factory=list)
    burst_of: dict[str, int] = field(default_factory=dict)

    def between(self, first: int, last: int) -> set[str]:
        """The traces of bursts ``first`` to ``last`` (inclusive)."""
        return {trace for trace, burst in self.burst_of.items() if first <= burst <= last}


async def produce_in_bursts(bootstrap: str, topic: str, bursts: Sequence[list[GeneratedTrace]]) -> Manifest:
    """Each burst written (every record acknowledged) before the next starts ``BURST_GAP_S`` later; each record's
    timestamp is its burst's start plus its place in it."""
    manifest = Manifest()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        for number, traces in enumerate(bursts):
            if number:
                await asyncio.sleep(BURST_GAP_S)
            mark = int(time.time() * 1000)
            manifest.marks.append(mark)
            futures = []
            for i, trace in enumerate(traces):
                value = trace.request.SerializeToString()
                futures.append(await producer.send(topic, value, key=trace.key, timestamp_ms=mark + i))
                manifest.burst_of[trace.trace_id] = number
            await asyncio.gather(*futures)
        await asyncio.sleep(BURST_GAP_S)
        manifest.marks.append(int(time.time() * 1000))
    finally:
        await producer.stop()
    return manifest


class CountingJudge:
    """The stand-in judge's answers (usage: the prompt's characters / 4), counting every call and its tokens."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.delay_s = delay_s

    async def __call__(self, body: dict[str, Any]) -> Reply:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        reply = heuristic_reply(body)
        usage = reply.usage or {}
        self.calls += 1
        self.input_tokens += int(usage.get("prompt_tokens", 0))
        self.output_tokens += int(usage.get("completion_tokens", 0))
        return reply

    def counts(self) -> tuple[int, int, int]:
        return self.calls, self.input_tokens, self.output_tokens


def write_config(tmp_path: Path, config: dict[str, Any], name: str = "sidecar.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return path


def backfill_command(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "sidecar.cli", "backfill", "--config", str(config), *args]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return {**env, "JUDGE_API_KEY": SECRET_KEY}


async def run_backfill(config: Path, *args: str, timeout_s: float = 120) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *backfill_command(config, *args),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment(),
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def failure_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("scoring-sidecar backfill:")]


async def test_the_plan_finds_each_window_by_write_time_and_the_true_end_of_multi_record_batches(
    kafka_bootstrap: str, new_topic: Callable[..., Any]
) -> None:
    topic = await new_topic("spans", partitions=1)
    generator = TrafficGenerator(seed=31)
    manifest = await produce_in_bursts(kafka_bootstrap, topic, [list(generator.traces(5)) for _ in range(3)])
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        # Tansu answers end_offsets() with its last batch's first offset + 1: short of the end whenever that batch
        # holds several records. The plan reads the end from a fetch's high watermark instead.
        assert (await consumer.end_offsets([tp]))[tp] <= 15
        middle = await plan_window(
            consumer, [topic], Window.parse(iso(manifest.marks[1]), iso(manifest.marks[2])), bootstrap=kafka_bootstrap
        )
        assert [(p.start, p.end, p.earliest, p.log_end) for p in middle.partitions] == [(5, 10, 0, 15)]
        to_now = await plan_window(
            consumer, [topic], Window.parse(iso(manifest.marks[1]), None), bootstrap=kafka_bootstrap
        )
        assert [(p.start, p.end) for p in to_now.partitions] == [(5, 15)] and to_now.records == 10
        everything = await plan_window(
            consumer, [topic], Window.parse(iso(manifest.marks[0] - 60_000), None), bootstrap=kafka_bootstrap
        )
        assert [(p.start, p.end) for p in everything.partitions] == [(0, 15)]
        after = await plan_window(
            consumer, [topic], Window.parse(iso(manifest.marks[3]), None), bootstrap=kafka_bootstrap
        )
        assert after.records == 0
    finally:
        await consumer.stop()


async def test_a_sub_window_is_scored_exactly_under_the_ids_run_gives_and_within_its_estimate(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge = CountingJudge()
    judge_server.reset(judge)
    spans = await new_topic("spans", partitions=2)
    backfilled, live = await new_topic("scores", partitions=1), await new_topic("scores", partitions=1)
    dead = await new_topic("dead")
    generator = TrafficGenerator(seed=32)
    manifest = await produce_in_bursts(kafka_bootstrap, spans, [list(generator.traces(15)) for _ in range(4)])
    inside = manifest.between(1, 2)
    assert len(inside) == 30
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=backfilled, dead_topic=dead,
        group=unique_name("live"), judge_url=judge_server.url, metrics_port=free_port(), scorers=SCORERS,
    )  # fmt: skip
    path = write_config(tmp_path, config)

    # Without --yes it asks: the estimate is printed before a single record is scored.
    process = await asyncio.create_subprocess_exec(
        *backfill_command(path, "--from", iso(manifest.marks[1]), "--to", iso(manifest.marks[3]), "--sample-runs", "5"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment(),
    )
    assert process.stdout is not None and process.stdin is not None
    shown = b""
    while b"[y/N] " not in shown:
        chunk = await asyncio.wait_for(process.stdout.read(4096), 60)
        assert chunk, shown.decode()
        shown += chunk
    before = judge.counts()  # the estimate's measurement is done; the backfill's own calls come after
    process.stdin.write(b"y\n")
    await process.stdin.drain()
    rest, err = await asyncio.wait_for(process.communicate(), 120)
    out = (shown + rest).decode()
    assert process.returncode == 0, out + err.decode()[-3000:]
    assert "30 records in 2 partitions" in out
    # Off a terminal, progress is a line (tqdm's rate and time left), the last one at the window's end.
    assert re.search(r"^progress: 30/30 records \(100%\), .*record/s.*left", err.decode(), re.MULTILINE), err.decode()

    # The estimate against what the judge server counted.
    total = re.search(r"total: (\d+) runs, (\d+) judge calls, (\d+) input \+ (\d+) output tokens", out)
    assert total is not None, out
    runs, calls, tokens_in, tokens_out = map(int, total.groups())
    assert runs == 2 * len(inside)  # a run per trace and scorer, sampling 1
    actual = [after - start for after, start in zip(judge.counts(), before, strict=True)]
    for estimated, counted in zip((calls, tokens_in, tokens_out), actual, strict=True):
        assert abs(estimated - counted) <= 0.10 * counted, (estimated, counted, out)

    # Exactly the window's traces, once per scorer, as a backfill.
    values = [json.loads(r.value) for r in await read_topic(kafka_bootstrap, backfilled, expect=2 * len(inside))]
    assert {v["traceId"] for v in values} == inside
    assert sorted((v["traceId"], v["scorerId"]) for v in values) == sorted(
        (trace, scorer["id"]) for trace in inside for scorer in SCORERS
    )
    assert {v["scoreSource"] for v in values} == {"backfill"}

    # `run` on the whole topic gives the window's traces the same score ids.
    config["exporters"]["kafka_scores"]["topic"] = live
    sidecar = SidecarProcess(config, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})
    sidecar.start()
    try:
        await sidecar.wait_ready()
        records = await read_scores(kafka_bootstrap, live, score_ids=2 * len(manifest.burst_of), timeout_s=90)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    live_ids = {(v["traceId"], v["scorerId"]): v["scoreId"] for v in map(json.loads, (r.value for r in records))}
    assert {v["scoreSource"] for v in map(json.loads, (r.value for r in records))} == {"live"}
    assert {(v["traceId"], v["scorerId"]): v["scoreId"] for v in values} == {
        key: score_id for key, score_id in live_ids.items() if key[0] in inside
    }


async def test_kill_9_mid_window_then_the_same_command_scores_every_trace_once_per_scorer(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge_server.reset(CountingJudge(delay_s=0.25))  # a slow judge: the window takes seconds
    spans = await new_topic("spans", partitions=2)
    scores = await new_topic("scores", partitions=1)
    generator = TrafficGenerator(seed=33)
    manifest = await produce_in_bursts(kafka_bootstrap, spans, [list(generator.traces(n)) for n in (10, 30, 10)])
    inside = manifest.between(1, 1)
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=await new_topic("dead"),
        group=unique_name("live"), judge_url=judge_server.url, metrics_port=free_port(), scorers=SCORERS,
    )  # fmt: skip
    path = write_config(tmp_path, config)
    window = ("--from", iso(manifest.marks[1]), "--to", iso(manifest.marks[2]), "--yes", "--judge-concurrency", "2")
    port = free_port()
    first = await asyncio.create_subprocess_exec(
        *backfill_command(path, *window, "--sample-runs", "0", "--metrics-port", str(port)),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=environment(),
    )
    scored = 0.0
    lag_seen = False
    try:
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession() as session:
            while scored < 6 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                try:
                    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                        text = await response.text()
                except aiohttp.ClientError:
                    continue
                # Consumer lag counts what is left of the window, not the topic's records after it.
                lag = re.findall(r"^scoring_sidecar_consumer_lag_records\{([^}]*)\} (\S+)$", text, re.MULTILINE)
                if lag:
                    lag_seen = True
                    assert sum(float(v) for _, v in lag) <= len(inside), text
                runs = re.findall(r"^scoring_sidecar_scorer_runs_total\{([^}]*)\} (\S+)$", text, re.MULTILINE)
                assert all('mode="backfill"' in labels for labels, _ in runs), text
                scored = sum(
                    float(v) for labels, v in runs if 'outcome="scored"' in labels and "prompt-alignment" in labels
                )
        assert first.returncode is None, "the backfill ended before it could be killed mid-window"
        first.send_signal(signal.SIGKILL)
        await first.wait()
    finally:
        if first.returncode is None:
            first.kill()
    assert 6 <= scored < len(inside) and lag_seen

    code, out, err = await run_backfill(path, *window)
    assert code == 0, out + err[-3000:]
    resumed = re.search(r"resuming: (\d+) records were done by an earlier run, (\d+) are left", out)
    assert resumed is not None and int(resumed[1]) > 0 and int(resumed[2]) > 0, out

    values = [json.loads(r.value) for r in await read_topic(kafka_bootstrap, scores, expect=2 * len(inside))]
    ids_per_score: dict[tuple[str, str], set[str]] = {}
    for value in values:
        ids_per_score.setdefault((value["traceId"], value["scorerId"]), set()).add(value["scoreId"])
    # Every trace of the window scored by every scorer, each under one id (a run redone after the kill
    # exports the same record again under the same id: consumers keep one).
    assert set(ids_per_score) == {(trace, scorer["id"]) for trace in inside for scorer in SCORERS}
    assert all(len(ids) == 1 for ids in ids_per_score.values())


async def test_ctrl_c_mid_window_stops_committed_and_says_to_run_the_same_command_again(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge_server.reset(CountingJudge(delay_s=0.25))
    spans = await new_topic("spans", partitions=1)
    manifest = await produce_in_bursts(kafka_bootstrap, spans, [list(TrafficGenerator(seed=35).traces(30))])
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=await new_topic("scores"),
        dead_topic=await new_topic("dead"), group=unique_name("live"), judge_url=judge_server.url,
        metrics_port=free_port(), scorers=SCORERS,
    )  # fmt: skip
    path = write_config(tmp_path, config)
    window = ("--from", iso(manifest.marks[0]), "--yes", "--judge-concurrency", "1", "--sample-runs", "0")
    process = await asyncio.create_subprocess_exec(
        *backfill_command(path, *window), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=environment(),
    )  # fmt: skip
    while len(judge_server.requests) < 6:
        assert process.returncode is None
        await asyncio.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1, out.decode() + err.decode()[-3000:]
    assert "Traceback" not in err.decode()
    stopped = re.search(r"backfill stopped in \d+ s: (\d+) runs scored", out.decode())
    assert stopped is not None and 0 < int(stopped[1]) < 2 * 30, out.decode()
    assert "the window is not finished: run the same command again to continue from consumer group" in out.decode()
    code, again, err2 = await run_backfill(path, *window)
    assert code == 0 and "resuming:" in again, again + err2[-3000:]


async def test_a_topic_that_does_not_exist_is_one_line_and_exit_2_and_is_not_created(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], judge_server: JudgeServer
) -> None:
    missing = unique_name("no-such-spans")
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=missing, scores_topic=unique_name("scores"),
        dead_topic=unique_name("dead"), group=unique_name("live"), judge_url=judge_server.url,
        metrics_port=free_port(), scorers=SCORERS,
    )  # fmt: skip
    code, out, err = await run_backfill(write_config(tmp_path, config), "--from", "-1h", "--yes")
    assert code == 2, out + err
    assert failure_lines(err) == [
        f"scoring-sidecar backfill: topic {missing} does not exist on the Kafka broker at {kafka_bootstrap}: check "
        "kafka.topics in the configuration, and that this is the broker the live service uses (nothing was created)"
    ]
    assert "Traceback" not in err
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        assert missing not in await consumer.topics()
    finally:
        await consumer.stop()


async def test_a_window_past_retention_says_what_was_deleted_and_exits_2(
    tmp_path: Path, unique_name: Callable[[str], str], judge_server: JudgeServer, s3_emulator: S3Emulator
) -> None:
    """Tansu has no retention of its own (nor DeleteRecords), so retention is done to its storage as a broker's
    retention does it: the partition's first offset (the low watermark it answers ListOffsets with) moves past
    the deleted batches, which are removed."""
    judge_server.reset(CountingJudge())
    bucket = unique_name("tansu").lower()
    s3_emulator.create_bucket(bucket)
    broker = EmbeddedBroker(port=free_port(), storage_engine=f"s3://{bucket}/", env=s3_emulator.broker_env())
    await broker.start_async()
    try:
        bootstrap = broker.bootstrap_servers
        await create_topics(bootstrap, {"spans": 1, "scores": 1, "dead": 1})
        generator = TrafficGenerator(seed=34)
        manifest = await produce_in_bursts(bootstrap, "spans", [list(generator.traces(4)) for _ in range(3)])
        deleted = _expire_first_burst(s3_emulator, bucket, "spans", first_kept=4)
        assert deleted
        config = sidecar_config(
            bootstrap=bootstrap, spans_topic="spans", scores_topic="scores", dead_topic="dead",
            group=unique_name("live"), judge_url=judge_server.url, metrics_port=free_port(),
            scorers=[{"id": "similarity", "kind": "content-similarity"}],
        )  # fmt: skip
        path = write_config(tmp_path, config)
        code, out, err = await run_backfill(path, "--from", iso(manifest.marks[0]), "--yes")
        assert code == 2, out + err
        [line] = failure_lines(err)
        assert "Traceback" not in err
        oldest = re.search(r"partition 0 offsets 0–3 deleted, its oldest record left written (\S+);", line)
        assert oldest is not None, line
        assert line.startswith("scoring-sidecar backfill: the window starts at ")
        assert "before what topic spans still retains: partition 0 offsets 0–3 deleted" in line
        assert line.endswith(f"deleted by retention: to score what remains, run again with --from {oldest[1]}")

        # The suggested --from scores what remains: the two bursts still held.
        code, out, err = await run_backfill(path, "--from", oldest[1], "--yes")
        assert code == 0, out + err[-3000:]
        values = [json.loads(r.value) for r in await read_topic(bootstrap, "scores", expect=8)]
        assert {v["traceId"] for v in values} == manifest.between(1, 2)
    finally:
        await broker.stop_async(timeout_s=2)


def _expire_first_burst(s3: S3Emulator, bucket: str, topic: str, *, first_kept: int) -> list[str]:
    client = boto3.client(
        "s3", endpoint_url=s3.endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    prefix = f"/topics/{topic}/partitions/0000000000/"
    [watermark] = [k for k in keys if prefix in k and k.endswith("watermark.json")]
    state = json.loads(client.get_object(Bucket=bucket, Key=watermark)["Body"].read())
    state["low"] = first_kept
    client.put_object(Bucket=bucket, Key=watermark, Body=json.dumps(state).encode(), ContentType="application/json")
    batches = [k for k in keys if prefix + "records/" in k and int(k.rsplit("/", 1)[1][:20]) < first_kept]
    for key in batches:
        client.delete_object(Bucket=bucket, Key=key)
    return batches


async def test_a_taken_metrics_port_names_the_backfills_own_flag(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge_server.reset(CountingJudge())
    spans = await new_topic("spans", partitions=1)
    manifest = await produce_in_bursts(kafka_bootstrap, spans, [list(TrafficGenerator(seed=36).traces(3))])
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=await new_topic("scores"),
        dead_topic=await new_topic("dead"), group=unique_name("live"), judge_url=judge_server.url,
        metrics_port=free_port(), scorers=SCORERS,
    )  # fmt: skip
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = await run_backfill(
            write_config(tmp_path, config), "--from", iso(manifest.marks[0]), "--yes", "--sample-runs", "0",
            "--metrics-port", str(port),
        )  # fmt: skip
    assert code == 2, out + err
    [line] = failure_lines(err)
    assert f":{port}: the port is taken" in line and line.endswith(
        "pass backfill --metrics-port N (0: a free port), or leave it out: the backfill serves no metrics"
    ), line
    assert "Traceback" not in err
