"""The ``judge`` section of ``bench/e2e.py``: judge calls/s of the sidecar with a one-prompt-step scorer
against raw aiohttp on the same judge stand-in (``bench/e2e.py`` says how)."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.e2e_harness import (
    ROOT,
    RUNTIME,
    SIDECAR_ENV,
    Committed,
    Template,
    drain,
    make_sidecar,
    metric_by_label,
    new_topics,
    process_cpu_s,
    produce_backlog,
    stop_sidecar,
)


def start_judge(latency_ms: float, stats: Path, kind: str) -> tuple[subprocess.Popen[str], str]:
    stats.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.e2e_scorers",
            "--latency-ms",
            f"{latency_ms:g}",
            "--stats",
            str(stats),
            "--server",
            kind,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **SIDECAR_ENV},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("listening"):
        process.kill()
        raise RuntimeError("the judge server did not start")
    return process, f"http://127.0.0.1:{int(line.split()[1])}/v1"


class Usage:
    """CPU seconds used by a process tree (``None``: this process) while the block runs, and its wall time."""

    def __init__(self, pid: int | None) -> None:
        self._pid = pid
        self.cpu_s = self.wall_s = 0.0

    def _cpu(self) -> float:
        return process_cpu_s(self._pid) if self._pid is not None else time.process_time()

    @property
    def fraction(self) -> float:
        """Cores used on average."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def __enter__(self) -> Usage:
        self._start = (time.monotonic(), self._cpu())
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.monotonic() - self._start[0]
        self.cpu_s = self._cpu() - self._start[1]


def judge_count(stats: Path) -> int:
    for _ in range(50):
        try:
            return int(stats.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            time.sleep(0.01)
    raise RuntimeError("cannot read the judge server's counter")


async def server_rate(stats: Path, calls: int, work: asyncio.Future[Any] | asyncio.Task[Any]) -> float:
    """Judge calls/s counted at the server between 10 % and 90 % of ``calls`` past the current count."""
    base = judge_count(stats)
    low, high = base + calls // 10, base + calls * 9 // 10
    t_low = t_high = None
    last = (time.monotonic(), base)
    while t_high is None:
        if work.done():
            work.result()  # raises if it failed
        count, now = judge_count(stats), time.monotonic()
        if count > last[1]:
            last = (now, count)
        if t_low is None and count >= low:
            t_low, c_low = now, count
        if t_low is not None and count >= high:
            t_high, c_high = now, count
        elif now - last[0] > 5.0:  # calls stopped before 90 %: the window ends at the last call
            print(f"judge: calls stopped at {count - base} of {calls}")
            if t_low is None:
                raise RuntimeError(f"judge calls stopped at {count - base} of {calls}")
            t_high, c_high = last
        await asyncio.sleep(0.05)
    return (c_high - c_low) / (t_high - t_low)


async def judged_rate(
    args: argparse.Namespace,
    bootstrap: str,
    topics: tuple[str, str, str],
    url: str,
    stats: Path,
    work: Path,
    workers: int,
) -> dict[str, float]:
    """Judge calls/s at the server while a fresh group of the sidecar (``workers`` processes) drains the backlog."""
    group = f"group-{workers}w"
    sidecar = make_sidecar(
        bootstrap,
        topics,
        work / f"sidecar-{workers}w",
        group=group,
        workers=workers,
        judge_url=url,
        judge={"max_concurrency": args.concurrency, "timeout_s": 10, "max_retries": 0},  # split among workers
        runtime={"max_in_flight_runs": max(RUNTIME.get("max_in_flight_runs", 512), 2 * args.concurrency)},
        scorers=[{"id": "bench-judge", "kind": "python: bench.e2e_scorers:judge_factory", "judge": "default"}],
    )
    sidecar.start()
    try:
        async with Committed(bootstrap, f"{topics[0]}-{group}", topics[0]) as committed:
            await sidecar.wait_ready(60)
            task = asyncio.create_task(drain(sidecar, committed, args.judge_records, args.timeout_s))
            assert sidecar.process is not None
            calls0 = judge_count(stats)
            with Usage(sidecar.process.pid) as used:
                ours = await server_rate(stats, args.judge_records, task)
            calls = judge_count(stats) - calls0
            task.cancel()  # the rate is measured; committing the whole backlog is not needed here
            text = await sidecar.metrics_text()
            (work / f"sidecar-{workers}w-metrics.txt").write_text(text)
            runs = metric_by_label(text, "scoring_sidecar_scorer_runs_total", "outcome")
            by_outcome = metric_by_label(text, "scoring_sidecar_judge_calls_total", "outcome")
            shed = metric_by_label(text, "scoring_sidecar_judge_shed_total", "reason")
            print(f"judge: {workers} worker(s) so far: runs by outcome {runs}; judge calls {by_outcome}; shed {shed}")
    finally:
        stop_sidecar(sidecar)
    cpu_ms = 1000 * used.cpu_s / max(1, calls)
    print(
        f"judge: sidecar, {workers} worker(s) (one prompt step per run): {ours:.0f} judge calls/s at the server; "
        f"sidecar CPU {used.cpu_s:.1f} s over {used.wall_s:.1f} s ({100 * used.fraction:.0f} % of one core, "
        f"all its processes), {cpu_ms:.3f} ms per judged run (record, run, call, export)"
    )
    return {"rate": ours, "cpu_frac": used.fraction, "cpu_ms": cpu_ms}


async def section_judge(args: argparse.Namespace, bootstrap: str, pool: list[Template], work: Path) -> dict:
    from bench.judge_overhead import _drive, _raw_call

    stats = work / "judge-stats"
    server, url = start_judge(args.latency_ms, stats, args.judge_server)
    figures: dict[str, Any] = {}
    try:
        topics = await new_topics(bootstrap, "judge")
        await produce_backlog(bootstrap, topics[0], pool, args.judge_records)
        connector = aiohttp.TCPConnector(limit=max(512, args.concurrency))
        async with aiohttp.ClientSession(connector=connector) as session:
            call = _raw_call(session, url)
            await _drive(call, args.concurrency, args.concurrency)  # warm-up: fills the pool
            task = asyncio.create_task(_drive(call, args.judge_calls, args.concurrency))
            calls0 = judge_count(stats)
            with Usage(server.pid) as server_cpu, Usage(None) as bench_cpu:
                raw = await server_rate(stats, args.judge_calls, task)
            raw_cpu_ms = 1000 * bench_cpu.cpu_s / max(1, judge_count(stats) - calls0)
            await task
        print(
            f"judge: raw aiohttp, concurrency {args.concurrency}, {args.latency_ms:g} ms: {raw:.0f} calls/s; "
            f"CPU: judge server {server_cpu.fraction:.2f}, raw client {bench_cpu.fraction:.2f} (cores)"
        )
        figures["raw_calls_per_s"] = round(raw, 1)
        figures["raw_client_cpu_ms_per_call"] = round(raw_cpu_ms, 4)
        figures["judge_server_cpu_frac_raw"] = round(server_cpu.fraction, 2)
        # The goal figure (no suffix): the pod as deployed here, --workers processes sharing the concurrency.
        for workers, suffix in ((args.workers, ""), (1, "_1w")) if args.workers > 1 else ((1, ""),):
            with Usage(server.pid) as server_cpu:
                result = await judged_rate(args, bootstrap, topics, url, stats, work, workers)
            print(f"judge: judge server CPU while the sidecar ran: {server_cpu.fraction:.2f} cores")
            figures[f"judge_server_cpu_frac{suffix}"] = round(server_cpu.fraction, 2)
            figures[f"judge_calls_per_s{suffix}"] = round(result["rate"], 1)
            figures[f"bound_fraction{suffix}"] = round(result["rate"] / raw, 3)
            figures[f"judge_sidecar_cpu_frac{suffix}"] = round(result["cpu_frac"], 2)
            figures[f"judge_sidecar_cpu_ms_per_run{suffix}"] = round(result["cpu_ms"], 4)
    finally:
        server.terminate()
        server.wait(10)
    fraction = figures["bound_fraction"]
    bound = args.concurrency / (args.latency_ms / 1000.0)
    print(
        f"judge: bound_fraction {fraction:.3f} with {args.workers} worker(s) (goal ≥ 0.9): "
        f"{'OK' if fraction >= 0.9 else 'MISSED'}; concurrency/latency bound {bound:.0f} calls/s"
    )
    return figures
