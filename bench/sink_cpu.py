"""CPU per exported score of each score sink, in the same run: Kafka score records (the embedded broker),
Langfuse scores and Datadog evaluations (their stand-ins, tests/support/, each in a process of its own), so
that only the sidecar's side is counted, in process CPU time.

    .venv/bin/python bench/sink_cpu.py [--runs 20000] [--rounds 3] [--sinks kafka_scores,langfuse,datadog]

Each round builds a fresh sink, submits N distinct scored runs (one scorer, N spans) and flushes once; the
mapping alone (run → record, score or evaluation) is measured apart, so the delivery's share shows. Rounds
alternate between the sinks so that the host's load falls on all alike. The last lines print, per sink,
``<sink> cpu_us_per_score=... mapping_us_per_score=... delivery_us_per_score=...`` (medians of the rounds);
docs/delivery.md records the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kafka_sink_cpu import _runs
from exporters.datadog import DatadogEvaluationSink, datadog_evaluation
from exporters.kafka_scores import KafkaScoreSink, score_record
from exporters.langfuse import LangfuseScoreSink, langfuse_score
from sidecar.core import ScoredRun, Sink
from sidecar.embedded.broker import EmbeddedBroker, create_topics

# A stand-in in its own process: started, its port printed, stopped when its stdin closes.
_STAND_IN = """
import asyncio, sys
from tests.support.{module} import {cls}
async def main():
    stand_in = await {cls}().start()
    print(stand_in.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await stand_in.stop()
asyncio.run(main())
"""


class StandIn:
    def __init__(self, module: str, cls: str) -> None:
        root = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _STAND_IN.format(module=module, cls=cls)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


async def _round(make: Callable[[], Sink], runs: list[ScoredRun]) -> float:
    sink = make()
    await sink.start()
    try:
        started = time.process_time()
        for run in runs:
            await sink.submit(run)
        if not await sink.flush(120.0):
            raise RuntimeError(f"{sink.name}: the flush did not confirm")
        return time.process_time() - started
    finally:
        await sink.close()


def _mapping_time(mapping: Callable[[ScoredRun], Any], runs: list[ScoredRun]) -> float:
    started = time.process_time()
    for run in runs:
        mapping(run)
    return time.process_time() - started


async def main(count: int, rounds: int, sinks: list[str]) -> None:
    from tests.support.datadog import API_KEY
    from tests.support.langfuse import PUBLIC_KEY, SECRET_KEY

    runs = await _runs(count)
    langfuse = StandIn("langfuse", "LangfuseStandIn") if "langfuse" in sinks else None
    datadog = StandIn("datadog", "DatadogStandIn") if "datadog" in sinks else None
    topics = iter(range(10_000))
    try:
        async with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap_servers

            async def kafka() -> Sink:
                topic = f"scores-{next(topics)}"
                await create_topics(bootstrap, {topic: 3})
                return KafkaScoreSink(bootstrap, topic)

            makers: dict[str, tuple[Callable[[], Sink] | None, Callable[[ScoredRun], Any]]] = {
                "langfuse": (
                    (lambda: LangfuseScoreSink(langfuse.url, public_key=PUBLIC_KEY, secret_key=SECRET_KEY))
                    if langfuse
                    else None,
                    langfuse_score,
                ),
                "datadog": (
                    (lambda: DatadogEvaluationSink(datadog.url, api_key=API_KEY)) if datadog else None,
                    datadog_evaluation,
                ),
            }
            totals: dict[str, list[float]] = {name: [] for name in sinks}
            mappings: dict[str, list[float]] = {name: [] for name in sinks}
            warm = runs[: min(count, 2000)]
            for r in range(rounds + 1):  # round 0 warms every sink up and is not counted
                for name in sinks:
                    if name == "kafka_scores":
                        sink = await kafka()
                        spent = await _round(lambda sink=sink: sink, warm if r == 0 else runs)
                        mapping: Callable[[ScoredRun], Any] = score_record
                    else:
                        make, mapping = makers[name]
                        assert make is not None
                        spent = await _round(make, warm if r == 0 else runs)
                    if r == 0:
                        continue
                    totals[name].append(spent)
                    mappings[name].append(_mapping_time(mapping, runs))
                    print(f"round {r} {name}: {spent / count * 1e6:.1f} us/score", flush=True)
    finally:
        for stand_in in (langfuse, datadog):
            if stand_in is not None:
                stand_in.stop()
    for name in sinks:
        total = statistics.median(totals[name]) / count * 1e6
        mapped = statistics.median(mappings[name]) / count * 1e6
        print(
            f"{name} cpu_us_per_score={total:.1f} mapping_us_per_score={mapped:.1f} "
            f"delivery_us_per_score={total - mapped:.1f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sinks", default="kafka_scores,langfuse,datadog")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.rounds, args.sinks.split(",")))
