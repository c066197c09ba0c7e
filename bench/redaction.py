"""Redaction before the judge call: CPU per judged run with redaction on against off, and what each entity costs.

The runs are the demo's traffic (``sidecar.embedded.traffic``: its records through ingest, as the service maps
them), scored by a judge written in YAML that reads every part of a run (system instructions, request, answer,
tool calls): one judge call per run through the fast HTTP transport against a fixed judge server in a separate
process (so this process's CPU is the scorer's alone), in the same process, ``--rounds`` interleaved rounds:

* ``off`` — the scorer bound without a redactor;
* ``on``  — the same scorer bound with the default entities' redactor (``sidecar.redaction.entities``);
* ``on+phone`` — the default and ``PHONE_NUMBER``, the entity most often added (and the dearest).

Goal: the default entities cost at most 2 ms of CPU per judged run (``on`` − ``off``). The demo's traffic holds
no personal data, so the runs are also measured with a customer's phone number, e-mail address and card number
planted in the request (``planted``): what finding and replacing them costs.

Then each entity alone (the redactor's own CPU per run over the same runs, best of ``--passes``), and the default
with each other entity added: what adding it costs (docs/redaction.md keeps the table); with ``--names-model``,
the default with names and places by that spaCy model. The last line holds the figures as ``key=value`` pairs.

    .venv/bin/python bench/redaction.py [--traces 300] [--runs 2000] [--concurrency 64] [--rounds 4] [--passes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fixed_judge import start_fixed_judge
from sidecar.conventions.spans import spans_to_runs
from sidecar.core.runs import ScorerRunRequest
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.redaction.entities import DEFAULT_ENTITIES, ENTITIES
from sidecar.redaction.redactor import PresidioRedactor, RedactionPolicy
from sidecar.scorers import create_llm_judge_scorer
from sidecar.scoring import Scorer
from sidecar.scoring.agent import TextPart
from sidecar.scoring.judge.client import JudgeClient, close_default_judge_clients
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.steps import ScorerRun

GOAL_MS = 2.0
PLANTED = " Call me on +1 415 555 0132 or write to maria.lopez@example.com; my card is 4111 1111 1111 1111."
TEMPLATE = """The agent was instructed:
{{ system }}

The user wrote:
{{ input }}

{% if tool_calls %}It called:
{{ tool_calls }}

{% endif %}It answered:
{{ output }}

Is the answer helpful?"""
JUDGE = {"instructions": "You review an agent's answers.", "prompt": TEMPLATE, "output": {"type": "boolean"}}
REPLY = json.dumps({"reason": "It answers the request.", "passed": True})


def demo_runs(traces: int) -> list[ScorerRunRequest]:
    """The agent runs of ``traces`` demo traces, as ingest maps them (span scope)."""
    runs: list[ScorerRunRequest] = []
    for trace in TrafficGenerator(seed=7).traces(traces):
        runs.extend(spans_to_runs(trace.request).runs)
    return runs


def planted(request: ScorerRunRequest) -> ScorerRunRequest:
    """The run with a customer's e-mail address and card number added to its request."""
    first = request.input.input_messages[0]
    parts = tuple(TextPart(text=p.text + PLANTED) if isinstance(p, TextPart) else p for p in first.content.parts)
    message = first.model_copy(update={"content": first.content.model_copy(update={"parts": parts})})
    run_input = request.input.model_copy(update={"input_messages": (message, *request.input.input_messages[1:])})
    return request.model_copy(update={"input": run_input})


async def _drive(scorer: Scorer, runs: Sequence[ScorerRunRequest], count: int, concurrency: int) -> float:
    """CPU ms per run for ``count`` runs of ``scorer`` over ``runs`` in turn, ``concurrency`` at once."""
    left = count

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            request = runs[left % len(runs)]
            result = await scorer.run(input=request.input, output=request.output)
            assert result.score is not None

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - started) * 1000.0 / count


def _own_cpu_ms(redactor: PresidioRedactor, runs: Sequence[ScorerRun], passes: int) -> float:
    """The redactor's own CPU ms per run (best of ``passes`` passes over ``runs``)."""
    best = float("inf")
    for _ in range(passes):
        started = time.process_time()
        for run in runs:
            redactor.redact(run)
        best = min(best, (time.process_time() - started) * 1000.0 / len(runs))
    return best


def _scorer_runs(requests: Sequence[ScorerRunRequest]) -> list[ScorerRun]:
    return [ScorerRun(input=r.input, output=r.output, run_id=str(i)) for i, r in enumerate(requests)]


async def judged(args: argparse.Namespace, runs: list[ScorerRunRequest]) -> dict[str, float]:
    server, url = start_fixed_judge(REPLY)
    try:
        model = JudgeModel(model="openai/gpt-4o-mini", api_base=url, api_key=SecretStr("sk-bench"), transport="http")
        client = JudgeClient(model)
        scorer = create_llm_judge_scorer(model=model, options=JUDGE)
        redactor = PresidioRedactor(RedactionPolicy.of(DEFAULT_ENTITIES))
        with_phone = PresidioRedactor(RedactionPolicy.of([*DEFAULT_ENTITIES, "PHONE_NUMBER"]))
        shapes = {
            "off": scorer.bind(client),
            "on": scorer.bind(client, redactor=redactor),
            "on+phone": scorer.bind(client, redactor=with_phone),
        }
        with_pii = [planted(r) for r in runs]
        rounds: dict[str, list[float]] = {f"{shape}{suffix}": [] for shape in shapes for suffix in ("", "_planted")}
        for shape in shapes.values():  # warm up: connections, schemas, the analyzer's first calls
            await _drive(shape, runs, args.concurrency * 2, args.concurrency)
        for round_index in range(args.rounds):
            order = list(rounds)
            order = order[round_index % len(order) :] + order[: round_index % len(order)]
            for name in order:
                shape = shapes[name.removesuffix("_planted")]
                chosen = with_pii if name.endswith("_planted") else runs
                rounds[name].append(await _drive(shape, chosen, args.runs, args.concurrency))
        await client.aclose()
        await close_default_judge_clients()
    finally:
        server.terminate()
        server.wait(10)
    return {name: statistics.median(values) for name, values in rounds.items()}


def per_entity(args: argparse.Namespace, runs: list[ScorerRunRequest]) -> dict[str, tuple[float, float]]:
    """Each entity: its own CPU per run alone, and what it adds to the default set (ms per run)."""
    scorer_runs = _scorer_runs(runs)
    default = _own_cpu_ms(PresidioRedactor(RedactionPolicy.of(DEFAULT_ENTITIES)), scorer_runs, args.passes)
    costs = {}
    for entity in ENTITIES:
        alone = _own_cpu_ms(PresidioRedactor(RedactionPolicy.of([entity])), scorer_runs, args.passes)
        added = (
            0.0
            if entity in DEFAULT_ENTITIES
            else _own_cpu_ms(
                PresidioRedactor(RedactionPolicy.of([*DEFAULT_ENTITIES, entity])), scorer_runs, args.passes
            )
            - default
        )
        costs[entity] = (alone, added)
    return costs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--traces", type=int, default=300)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--skip-entities", action="store_true", help="only the judged runs, on against off")
    parser.add_argument(
        "--names-model", help="also the default with names and places by this spaCy model (a package or a folder)"
    )
    args = parser.parse_args(argv)
    runs = demo_runs(args.traces)
    chars = statistics.mean(sum(len(text) for text in _texts(r)) for r in _scorer_runs(runs))
    print(f"{len(runs)} demo runs, {chars:.0f} characters of traced content per run on average")
    figures = asyncio.run(judged(args, runs))
    added = figures["on"] - figures["off"]
    added_planted = figures["on_planted"] - figures["off_planted"]
    print(f"{'CPU per judged run (ms)':40} {'off':>8} {'on':>8} {'added':>8} {'on+phone':>9} {'added':>8}")
    for label, suffix in (("demo traffic", ""), ("demo traffic, phone, e-mail, card planted", "_planted")):
        off, on, phone = (figures[f"{shape}{suffix}"] for shape in ("off", "on", "on+phone"))
        print(f"{label:40} {off:8.3f} {on:8.3f} {on - off:8.3f} {phone:9.3f} {phone - off:8.3f}")
    summary: dict[str, Any] = {
        "off_ms": round(figures["off"], 3),
        "on_ms": round(figures["on"], 3),
        "added_ms": round(added, 3),
        "added_planted_ms": round(added_planted, 3),
        "added_with_phone_ms": round(figures["on+phone"] - figures["off"], 3),
        "added_with_phone_planted_ms": round(figures["on+phone_planted"] - figures["off_planted"], 3),
        "goal_met": added <= GOAL_MS and added_planted <= GOAL_MS,
    }
    if not args.skip_entities:
        print(f"\n{'entity':28} {'alone':>10} {'added to the default':>22}")
        for entity, (alone, extra) in per_entity(args, runs).items():
            mark = " (default)" if entity in DEFAULT_ENTITIES else ""
            print(f"{entity + mark:28} {alone:8.3f} ms {extra:18.3f} ms")
            summary[f"alone_{entity}"] = round(alone, 3)
    if args.names_model:
        policy = RedactionPolicy.of(DEFAULT_ENTITIES, names_model=args.names_model)
        with_names = _own_cpu_ms(PresidioRedactor(policy), _scorer_runs(runs), args.passes)
        print(f"{'default + names (' + args.names_model + ')':28} {with_names:8.3f} ms")
        summary["default_with_names_ms"] = round(with_names, 3)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return 0 if summary["goal_met"] else 1


def _texts(run: ScorerRun) -> list[str]:
    from sidecar.redaction.walk import map_texts

    texts: list[str] = []
    map_texts(run, lambda t: texts.append(t) or t)
    return texts


if __name__ == "__main__":
    sys.exit(main())
