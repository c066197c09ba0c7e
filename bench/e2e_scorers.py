"""Helpers for ``bench/e2e.py``, importable by the sidecar subprocess (``PYTHONPATH`` = the repo root).

* ``judge_factory`` — a ``python: bench.e2e_scorers:judge_factory`` scorer kind: one prompt step, so one
  judge call per run (prompt alignment makes two).
* ``python -m bench.e2e_scorers --port P --latency-ms 200 --stats FILE [--server fixed|scripted]`` — a judge
  stand-in with a fixed latency, which also writes ``<calls> <monotonic s>`` to ``FILE`` every 0.1 s, so the
  bench counts judge calls at the server, whoever makes them. ``fixed`` (default):
  ``sidecar.testing.fixed_judge_server``, a fraction of ``scripted``'s CPU per call; ``scripted``: the tests'
  aiohttp server (``sidecar.testing.judge_server``), whose CPU is taken from the cores of the client measured
  (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from typing import Any

from sidecar.scorers.text import get_assistant_message_from_run_output
from sidecar.scoring import JudgeModel, Scorer, StepContext, create_scorer
from sidecar.testing.fixed_judge_server import FixedJudgeServer
from sidecar.testing.judge_server import JudgeServer, Reply

PROMPT = "Score the answer between 0 and 1. Question: what is 2 + 2? Answer: 4."


def judge_factory(*, judge: JudgeModel | None, options: dict[str, Any]) -> Scorer:
    assert judge is not None, "judge_factory needs a judge"

    def prompt(ctx: StepContext) -> str:
        return f"{PROMPT} ({(get_assistant_message_from_run_output(ctx.run.output) or '')[:200]})"

    return create_scorer(id="bench-judge", judge=judge).generate_score(description="score", create_prompt=prompt)


def write_stats(path: str, calls: int) -> None:
    with open(path + ".tmp", "w") as out:
        out.write(f"{calls} {time.monotonic():.6f}\n")
    os.replace(path + ".tmp", path)


def main() -> None:
    parser = argparse.ArgumentParser(description="judge server that counts its calls")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--stats", required=True)
    parser.add_argument("--server", choices=("fixed", "scripted"), default="fixed")
    args = parser.parse_args()
    calls = 0
    delay_s = args.latency_ms / 1000.0
    reply = Reply.json({"score": 0.5}, delay_s=delay_s)

    def responder(_body: dict[str, Any]) -> Reply:
        nonlocal calls
        calls += 1
        return reply

    async def serve() -> None:
        if args.server == "fixed":
            fixed = await FixedJudgeServer(delay_s=delay_s).start(port=args.port)  # replies {"score": 0.5}
            port, count = fixed.port, lambda: fixed.calls
        else:
            scripted = await JudgeServer(responder, record=False).start(port=args.port)
            port, count = scripted.port, lambda: calls
        print(f"listening {port}", flush=True)
        while True:
            write_stats(args.stats, count())
            await asyncio.sleep(0.1)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
