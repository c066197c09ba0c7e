"""What the feedback join costs per score (docs/feedback.md): the feedback stage reads every score record back from
the score topic and holds it for feedback to come, so its CPU grows with the score rate, not with the labels.

In one process, over the same score records (a judge's categories score, as ``exporters.kafka_scores`` writes it,
judge record and prompts included):

* ``encode``  — the baseline: the Kafka score sink's encoding of each run into its record (``_encode``);
* ``join``    — the feedback stage's work per score record: read it back (``parse_score``) and hold it in the join
  (``Join.score``: the index, the state-topic write's JSON), with ``--max-held`` held at most (the oldest let go);
* ``pair``    — a feedback record met by its score: read and checked (``parse_feedback``), paired, the window's
  state written, the pairs' record encoded (``pair_record``), per feedback.

Rounds interleave the three (load from other processes falls on all alike); CPU is ``time.process_time()``. Goal:
following a score (reading it back, holding it, writing what is held) costs less than three times what producing its
record costs the sink (``join_vs_encode`` < 3): small beside a judged run, which costs milliseconds of CPU. The last
line holds the figures as ``key=value`` pairs; docs/benchmarks.md keeps them.

    .venv/bin/python bench/feedback_join.py [--scores 20000] [--rounds 4] [--max-held 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from exporters.kafka_scores import _encode
from sidecar.core import ScoredRun
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.runtime.feedback import FeedbackLimits, Join, JoinedScorer, parse_feedback, parse_score
from sidecar.runtime.feedback.topics import pair_record
from sidecar.scoring import AgentRunInput, LabelledScore, create_scorer
from sidecar.scoring.agent import assistant_message, user_message

GOAL_JOIN_VS_ENCODE = 3.0


async def _runs(n: int) -> list[ScoredRun]:
    scorer = (
        create_scorer(id="policy", description="a categories judge")
        .generate_score(lambda ctx: LabelledScore(0.5, "borderline"))
        .generate_reason(lambda ctx: "It hints at an exception without promising one; the policy allows none.")
    )
    request = ScorerRunRequest(
        target=SpanTarget(trace_id="1" * 32, span_id="2" * 16, agent_name="support-bot", model="gpt-4o"),
        input=AgentRunInput(input_messages=(user_message("Can I return the headphones after 45 days?"),)),
        output=(assistant_message("The 30 days have passed, but I'll ask a supervisor what is possible."),),
    )
    result = await scorer.run(input=request.input, output=request.output)
    started = time.time_ns()
    runs = []
    for i in range(n):
        target = request.target.model_copy(update={"trace_id": f"{i + 1:032x}"})
        runs.append(
            ScoredRun(
                request=request.model_copy(update={"target": target}),
                scorer_id="policy",
                scorer_name="policy",
                scorer_fingerprint=scorer.fingerprint,
                outcome="scored",
                result=result,
                error=None,
                started_unix_nano=started,
                finished_unix_nano=started,
            )
        )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scores", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-held", type=int, default=100_000)
    args = parser.parse_args()
    runs = asyncio.run(_runs(args.scores))
    values = [record.value for record in (_encode(run) for run in runs) if record is not None]
    feedback = [
        json.dumps({"traceId": run.request.target.trace_id, "spanId": "2" * 16, "name": "policy", "value": "compliant",
                    "author": "ana", "comment": "within policy"}).encode()
        for run in runs[: len(runs) // 10]
    ]  # fmt: skip
    limits = FeedbackLimits(max_held=args.max_held)
    scorer = JoinedScorer("policy", fingerprint=runs[0].scorer_fingerprint, version="1")
    cpu = {"encode": 0.0, "join": 0.0, "pair": 0.0}
    for _ in range(args.rounds):
        started = time.process_time()
        for run in runs:
            _encode(run)
        cpu["encode"] += time.process_time() - started

        join = Join(limits, {"policy": scorer})
        started = time.process_time()
        for i, value in enumerate(values):
            seen = parse_score(value)
            assert seen is not None
            join.score(i % 8, seen, now_ms=i)
        cpu["join"] += time.process_time() - started

        started = time.process_time()
        for i, value in enumerate(feedback):
            label = parse_feedback(value, max_record_bytes=64 * 1024, max_comment_chars=2000)
            for pair in join.feedback(i % 8, label, now_ms=len(values) + i).pairs:
                pair_record(pair, scorer)
        cpu["pair"] += time.process_time() - started
    per = {name: seconds / args.rounds for name, seconds in cpu.items()}
    encode_us = per["encode"] / len(runs) * 1e6
    join_us = per["join"] / len(values) * 1e6
    pair_us = per["pair"] / len(feedback) * 1e6
    ratio = join_us / encode_us
    print(f"score records: {len(values)} ({sum(map(len, values)) // len(values)} bytes each), {args.rounds} rounds")
    print(f"  encode (the score sink, baseline): {encode_us:7.1f} µs CPU per score")
    print(f"  join   (read back and held):       {join_us:7.1f} µs CPU per score   ({ratio:.2f}× encode)")
    print(f"  pair   (a feedback met, recorded):  {pair_us:7.1f} µs CPU per feedback")
    verdict = "ok" if ratio < GOAL_JOIN_VS_ENCODE else "ABOVE GOAL"
    print(
        f"encode_us={encode_us:.1f} join_us={join_us:.1f} pair_us={pair_us:.1f} join_vs_encode={ratio:.2f} "
        f"goal<{GOAL_JOIN_VS_ENCODE} {verdict}"
    )


if __name__ == "__main__":
    main()
