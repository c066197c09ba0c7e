"""Judge-call overhead: CPU ms per prompt step and calls/s at high concurrency, three clients side by side.

Runs the scripted judge server (``sidecar.testing.judge_server``) as a separate process on loopback with
a fixed latency, so a client process's CPU time (``time.process_time()``) is the client's alone, then
drives it with three clients in the same run:

* ``raw``     — one shared aiohttp session, an OpenAI-style POST and ``json.loads`` of the reply;
* ``ours``    — a full prompt step through the scorer (``generate_score`` with structured output,
  validation and the judge record) over the fast HTTP transport (``OpenAICompatibleTransport``, one
  shared aiohttp session): one judge call per run;
* ``service`` — the same prompt step as the sidecar runs it: the scorer bound to a judge client built as the
  service builds it (``sidecar.app.assembly``: a ``JudgeGate`` with the concurrency as its limit, the
  Prometheus metrics as the call observer) and given the run id (the service passes the score id);
* ``instant`` — the prompt step alone, sequentially, with a transport that answers at once from a reply
  held in memory (parsed as the fast path parses one): the CPU of the scorer and judge client without
  aiohttp or concurrency, in microseconds per step (the best of three passes; ``instant_us_per_step``);
* ``litellm`` — plain ``litellm.acompletion``, in a child process of its own (imported before timing
  starts): its import leaves a heap that every full collection rescans and it finishes per-call logging
  in background threads, which in this process would be charged to the other two clients.

Each client is warmed up first (``--warmup`` calls, by default one per concurrency slot, which fills the
connection pools). raw, ours and service are then measured in ``--rounds`` interleaved rounds (the order
rotating), so that load from other processes on the machine falls on all alike. A client's CPU includes the
work it leaves running after its calls (until the process is idle again). The table also shows the server
process's CPU per call: the server shares the cores, so client and server CPU together bound the throughput.

Goal: ours ≤ 1.3 × raw's CPU per judge call (``cpu_ratio``, over all rounds; ``cpu_ratio_median`` and
``cpu_ratio_spread`` of the rounds' own ratios say how steady it was) and ≥ 90 % of raw's throughput in the
same run (``bound_fraction``); ``service_cpu_ratio`` is the same ratio for the service's shape, litellm is
shown beside them, without a goal. The loopback server shares the machine's cores, so the
concurrency/latency bound itself is printed for information only. The last line holds the figures as
``key=value`` pairs.

    .venv/bin/python bench/judge_overhead.py [--calls 2000] [--litellm-calls 500] [--concurrency 256]\
        [--latency-ms 200] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before litellm is imported anywhere: no network fetch of the cost map.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp
import pydantic_core
from pydantic import SecretStr

from exporters.prometheus.observer import SidecarMetrics
from sidecar.app.serve import tune_gc
from sidecar.core.observers import Observers
from sidecar.runtime.judge_gate import GateConfig, JudgeGate
from sidecar.scoring import create_scorer
from sidecar.scoring.judge.client import JudgeClient, close_default_judge_clients
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest, ChatResponse, parse_provider_cost, parse_usage

MODEL = "openai/gpt-4o-mini"
API_KEY = "sk-bench"
_ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Score the answer between 0 and 1. Question: what is 2 + 2? Answer: 4."
GOAL_CPU_RATIO = 1.3
GOAL_BOUND_FRACTION = 0.9

Call = Callable[[], Awaitable[None]]


@dataclass
class Measurement:
    """One client's totals over all rounds: this process's CPU, and the server process's CPU."""

    name: str
    calls: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    server_cpu_s: float | None = 0.0
    rounds: list[float] = dataclasses.field(default_factory=list)  # CPU ms per call, round by round

    @property
    def cpu_ms_per_call(self) -> float:
        return self.cpu_s * 1000.0 / self.calls

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.wall_s

    @property
    def server_cpu_ms_per_call(self) -> float | None:
        return None if self.server_cpu_s is None else self.server_cpu_s * 1000.0 / self.calls


def _process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of another process (Linux ``/proc``); ``None`` elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_server(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar.testing.judge_server",
            "--port",
            str(_free_port()),
            "--latency-ms",
            f"{latency_ms:g}",
            "--reply",
            '{"score": 0.5}',
        ],
        cwd=_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith("listening"):
            return process, f"http://127.0.0.1:{int(line.split()[1])}/v1"
    process.kill()
    raise RuntimeError("the judge server did not start")


async def _drive(call: Call, calls: int, concurrency: int) -> None:
    """``calls`` calls, at most ``concurrency`` in flight (one worker task per slot)."""
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, calls))))


async def _settle(max_s: float = 5.0) -> None:
    """Wait until this process is idle: litellm finishes its per-call logging in background tasks and
    threads after the call returns (docs/benchmarks.md: how much)."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        cpu0 = time.process_time()
        await asyncio.sleep(0.2)
        if time.process_time() - cpu0 < 0.002:
            return


async def _measure(into: Measurement, call: Call, calls: int, concurrency: int, server_pid: int) -> None:
    """Wall time covers the calls; CPU also covers the work a client leaves running after them."""
    server0 = _process_cpu_s(server_pid)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await _drive(call, calls, concurrency)
    wall1 = time.perf_counter()
    await _settle()
    cpu1 = time.process_time()
    server1 = _process_cpu_s(server_pid)
    into.calls += calls
    into.wall_s += wall1 - wall0
    into.cpu_s += cpu1 - cpu0
    into.rounds.append((cpu1 - cpu0) * 1000.0 / calls)
    if server0 is None or server1 is None or into.server_cpu_s is None:
        into.server_cpu_s = None
    else:
        into.server_cpu_s += server1 - server0


def _raw_call(session: aiohttp.ClientSession, url: str) -> Call:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}

    async def call() -> None:
        body = {"model": MODEL.split("/", 1)[1], "messages": [{"role": "user", "content": PROMPT}]}
        async with session.post(f"{url}/chat/completions", data=json.dumps(body).encode(), headers=headers) as r:
            payload = await r.read()
            if r.status != 200:
                raise RuntimeError(f"raw: HTTP {r.status}")
        if not json.loads(payload)["choices"][0]["message"]["content"]:
            raise RuntimeError("raw: empty reply")

    return call


def _ours_call(url: str) -> Call:
    judge = JudgeModel(model=MODEL, api_base=url, api_key=SecretStr(API_KEY), transport="http")
    scorer = create_scorer(id="bench", judge=judge).generate_score(
        description="score", create_prompt=lambda ctx: f"{PROMPT} ({ctx.run.output})"
    )

    async def call() -> None:
        result = await scorer.run(input="what is 2 + 2?", output="4")
        if result.score != 0.5:
            raise RuntimeError(f"ours: unexpected score {result.score}")

    return call


def _service_call(url: str, concurrency: int) -> tuple[Call, JudgeClient]:
    """The prompt step as the service runs it: a bound scorer, the runtime's gate, the metrics observer, a run id."""
    model = JudgeModel(model=MODEL, api_base=url, api_key=SecretStr(API_KEY), transport="http")
    observer = Observers([SidecarMetrics()])
    gate = JudgeGate(model, GateConfig(max_concurrency=concurrency))
    client = JudgeClient(model, gate=gate, observers=[observer])
    scorer = (
        create_scorer(id="bench", judge=model)
        .generate_score(description="score", create_prompt=lambda ctx: f"{PROMPT} ({ctx.run.output})")
        .bind(client)
    )
    run_ids = itertools.count()

    async def call() -> None:
        result = await scorer.run(input="what is 2 + 2?", output="4", run_id=f"run-{next(run_ids)}")
        if result.score != 0.5:
            raise RuntimeError(f"service: unexpected score {result.score}")

    return call, client


class _InstantTransport:
    """Answers at once with one reply held in memory, parsed on every call as the fast path parses a body."""

    _REPLY = pydantic_core.to_json(
        {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": '{"score": 0.5}'}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35},
        }
    )

    async def complete(self, request: ChatRequest) -> ChatResponse:
        data = pydantic_core.from_json(self._REPLY)
        choice = data["choices"][0]
        usage = data.get("usage")
        return ChatResponse(
            text=choice["message"]["content"],
            finish_reason=choice.get("finish_reason"),
            usage=parse_usage(usage),
            provider_cost=parse_provider_cost(usage),
        )

    async def aclose(self) -> None:
        return None


async def _instant_us_per_step(steps: int) -> float:
    model = JudgeModel(model=MODEL, api_base="http://127.0.0.1:9/v1", api_key=SecretStr(API_KEY), transport="http")
    client = JudgeClient(model, _InstantTransport())
    scorer = (
        create_scorer(id="bench", judge=model)
        .generate_score(description="score", create_prompt=lambda ctx: f"{PROMPT} ({ctx.run.output})")
        .bind(client)
    )
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for index in range(steps):
            await scorer.run(input="what is 2 + 2?", output="4", run_id=f"run-{index}")
        best = min(best, (time.process_time() - started) * 1e6 / steps)
    return best


def _litellm_call(url: str, acompletion: Any) -> Call:
    async def call() -> None:
        response = await acompletion(
            model=MODEL,
            api_base=url,
            api_key=API_KEY,
            messages=[{"role": "user", "content": PROMPT}],
            num_retries=0,
        )
        if not response.choices[0].message.content:
            raise RuntimeError("litellm: empty reply")

    return call


async def _bench(args: argparse.Namespace, url: str, server_pid: int) -> dict[str, Measurement]:
    """raw and ours: warm up, then interleave in rounds (order alternating), so that load from anything
    else on the machine falls on both alike. This process never imports litellm, like the fast path."""
    names = ("raw", "ours", "service")
    results = {
        "raw": Measurement("raw aiohttp"),
        "ours": Measurement("ours (prompt step)"),
        "service": Measurement("service (gate, metrics)"),
    }
    connector = aiohttp.TCPConnector(limit=max(512, args.concurrency))
    service, service_client = _service_call(url, args.concurrency)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            clients = {"raw": _raw_call(session, url), "ours": _ours_call(url), "service": service}
            for call in clients.values():
                await _drive(call, args.warmup, args.concurrency)
            # The service's collector settings: the heap imports built is not rescanned by every full collection,
            # which otherwise lands in whichever round runs then (docs/benchmarks.md: how much).
            tune_gc()
            for round_index in range(args.rounds):
                share = args.calls // args.rounds + (1 if round_index < args.calls % args.rounds else 0)
                shift = round_index % len(names)
                for key in names[shift:] + names[:shift]:
                    await _measure(results[key], clients[key], share, args.concurrency, server_pid)
    finally:
        await close_default_judge_clients()
        await service_client.aclose()
    results["instant"] = Measurement("instant", calls=1, cpu_s=await _instant_us_per_step(args.instant_steps) / 1e3)
    return results


async def _bench_litellm(args: argparse.Namespace, url: str, server_pid: int) -> Measurement:
    import litellm  # imported before any timing: import cost is not call cost

    litellm.suppress_debug_info = True
    result = Measurement("litellm.acompletion")
    call = _litellm_call(url, litellm.acompletion)
    await _drive(call, args.warmup, args.concurrency)
    await _settle()
    await _measure(result, call, args.litellm_calls, args.concurrency, server_pid)
    return result


def _run_litellm_child(args: argparse.Namespace, url: str, server_pid: int) -> Measurement:
    """litellm in a process of its own: its import leaves a heap (docs/benchmarks.md: how large) that every
    full collection would rescan, and it finishes per-call logging in background threads after each call;
    in this process either would be charged to whichever client happened to run next."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--litellm-child",
        f"{url}@{server_pid}",
        "--litellm-calls",
        str(args.litellm_calls),
        "--concurrency",
        str(args.concurrency),
        "--warmup",
        str(args.warmup),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the litellm client failed:\n{done.stderr[-2000:]}")
    fields = json.loads(lines[-1])
    return Measurement(**fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=2000, help="measured calls for ours and raw")
    parser.add_argument("--litellm-calls", type=int, default=500, help="measured calls for litellm")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds of raw and ours")
    parser.add_argument(
        "--warmup", type=int, default=None, help="unmeasured calls per client first (default: concurrency, fills pools)"
    )
    parser.add_argument("--instant-steps", type=int, default=20_000, help="prompt steps over the instant transport")
    parser.add_argument("--litellm-child", metavar="URL@PID", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warmup is None:
        args.warmup = args.concurrency
    if args.litellm_child:
        url, _, pid = args.litellm_child.rpartition("@")
        measured = asyncio.run(_bench_litellm(args, url, int(pid)))
        print(json.dumps(dataclasses.asdict(measured)))
        return
    if args.rounds < 1 or args.calls < args.rounds or args.litellm_calls < 1:
        parser.error("need --rounds ≥ 1, at least one call per round and at least one litellm call")

    server, url = _start_server(args.latency_ms)
    try:
        results = asyncio.run(_bench(args, url, server.pid))
        results["litellm"] = _run_litellm_child(args, url, server.pid)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    raw, ours, service, lite = results["raw"], results["ours"], results["service"], results["litellm"]
    bound = args.concurrency / (args.latency_ms / 1000.0) if args.latency_ms > 0 else float("inf")
    print(f"judge server: {url}, latency {args.latency_ms:g} ms, concurrency {args.concurrency}")
    print(f"theoretical bound (concurrency / latency): {bound:.0f} calls/s (server shares the cores)")
    print(
        f"{'client':<22}{'calls':>7}{'wall s':>9}{'cpu s':>9}{'cpu ms/call':>13}{'calls/s':>10}{'server ms/call':>16}"
    )
    for m in (raw, ours, service, lite):
        server_ms = m.server_cpu_ms_per_call
        print(
            f"{m.name:<22}{m.calls:>7}{m.wall_s:>9.2f}{m.cpu_s:>9.2f}{m.cpu_ms_per_call:>13.3f}{m.calls_per_s:>10.1f}"
            + (f"{server_ms:>16.3f}" if server_ms is not None else f"{'n/a':>16}")
        )
    bound_fraction = ours.calls_per_s / raw.calls_per_s
    cpu_ratio = ours.cpu_ms_per_call / raw.cpu_ms_per_call
    service_ratio = service.cpu_ms_per_call / raw.cpu_ms_per_call
    by_round = [o / r for o, r in zip(ours.rounds, raw.rounds, strict=True)]
    service_by_round = [o / r for o, r in zip(service.rounds, raw.rounds, strict=True)]
    verdict = "OK" if cpu_ratio <= GOAL_CPU_RATIO and bound_fraction >= GOAL_BOUND_FRACTION else "MISSED"
    instant_us = results["instant"].cpu_s * 1e3
    print(f"the prompt step over an instant transport (no HTTP): {instant_us:.1f} µs of CPU per step")
    print(
        f"CPU per call against raw: ours x{cpu_ratio:.2f} (rounds {min(by_round):.2f}-{max(by_round):.2f}), "
        f"service x{service_ratio:.2f} (rounds {min(service_by_round):.2f}-{max(service_by_round):.2f})"
    )
    print(f"goal (≤ x{GOAL_CPU_RATIO:g} raw's CPU per call, ≥ {GOAL_BOUND_FRACTION:g} of raw throughput): {verdict}")
    print(
        f"cpu_ms_per_call={ours.cpu_ms_per_call:.3f} raw_cpu_ms_per_call={raw.cpu_ms_per_call:.3f} "
        f"service_cpu_ms_per_call={service.cpu_ms_per_call:.3f} litellm_cpu_ms_per_call={lite.cpu_ms_per_call:.3f} "
        f"cpu_ratio={cpu_ratio:.3f} cpu_ratio_median={statistics.median(by_round):.3f} "
        f"cpu_ratio_spread={min(by_round):.2f}-{max(by_round):.2f} service_cpu_ratio={service_ratio:.3f} "
        f"service_cpu_ratio_median={statistics.median(service_by_round):.3f} bound_fraction={bound_fraction:.3f} "
        f"service_bound_fraction={service.calls_per_s / raw.calls_per_s:.3f} instant_us_per_step={instant_us:.1f} "
        f"ours_calls_per_s={ours.calls_per_s:.3f} raw_calls_per_s={raw.calls_per_s:.3f} "
        f"litellm_calls_per_s={lite.calls_per_s:.3f}"
    )


if __name__ == "__main__":
    main()
