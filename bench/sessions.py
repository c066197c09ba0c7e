"""Conversations (``scope: session``) end to end: ``scoring-sidecar run`` as a subprocess against the embedded Tansu
broker, turns made by the real OpenTelemetry SDK (one trace of 5 spans in 2 records per turn, the conversation
named by ``gen_ai.conversation.id`` on its agent span), re-keyed per turn (a fresh trace id, a conversation id
of fixed width replaced in the bytes). The session scorer is a code scorer (``python:
tests.support.session_scorers:create_turn_count_scorer``), so the figures are the runtime's, not a judge's.

Sections (``--only NAME``; the last line holds every figure as ``key=value`` pairs):

* ``throughput`` (one process): a backlog of ``--turns`` turns (``--turns-per-conversation`` each) drained twice
  on fresh topics: by ``scope: span`` (content-similarity on the agent span of each turn) and by ``scope: session``
  (every trace buffered until done, its turn published to the internal topic, read back by stage 2 and held
  by conversation). Rates in turns/s: span scope from readiness to the last record committed; stage 1 to the
  last record committed (its turns acknowledged by the broker first); both stages to the last turn buffered by
  stage 2 (``session_turns_total``: buffered, duplicate or late). ``sessions_vs_span`` = both stages / span scope.
* ``latency`` (one process): conversations of ``--turns-per-conversation`` turns ``--gap-s`` apart, started at a
  steady rate so that ``--rate`` turns/s flow for ``--duration-s``; each turn re-stamped to end when sent; per
  conversation: its score's arrival at a consumer of the score topic − its last turn's agent span end.
  Goal: p99 ≤ ``idle_s`` (``--idle-s``) + 2 s. The trace stage's own ``idle_s`` (0.5 s) is part of the delay.
* ``restore``: ``--open`` conversations of 10 turns (the ``agent`` profile of ``bench/session_sizing.py``: 320 /
  1,200 characters, two tool calls of 80 + 700) written to a 1-partition internal topic as stage 1 would, then a
  sidecar started on it (``idle_s`` one hour: every window stays open): the time its restore took (the
  ``session_restore_seconds`` it reports) and its VmRSS against the same sidecar on an empty topic, per open
  conversation; and in this process, the memory of the same conversations in stage 2's windows (tracemalloc).

    PYTHONPATH=. .venv/bin/python bench/sessions.py [--only throughput|latency|restore] [--turns 20000]
        [--rate 50] [--duration-s 30] [--idle-s 5] [--open 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench import e2e_harness as harness
from sidecar.conventions.session_turns import TurnSummary, TurnTool
from sidecar.embedded.broker import EmbeddedBroker
from sidecar.runtime.sessions.limits import SessionLimits
from sidecar.runtime.sessions.windows import SessionWindows
from tests.support.conversations import Turn, turn_trace
from tests.support.sessions import create_session_topic
from tests.test_service_e2e import sample

TURN_COUNT = "python: tests.support.session_scorers:create_turn_count_scorer"
PLACEHOLDER = "conv-000000000000"  # the conversation id in the templates: replaced by one of the same width
SESSION_SCORER = [{"id": "turns", "kind": TURN_COUNT, "targets": {"scope": "session"}}]
SPAN_SCORER = [{"id": "similarity", "kind": "content-similarity"}]
WORDS = (
    "order", "refund", "parcel", "delivery", "invoice", "account", "password", "plan", "upgrade", "label", "carrier",
    "the", "a", "to",
)  # fmt: skip


class TurnTemplate:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        question = " ".join(rng.choice(WORDS) for _ in range(12))
        answer = " ".join(rng.choice(WORDS) for _ in range(30))
        tool = ("orders", json.dumps({"id": rng.randrange(10_000)}), json.dumps({"status": rng.choice(WORDS)}))
        trace = turn_trace(PLACEHOLDER, Turn(question, answer, tool))
        self.records = trace.records
        self.trace_id = bytes.fromhex(trace.trace_id)
        # As the Collector stamps a trace's records: when it writes them, right after its spans end.
        self.ended_ms = max(span.end_time or 0 for span in trace.spans) // 1_000_000

    def records_for(self, conversation: int, trace_id: bytes) -> list[bytes]:
        name = f"conv-{conversation:012d}".encode()
        return [r.replace(self.trace_id, trace_id).replace(PLACEHOLDER.encode(), name) for r in self.records]

    def restamped(self, conversation: int, trace_id: bytes) -> tuple[list[bytes], int]:
        """The turn's records with its spans shifted to end now, and its agent span's end."""
        out, delta, agent_end = [], None, 0
        for data in self.records_for(conversation, trace_id):
            request = ExportTraceServiceRequest.FromString(data)
            spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
            if delta is None:
                ends = [
                    s.end_time_unix_nano
                    for r in self.records
                    for rs in ExportTraceServiceRequest.FromString(r).resource_spans
                    for ss in rs.scope_spans
                    for s in ss.spans
                ]
                delta = time.time_ns() - max(ends)
            for span in spans:
                span.start_time_unix_nano += delta
                span.end_time_unix_nano += delta
                if span.name.startswith("invoke_agent"):
                    agent_end = span.end_time_unix_nano
            out.append(request.SerializeToString())
        return out, agent_end


def pool(size: int) -> list[TurnTemplate]:
    return [TurnTemplate(seed) for seed in range(size)]


async def produce_conversations(
    bootstrap: str, topic: str, templates: list[TurnTemplate], turns: int, per: int
) -> None:
    """``turns`` turns, ``per`` per conversation, conversations interleaved as concurrent users make them; each
    record stamped as the Collector would have when its turn happened (a backlog keeps those timestamps)."""
    producer = harness.producer_for(bootstrap)
    await producer.start()
    try:
        pending = []
        conversations = turns // per
        for round_ in range(per):
            for conversation in range(conversations):
                trace_id = random.randbytes(16)
                template = templates[(conversation + round_) % len(templates)]
                for record in template.records_for(conversation, trace_id):
                    key = trace_id.hex().encode()
                    pending.append(await producer.send(topic, record, key=key, timestamp_ms=template.ended_ms))
                if len(pending) >= 5000:
                    await asyncio.gather(*pending)
                    pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def new_topics(bootstrap: str, name: str) -> tuple[tuple[str, str, str], str]:
    topics = await harness.new_topics(bootstrap, name)
    internal = f"{topics[0]}-turns"
    await create_session_topic(bootstrap, internal, harness.PARTITIONS)
    return topics, internal


def session_sidecar(bootstrap: str, topics: tuple[str, str, str], internal: str, work: Path, **sessions: Any) -> Any:
    sidecar = harness.make_sidecar(
        bootstrap, topics, work, scorers=SESSION_SCORER, runtime={"trace_buffer": {"idle_s": 0.5}}
    )
    sidecar.config["sessions"] = {"topic": internal, **sessions}
    return sidecar


# --- throughput -------------------------------------------------------------------------------------------


async def section_throughput(args: argparse.Namespace, bootstrap: str, work: Path) -> dict[str, Any]:
    templates = pool(args.pool)
    turns, per = args.turns, args.turns_per_conversation
    records = turns * 2
    figures: dict[str, Any] = {}

    topics = await harness.new_topics(bootstrap, "span")
    await produce_conversations(bootstrap, topics[0], templates, turns, per)
    sidecar = harness.make_sidecar(bootstrap, topics, work / "span", scorers=SPAN_SCORER)
    sidecar.start()
    try:
        async with harness.Committed(bootstrap, f"{topics[0]}-group", topics[0]) as committed:
            await sidecar.wait_ready(60)
            span = await harness.drain(sidecar, committed, records, args.timeout_s)
    finally:
        harness.stop_sidecar(sidecar)
    figures["span_turns_per_s"] = round(span["rate"] / 2, 1)
    print(f"throughput: scope span: {figures['span_turns_per_s']:.0f} turns/s (CPU {span['cpu_s']:.1f} s)")

    topics, internal = await new_topics(bootstrap, "session")
    await produce_conversations(bootstrap, topics[0], templates, turns, per)
    sidecar = session_sidecar(bootstrap, topics, internal, work / "session", idle_s=args.throughput_idle_s)
    sidecar.start()
    try:
        async with harness.Committed(bootstrap, f"{topics[0]}-group", topics[0]) as committed:
            await sidecar.wait_ready(60)
            assert sidecar.process is not None
            started, cpu = time.monotonic(), harness.process_cpu_s(sidecar.process.pid)
            stage1_s = stage2_s = None
            while time.monotonic() - started < args.timeout_s:
                if stage1_s is None and await committed.total() >= records:
                    stage1_s = time.monotonic() - started
                text = await sidecar.metrics_text()
                read = sum(
                    sample(text, "scoring_sidecar_session_turns_total", {"outcome": outcome})
                    for outcome in ("buffered", "duplicate", "late")
                )
                if read >= turns:
                    stage2_s = time.monotonic() - started
                    if stage1_s is None:
                        stage1_s = stage2_s
                    break
                await asyncio.sleep(0.1)
            cpu = harness.process_cpu_s(sidecar.process.pid) - cpu
            await asyncio.sleep(args.throughput_idle_s + 3)  # every window closes and is scored
            text = await sidecar.metrics_text()
            closed = sample(text, "scoring_sidecar_sessions_closed_total", {})
            late = sample(text, "scoring_sidecar_session_turns_total", {"outcome": "late"})
    finally:
        harness.stop_sidecar(sidecar)
    if stage2_s is None or stage1_s is None:
        raise TimeoutError(f"stage 2 did not buffer {turns} turns in {args.timeout_s} s; log: {sidecar.log_path}")
    figures["session_stage1_turns_per_s"] = round(turns / stage1_s, 1)
    figures["session_turns_per_s"] = round(turns / stage2_s, 1)
    figures["sessions_vs_span"] = round(figures["session_turns_per_s"] / figures["span_turns_per_s"], 3)
    figures["session_windows_scored"] = int(closed)
    figures["session_late_turns"] = int(late)
    print(
        f"throughput: scope session: stage 1 {figures['session_stage1_turns_per_s']:.0f} turns/s, both stages "
        f"{figures['session_turns_per_s']:.0f} turns/s (CPU {cpu:.1f} s); {int(closed)} windows scored for "
        f"{turns // per} conversations ({int(late)} late turns); session / span = {figures['sessions_vs_span']:.3f}"
    )
    return figures


# --- latency ----------------------------------------------------------------------------------------------


async def section_latency(args: argparse.Namespace, bootstrap: str, work: Path) -> dict[str, Any]:
    templates = pool(args.pool)
    topics, internal = await new_topics(bootstrap, "latency")
    sidecar = session_sidecar(bootstrap, topics, internal, work / "latency", idle_s=args.idle_s)
    sidecar.start()
    per, gap = args.turns_per_conversation, args.gap_s
    last_end: dict[str, int] = {}
    arrivals: dict[str, float] = {}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest")
    producer: AIOKafkaProducer = harness.producer_for(bootstrap)
    stopping = asyncio.Event()

    async def collect() -> None:
        while not stopping.is_set():
            for batch in (await consumer.getmany(timeout_ms=100)).values():
                now = time.time()
                for record in batch:
                    arrivals.setdefault(json.loads(record.value)["conversationId"], now)

    async def converse(conversation: int) -> None:
        for i in range(per):
            trace_id = random.randbytes(16)
            records, end = templates[(conversation + i) % len(templates)].restamped(conversation, trace_id)
            for record in records:
                await producer.send(topics[0], record, key=trace_id.hex().encode())
            last_end[f"conv-{conversation:012d}"] = end
            if i < per - 1:
                await asyncio.sleep(gap)

    try:
        await sidecar.wait_ready(60)
        await consumer.start()
        consumer.subscribe([topics[1]])
        await producer.start()
        collector = asyncio.create_task(collect())
        conversations = int(args.rate * args.duration_s / per)
        interval = per / args.rate
        started = time.monotonic()
        tasks = []
        for n in range(conversations):
            await asyncio.sleep(max(0.0, started + n * interval - time.monotonic()))
            tasks.append(asyncio.create_task(converse(n)))
        await asyncio.gather(*tasks)
        for _ in range(int((args.idle_s + 30) / 0.2)):
            if len(arrivals) >= conversations:
                break
            await asyncio.sleep(0.2)
        stopping.set()
        await collector
    finally:
        await producer.stop()
        await consumer.stop()
        harness.stop_sidecar(sidecar)
    delays = sorted(arrivals[c] - last_end[c] / 1e9 for c in arrivals if c in last_end)
    if not delays:
        raise RuntimeError(f"no conversation scored; log: {sidecar.log_path}")

    def pct(p: float) -> float:
        return delays[min(len(delays) - 1, int(p * len(delays)))]

    figures = {
        "latency_rate": args.rate,
        "latency_idle_s": args.idle_s,
        "latency_conversations": conversations,
        "latency_missing": conversations - len(delays),
        "delay_p50_s": round(pct(0.5), 2),
        "delay_p99_s": round(pct(0.99), 2),
        "delay_max_s": round(delays[-1], 2),
        "delay_goal_met": pct(0.99) <= args.idle_s + 2,
    }
    print(
        f"latency: {args.rate:g} turns/s, {conversations} conversations of {per} turns {gap:g} s apart, idle_s "
        f"{args.idle_s:g}: last turn's end → score p50 {figures['delay_p50_s']} s, p99 {figures['delay_p99_s']} s, "
        f"max {figures['delay_max_s']} s ({figures['latency_missing']} missing); goal p99 ≤ idle_s + 2 s: "
        f"{'met' if figures['delay_goal_met'] else 'NOT met'}"
    )
    return figures


# --- restore ----------------------------------------------------------------------------------------------


def agent_turn(rng: random.Random, conversation: str, n: int) -> TurnSummary:
    """A turn of bench/session_sizing.py's ``agent`` profile."""

    def text(chars: int) -> str:
        out = ""
        while len(out) < chars:
            out += rng.choice(WORDS) + " "
        return out[:chars]

    start = time.time_ns() - (100 - n) * 10_000_000_000
    return TurnSummary(
        conversation_id=conversation,
        trace_id=rng.randbytes(16).hex(),
        span_id=rng.randbytes(8).hex(),
        span_name="invoke_agent support",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 2_500_000_000,
        agent_name="support-agent",
        service_name="support-api",
        model="gpt-4o-mini",
        convention="genai",
        system=text(400),
        user=text(320),
        answer=text(1200),
        tools=tuple(
            TurnTool(id=f"call_{i}", name=f"lookup_{i}", args={"query": text(66)}, result=text(700)) for i in range(2)
        ),
        scorers=("turns",),
    )


def conversations(count: int, turns: int = 10) -> list[TurnSummary]:
    rng = random.Random(11)
    return [agent_turn(rng, f"conv-{c:012d}", n) for c in range(count) for n in range(turns)]


def memory_per_session(summaries: list[TurnSummary], count: int) -> float:
    limits = SessionLimits(idle_s=3600.0, max_bytes=2**40)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    windows: SessionWindows[int] = SessionWindows(limits)
    windows.assign(0)
    windows.restored(0)
    for i, summary in enumerate(summaries):  # kept as the bytes that arrived (encoded here: counted)
        windows.add_turn(0, i, summary, summary.encode())
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert windows.open_windows == count
    return grown / count


async def section_restore(args: argparse.Namespace, bootstrap: str, work: Path) -> dict[str, Any]:
    summaries = conversations(args.open)
    turn_bytes = sum(len(s.encode()) for s in summaries) / len(summaries)
    per_session = memory_per_session(summaries, args.open)
    figures: dict[str, Any] = {
        "restore_open_sessions": args.open,
        "restore_turn_bytes": round(turn_bytes),
        "memory_per_session_kb": round(per_session / 1000, 1),
    }
    print(
        f"restore: {args.open} conversations of 10 turns ({turn_bytes:.0f} B each): {per_session / 1000:.1f} KB per "
        f"open conversation in stage 2's windows (tracemalloc)"
    )
    rss = {}
    for label, records in (("empty", []), ("loaded", summaries)):
        topics = await harness.new_topics(bootstrap, f"restore-{label}")
        internal = f"{topics[0]}-turns"
        await create_session_topic(bootstrap, internal, 1)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1024 * 1024)
        await producer.start()
        try:
            pending = [await producer.send(internal, s.encode(), key=s.key, partition=0) for s in records]
            await asyncio.gather(*pending)
        finally:
            await producer.stop()
        sidecar = session_sidecar(bootstrap, topics, internal, work / f"restore-{label}", idle_s=3600.0)
        sidecar.start()
        try:
            await sidecar.wait_ready(120)
            assert sidecar.process is not None
            metrics = ""
            deadline = time.monotonic() + args.timeout_s
            while time.monotonic() < deadline:
                metrics = await sidecar.metrics_text()
                if sample(metrics, "scoring_sidecar_session_restore_seconds_count", {}) >= 1:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(2.0)
            gc_settle = harness.rss_mb(sidecar.process.pid)
            rss[label] = gc_settle
            if label == "loaded":
                seconds = sample(metrics, "scoring_sidecar_session_restore_seconds_sum", {})
                figures["restore_s"] = round(seconds, 2)
                figures["restore_turns_per_s"] = round(len(records) / seconds) if seconds else None
        finally:
            harness.stop_sidecar(sidecar)
    figures["restore_rss_empty_mb"] = round(rss["empty"], 1)
    figures["restore_rss_loaded_mb"] = round(rss["loaded"], 1)
    figures["rss_per_session_kb"] = round((rss["loaded"] - rss["empty"]) * 1024 / args.open, 1)
    print(
        f"restore: {len(summaries)} turns read back in {figures['restore_s']} s "
        f"({figures['restore_turns_per_s']} turns/s); RSS {rss['empty']:.0f} MB empty → {rss['loaded']:.0f} MB "
        f"loaded: {figures['rss_per_session_kb']} KB per open conversation"
    )
    return figures


# --- the command line -------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sections = {"throughput": section_throughput, "latency": section_latency, "restore": section_restore}
    chosen = [args.only] if args.only else list(sections)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        async with EmbeddedBroker() as broker:
            for name in chosen:
                figures.update(await sections[name](args, broker.bootstrap_servers, work / name))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("throughput", "latency", "restore"))
    parser.add_argument("--pool", type=int, default=20, help="distinct turn traces to re-key")
    parser.add_argument("--turns", type=int, default=20_000, help="throughput: turns in the backlog")
    parser.add_argument("--turns-per-conversation", type=int, default=5)
    parser.add_argument("--throughput-idle-s", type=float, default=5.0, help="throughput: sessions.idle_s")
    parser.add_argument("--rate", type=float, default=50.0, help="latency: turns/s")
    parser.add_argument("--duration-s", type=float, default=30.0, help="latency: how long conversations start")
    parser.add_argument("--gap-s", type=float, default=1.0, help="latency: between the turns of a conversation")
    parser.add_argument("--idle-s", type=float, default=5.0, help="latency: sessions.idle_s")
    parser.add_argument("--open", type=int, default=3000, help="restore: open conversations of 10 turns")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--workdir", help="keep sidecar configs and logs here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    figures = asyncio.run(run(args))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
