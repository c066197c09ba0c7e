"""CPU per exported score of the Kafka score sink: submit + flush of N scored runs against the embedded
broker (Tansu, its own process: only the sidecar's side is measured), in process CPU time.

    .venv/bin/python bench/kafka_sink_cpu.py [--runs 20000] [--rounds 5]

Each round produces N distinct runs (one scorer, N spans) to a fresh topic and flushes once. The encoding
alone (``score_record`` over the same runs) is measured apart, so the delivery's own share shows. The last
line prints ``cpu_us_per_score=... encode_us_per_score=... delivery_us_per_score=...`` (medians of the
rounds); docs/delivery.md records the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exporters.kafka_scores import KafkaScoreSink, score_record
from sidecar.core import ScoredRun
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.scoring import create_scorer
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message


async def _runs(count: int) -> list[ScoredRun]:
    scorer = (
        create_scorer(id="length", name="Length")
        .generate_score(lambda ctx: 0.5)
        .generate_reason(lambda ctx: "The answer is about as long as the question needs.")
    )
    request = ScorerRunRequest(
        target=SpanTarget(trace_id="4bf92f3577b34da6a3ce929d0e0e4736", span_id="00f067aa0ba902b7", agent_name="a"),
        input=AgentRunInput(input_messages=(user_message("How do I reset my password?"),)),
        output=(assistant_message("Open Settings, then Reset password."),),
    )
    result = await scorer.run(input=request.input, output=request.output)
    runs = []
    now = time.time_ns()
    for i in range(count):
        target = request.target.model_copy(update={"trace_id": f"{i + 1:032x}", "span_id": f"{i + 1:016x}"})
        runs.append(
            ScoredRun(
                request=request.model_copy(update={"target": target}),
                scorer_id=scorer.id,
                scorer_name=scorer.name,
                scorer_fingerprint=scorer.fingerprint,
                outcome="scored",
                result=result,
                error=None,
                started_unix_nano=now,
                finished_unix_nano=now,
            )
        )
    return runs


async def _round(bootstrap: str, topic: str, runs: list[ScoredRun]) -> float:
    await create_topics(bootstrap, {topic: 3})
    sink = KafkaScoreSink(bootstrap, topic)
    await sink.start()
    try:
        started = time.process_time()
        for run in runs:
            await sink.submit(run)
        if not await sink.flush(60.0):
            raise RuntimeError("the flush did not confirm")
        return time.process_time() - started
    finally:
        await sink.close()


async def main(count: int, rounds: int) -> None:
    runs = await _runs(count)
    async with EmbeddedBroker() as broker:
        await _round(broker.bootstrap_servers, "warm-up", runs[: min(count, 2000)])
        totals = []
        encodes = []
        for r in range(rounds):
            totals.append(await _round(broker.bootstrap_servers, f"scores-{r}", runs))
            started = time.process_time()
            for run in runs:
                score_record(run)
            encodes.append(time.process_time() - started)
            print(f"round {r}: {totals[-1] / count * 1e6:.1f} us/score ({encodes[-1] / count * 1e6:.1f} encoding)")
    total = statistics.median(totals) / count * 1e6
    encode = statistics.median(encodes) / count * 1e6
    print(f"cpu_us_per_score={total:.1f} encode_us_per_score={encode:.1f} delivery_us_per_score={total - encode:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.rounds))
