"""Worker processes: how a pod's limits are split, and how their metrics become one exposition."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporters.http_server import MetricsServer
from exporters.prometheus import SidecarMetrics
from exporters.worker_metrics import WorkerPoolMetrics, merge_worker_metrics
from sidecar.app.supervisor import RestartPolicy, Supervisor, limits_below_worker_count
from sidecar.app.worker_share import settings_for_worker, worker_share
from sidecar.settings import load_settings
from tests.support.runs import finished_run

CONFIG = """
kafka: {bootstrap_servers: "127.0.0.1:9092", topics: [spans], group_id: g}
judges:
  default: {model: openai/gpt-4o-mini, max_concurrency: 9, rpm: 100, tpm: 50000, spend_cap_usd_per_hour: 3.0}
  open: {model: openai/gpt-4o, max_concurrency: 1}
scorers: [{id: sim, kind: content-similarity}]
runtime: {workers: 2, max_in_flight_runs: 101}
"""


@given(total=st.integers(1, 10_000), count=st.integers(1, 64))
def test_worker_shares_sum_to_the_total_and_differ_by_at_most_one(total: int, count: int) -> None:
    shares = [worker_share(total, i, count) for i in range(count)]
    assert min(shares) >= 1 and max(shares) - min(shares) <= 1
    assert sum(shares) == max(total, count)  # below one per worker, each still gets one


def test_worker_share_rejects_an_index_outside_the_pool() -> None:
    with pytest.raises(ValueError, match="outside"):
        worker_share(10, 2, 2)


def test_each_worker_gets_its_part_of_the_pods_judge_limits(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(CONFIG)
    settings = load_settings(path)
    parts = [settings_for_worker(settings, i, 2) for i in range(2)]
    judges = [p.judges["default"] for p in parts]
    assert [j.max_concurrency for j in judges] == [5, 4]
    assert [j.rpm for j in judges] == [50, 50] and [j.tpm for j in judges] == [25_000, 25_000]
    assert [j.spend_cap_usd_per_hour for j in judges] == [1.5, 1.5]
    assert [p.judges["open"].max_concurrency for p in parts] == [1, 1]
    assert [p.judges["open"].rpm for p in parts] == [None, None]
    assert [p.runtime.max_in_flight_runs for p in parts] == [51, 50]
    assert all(p.runtime.workers == 1 for p in parts)  # a worker is one process: it supervises nothing
    assert parts[0].scorers == settings.scorers and parts[0].kafka == settings.kafka
    # judges.open.max_concurrency 1 cannot be split between 2 workers: said at start, not silently doubled.
    assert limits_below_worker_count(settings) == [
        "judges.open.max_concurrency is 1, below runtime.workers (2): each worker keeps 1, so the pod allows 2"
    ]


def worker_exposition(scored: int, trace_id: str) -> str:
    metrics = SidecarMetrics(version="1.2.3")
    for _ in range(scored):
        metrics.run_finished(finished_run("sim", "travel", "scored", 0.5, trace_id=trace_id))
    metrics.consumer_lag("spans", scored, 3)
    return generate_openmetrics(metrics.registry).decode()


def test_merged_exposition_labels_every_sample_by_worker_and_keeps_exemplars() -> None:
    a, b = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"
    families, invalid = merge_worker_metrics({"0": worker_exposition(3, a), "1": worker_exposition(4, b)})
    assert invalid == []
    assert len({f.name for f in families}) == len(families)  # one family per name
    runs = next(f for f in families if f.name == "scoring_sidecar_scorer_runs")
    scored = {
        s.labels["worker"]: s for s in runs.samples if s.name.endswith("_total") and s.labels.get("outcome") == "scored"
    }
    assert {w: s.value for w, s in scored.items()} == {"0": 3.0, "1": 4.0}
    assert {w: s.exemplar.labels["trace_id"] for w, s in scored.items() if s.exemplar} == {"0": a, "1": b}

    # Served by the supervisor's registry, in both formats scrapers ask for.
    pool = WorkerPoolMetrics(2)
    pool.merged.update(families)
    text = generate_latest(pool.registry).decode()
    parsed = {s.name: s for f in parse_text(text) for s in f.samples if s.labels.get("worker") == "1"}
    assert parsed["scoring_sidecar_scorer_runs_total"].value == 4
    assert "scoring_sidecar_score_bucket" in parsed and "scoring_sidecar_consumer_lag_records" in parsed
    openmetrics = generate_openmetrics(pool.registry).decode()
    names = {f.name for f in parse_openmetrics(openmetrics)}
    assert {"scoring_sidecar_workers", "scoring_sidecar_worker_up", "scoring_sidecar_build_info"} <= names


def test_a_worker_with_an_unreadable_exposition_is_left_out_not_the_scrape() -> None:
    good = worker_exposition(1, "0af7651916cd43dd8448eb211c80319c")
    clash = "# TYPE scoring_sidecar_scorer_runs gauge\nscoring_sidecar_scorer_runs 1.0\n# EOF\n"
    families, invalid = merge_worker_metrics({"0": good, "1": "not openmetrics {", "2": clash})
    assert invalid == ["1", "2"]
    workers = {s.labels["worker"] for f in families for s in f.samples}
    assert workers == {"0"}


async def test_the_supervisor_server_refreshes_before_each_scrape() -> None:
    pool = WorkerPoolMetrics(1)
    scrapes = 0

    async def refresh() -> None:
        nonlocal scrapes
        scrapes += 1
        families, _ = merge_worker_metrics({"0": worker_exposition(scrapes, "0af7651916cd43dd8448eb211c80319c")})
        pool.merged.update(families)

    async with (
        MetricsServer(pool.registry, host="127.0.0.1", port=0, refresh=refresh) as server,
        aiohttp.ClientSession() as session,
    ):
        for expected in (1.0, 2.0):
            async with session.get(server.url + "/metrics") as response:
                text = await response.text()
            values = [
                s.value
                for f in parse_text(text)
                for s in f.samples
                if s.name == "scoring_sidecar_scorer_runs_total" and s.labels.get("outcome") == "scored"
            ]
            assert values == [expected]


async def test_a_crash_looping_worker_stops_the_pod_with_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(CONFIG + "exporters: {prometheus: {enabled: false}}\n")
    # Real processes that exit at once with status 1, as a worker failing at start would.
    policy = RestartPolicy(backoff_s=0.01, max_backoff_s=0.02, quick_exit_s=30.0, max_quick_exits=3)
    supervisor = Supervisor(load_settings(path), path, policy=policy, python=shutil.which("false") or "/bin/false")
    code = await asyncio.wait_for(supervisor.run(asyncio.Event()), 30)
    assert code == 1
    restarts = [
        supervisor.metrics.registry.get_sample_value("scoring_sidecar_worker_restarts_total", {"worker": w})
        for w in ("0", "1")
    ]
    assert max(r or 0 for r in restarts) == 2  # two restarts, then the third quick exit ends it
    assert supervisor.readiness()[0] is False


def test_validate_warns_about_limits_the_workers_cannot_split(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith("config OK")
    assert "warning: judges.open.max_concurrency is 1, below runtime.workers (2)" in done.stderr


async def test_a_worker_exiting_with_status_2_stops_the_pod_at_once(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(CONFIG + "exporters: {prometheus: {enabled: false}}\n")
    invalid = tmp_path / "invalid-config-worker"
    invalid.write_text("#!/bin/sh\nexit 2\n")  # what a worker does when it finds its configuration invalid
    invalid.chmod(0o755)
    supervisor = Supervisor(load_settings(path), path, python=str(invalid))
    assert await asyncio.wait_for(supervisor.run(asyncio.Event()), 30) == 1
    restarts = supervisor.metrics.registry.get_sample_value("scoring_sidecar_worker_restarts_total", {"worker": "0"})
    assert restarts == 0  # no restart: a configuration does not heal by retrying
