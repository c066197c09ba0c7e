"""``scoring-sidecar compare`` on a real broker: score records as the Kafka exporter writes them, read over a window
and fed to the version comparison, print what the live gauges fed the same runs hold; what cannot be read is said in
one line with its exit status."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from exporters.kafka_scores import score_record
from exporters.prometheus.versions import VersionMetrics
from sidecar.backfill.window import utc_text
from sidecar.cli import main
from sidecar.compare import CompareOptions, run_compare
from sidecar.compare.scores import parse_score_record
from sidecar.core import ScoredRun
from sidecar.settings import Settings, load_settings
from sidecar.versions.comparison import ComparisonSettings
from tests.support.versions import canary_runs, scored


def config(bootstrap: str, scores_topic: str) -> dict[str, Any]:
    return {
        "kafka": {"bootstrap_servers": bootstrap, "topics": ["spans"]},
        "scorers": [
            {"id": "helpfulness", "kind": "content-similarity"},
            {"id": "tone", "kind": "content-similarity"},
        ],
        "exporters": {"kafka_scores": {"topic": scores_topic}, "otlp": {"enabled": False}},
    }


def settings_of(bootstrap: str, scores_topic: str) -> Settings:
    return load_settings(yaml.safe_dump(config(bootstrap, scores_topic)), environ={})


async def produce_scores(bootstrap: str, topic: str, runs: list[ScoredRun], extra: Sequence[bytes] = ()) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for value in extra:
            await producer.send(topic, value)
        for run in runs:
            record = score_record(run)
            assert record is not None
            key, value, headers = record
            await producer.send(topic, value, key=key, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


async def compared(settings: Settings, **options: Any) -> dict[str, Any]:
    out = io.StringIO()
    code = await run_compare(settings, CompareOptions(json=True, **options), out=out)
    assert code == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


async def test_compare_prints_the_comparison_the_live_gauges_hold(
    kafka_bootstrap: str, new_topic: Callable[..., Any]
) -> None:
    topic = await new_topic("scores", partitions=2)
    runs = list(canary_runs(1600))
    live = VersionMetrics(ComparisonSettings(), registry=CollectorRegistry())
    live.register_scorer("helpfulness", direction="higher")
    live.register_scorer("tone", direction="higher")
    for run in runs:
        live.run_finished(run)
    # What else a topic may hold: something else's records, and a redelivered score.
    await produce_scores(kafka_bootstrap, topic, [*runs, runs[5]], extra=[b"not a score", b'{"schema": 2}'])
    settings = settings_of(kafka_bootstrap, topic)
    start = utc_text(runs[0].finished_unix_nano // 1_000_000)
    gauges = {(c.scorer, c.version, c.reference): c for c in live._comparisons.comparisons()}
    for scorer, verdict in (("helpfulness", -1), ("tone", 0)):
        result = await compared(settings, agent="support-bot", scorer=scorer, start=start)
        comparison = result["comparison"]
        assert (comparison["version"], comparison["reference"], comparison["verdict"]) == ("1.1", "1.0", verdict)
        assert comparison["referenceWindow"] == "concurrent"
        gauge = gauges[(scorer, "1.1", "1.0")]
        assert gauge.verdict == verdict
        assert (comparison["runs"], comparison["referenceRuns"]) == (gauge.runs, gauge.reference_runs)
        for key, value in (("delta", gauge.delta), ("lower", gauge.lower), ("upper", gauge.upper)):
            assert comparison[key] == pytest.approx(value, abs=1e-9), key
        assert [v["version"] for v in result["versions"]] == ["1.0", "1.1"]
        assert sum(v["runs"] for v in result["versions"]) == 1600  # the redelivered score counted once


async def test_the_text_report_says_the_verdict(
    kafka_bootstrap: str, new_topic: Callable[..., Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    topic = await new_topic("scores")
    runs = list(canary_runs(1600, seed=2))
    await produce_scores(kafka_bootstrap, topic, runs)
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config(kafka_bootstrap, topic)))
    start = utc_text(runs[0].finished_unix_nano // 1_000_000)
    args = ["compare", "--config", str(path), "--agent", "support-bot", "--scorer", "helpfulness", "--from", start]
    assert await asyncio.to_thread(main, args) == 0
    text = capsys.readouterr().out
    assert "agent support-bot, scorer helpfulness (higher is better)" in text
    assert "1.1 against 1.0" in text and "a canary" in text
    assert "verdict   -1 regression" in text
    # Another agent: no score of it, said so.
    assert await asyncio.to_thread(main, [*args[:4], "travel-agent", *args[5:]]) == 0
    assert "no score of this agent and scorer with a version in the window" in capsys.readouterr().out


async def test_what_compare_cannot_read_is_one_line_and_exit_2(
    kafka_bootstrap: str, new_topic: Callable[..., Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    topic = await new_topic("scores")
    await produce_scores(
        kafka_bootstrap,
        topic,
        [scored("helpfulness", "1.0", 0.5, i, start_ns=time.time_ns() - 10**10) for i in range(5)],
    )
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config(kafka_bootstrap, topic)))
    base = ["compare", "--config", str(path), "--agent", "support-bot", "--from", "-1h"]
    cases = [
        (
            [*base, "--scorer", "nope"],
            "--scorer nope: no such scorer in the configuration (scorers: helpfulness, tone)",
        ),
        ([*base, "--scorer", "tone", "--topic", "missing-topic"], "check exporters.kafka_scores.topic (or --topic)"),
        ([*base, "--scorer", "tone", "--max-records", "2"], "the window holds 5 records of"),
        ([*base, "--scorer", "tone", "--to", "2020-01-01T00:00:00"], "has no zone"),
    ]
    for args, line in cases:
        assert await asyncio.to_thread(main, args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and line in err[0], err


async def test_a_broker_that_is_not_there_is_exit_4(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config("127.0.0.1:1", "scores")))
    args = ["compare", "--config", str(path), "--agent", "a", "--scorer", "tone", "--from", "-1h"]
    assert await asyncio.to_thread(main, args) == 4
    assert "is not reachable" in capsys.readouterr().err


async def test_a_backfill_score_is_read_only_when_asked(kafka_bootstrap: str, new_topic: Callable[..., Any]) -> None:
    topic = await new_topic("scores")
    now = time.time_ns() - 10_000_000_000  # runs that ended in the last 10 s
    live = [scored("tone", "1.0", 0.5, i, start_ns=now) for i in range(3)]
    record = score_record(scored("tone", "1.0", 0.5, 3, start_ns=now))
    assert record is not None
    backfilled = json.loads(record[1])
    backfilled["scoreSource"] = "backfill"  # as a backfill writes it
    await produce_scores(kafka_bootstrap, topic, live, extra=[json.dumps(backfilled).encode()])
    settings = settings_of(kafka_bootstrap, topic)
    only_live = await compared(settings, agent="support-bot", scorer="tone", start="-1h")
    assert [v["runs"] for v in only_live["versions"]] == [3]
    both = await compared(settings, agent="support-bot", scorer="tone", start="-1h", include_backfill=True)
    assert [v["runs"] for v in both["versions"]] == [4]


def test_a_score_record_reads_back_as_the_run_it_scored() -> None:
    record = score_record(scored("tone", "1.0", 0.5, 1))
    assert record is not None
    row = parse_score_record(record[1])
    assert row is not None and (row.source, row.version, row.agent, row.scorer) == (
        "live",
        "1.0",
        "support-bot",
        "tone",
    )
    assert row.time_ms == 1_700_000_000_000 + 150  # the run's end: i x 100 ms + 50 ms


@given(st.binary(max_size=200))
def test_any_bytes_are_a_score_or_nothing(value: bytes) -> None:
    row = parse_score_record(value)
    assert row is None or isinstance(row.score, float)


@given(
    st.dictionaries(
        st.sampled_from(["scoreId", "timestamp", "scorerId", "score", "metadata"]),
        st.none() | st.integers() | st.text(max_size=20),
    )
)
def test_a_record_missing_or_mistyping_a_field_is_not_a_score(body: dict[str, Any]) -> None:
    row = parse_score_record(json.dumps(body).encode())
    assert row is None or (isinstance(body.get("score"), int) and "timestamp" in body)
