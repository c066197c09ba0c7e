"""Sizing figures for scoring whole conversations (sessions): the figures docs/sessions.md rests on.

Nothing here is the feature; it measures the state a session buffer would keep, on this machine.

* ``summary``: bytes of one compact per-turn summary (ids, times, the turn's request, answer and tool calls,
  usage) serialized as compact UTF-8 JSON, for three turn profiles, with and without the design's per-field
  caps and with a 2 KiB system prompt carried in every turn; CPU to encode and to decode one.
* ``memory``: Python memory per buffered session of N turns (tracemalloc, the buffer's dict included), for
  turns kept as their encoded JSON bytes (the design), as slotted objects, and as the mapped runs the trace
  scope builds (``ScorerRunRequest``, pydantic); how many such sessions fit in 256 MiB.
* ``prompt``: the transcript a session of N turns puts in a judge prompt (characters, ≈ tokens at 4 per token).
* ``kafka`` (skip with ``--no-kafka``): produce ``--records`` summaries (profile ``agent``) to a 4-partition
  topic of the embedded Tansu broker through aiokafka (acks=all, linger 10 ms), keyed per turn and placed
  on murmur2(conversation id) % partitions, as the repartition step would; then read them back from the
  beginning with a group-less consumer, decoding each, as a replica restoring its partitions would.
  Records/s, MB/s, client CPU per record. Tansu keeps everything in memory and shares the cores with the
  client: an order of magnitude, not a production broker's rate.

    .venv/bin/python bench/session_sizing.py [--no-kafka] [--records 50000] [--sessions 200]

The last line holds every figure as ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pydantic_core

from exporters.partitioner import murmur2
from sidecar.core.runs import RunAssembly, ScorerRunRequest, SpanTarget
from sidecar.scoring.agent import AgentRunInput, ToolInvocation, assistant_message, user_message

MiB = 1024 * 1024
BUDGET = 256 * MiB
TURN_COUNTS = (1, 5, 10, 20, 50)
PARTITIONS = 4

# Per-field caps of the design (characters): the judge reads text, and one runaway tool result must not
# make a session unbounded. Longer values are cut and flagged ("truncated": true).
CAP_TEXT = 8192  # user, answer
CAP_TOOL_ARGS = 1024
CAP_TOOL_RESULT = 2048
CAP_SYSTEM = 4096
MAX_TOOL_CALLS = 16


@dataclass(frozen=True)
class Profile:
    """Characters of a turn's parts (tool args are JSON text, results free text)."""

    name: str
    user: int
    answer: int
    tools: int
    tool_args: int
    tool_result: int


PROFILES = (
    Profile("chat", user=160, answer=500, tools=0, tool_args=0, tool_result=0),
    Profile("agent", user=320, answer=1200, tools=2, tool_args=80, tool_result=700),
    Profile("long", user=2500, answer=6000, tools=4, tool_args=300, tool_result=4000),
)
AGENT = PROFILES[1]

_VOCABULARY = (
    "the order account refund shipping delivery customer support please thanks status update invoice "
    "payment card address password reset login error issue ticket number date time week today tomorrow "
    "policy return exchange item product price discount subscription plan upgrade cancel renewal email "
    "phone message agent help question answer check confirm available stock warehouse tracking carrier "
    "package label weight size color model version app device browser setting option feature report "
    "could would should will can may might need want like know see find make take give send receive "
    "already still again also only just about after before during within between because however which "
    "é über naïve café 東京 données"
)
_WORDS = _VOCABULARY.split()


class Text:
    """Distinct pseudo-English strings of a given length (a fixed word list, seeded)."""

    def __init__(self, seed: int = 7) -> None:
        self._random = random.Random(seed)

    def __call__(self, chars: int) -> str:
        if chars <= 0:
            return ""
        words: list[str] = []
        size = 0
        while size < chars:
            word = self._random.choice(_WORDS)
            words.append(word)
            size += len(word) + 1
        return " ".join(words)[:chars]

    def hex(self, nbytes: int) -> str:
        return self._random.randbytes(nbytes).hex()


def _cap(value: str, limit: int) -> tuple[str, bool]:
    return (value[:limit], True) if len(value) > limit else (value, False)


def turn_summary(
    text: Text, profile: Profile, conversation_id: str, *, capped: bool = True, system: str = ""
) -> dict[str, Any]:
    """A turn as the repartition step would publish it: what a session scorer reads, nothing else."""
    start = 1_760_000_000_000_000_000 + text._random.randrange(10**12)
    truncated = False

    def cap(value: str, limit: int) -> str:
        nonlocal truncated
        if not capped:
            return value
        value, cut = _cap(value, limit)
        truncated |= cut
        return value

    calls = []
    for i in range(min(profile.tools, MAX_TOOL_CALLS)):
        args = '{"query": "' + text(max(0, profile.tool_args - 14)) + '"}'
        calls.append(
            {
                "id": f"call_{i}",
                "name": f"lookup_{i}",
                "args": cap(args, CAP_TOOL_ARGS),
                "result": cap(text(profile.tool_result), CAP_TOOL_RESULT),
                "error": False,
            }
        )
    summary: dict[str, Any] = {
        "v": 1,
        "conversationId": conversation_id,
        "traceId": text.hex(16),
        "spanId": text.hex(8),
        "agent": "support-agent",
        "service": "support-api",
        "convention": "genai",
        "model": "gpt-4o-mini",
        "start": start,
        "end": start + 2_500_000_000,
        "user": cap(text(profile.user), CAP_TEXT),
        "answer": cap(text(profile.answer), CAP_TEXT),
        "toolCalls": calls,
        "inputTokens": 40 + profile.user // 4,
        "outputTokens": 10 + profile.answer // 4,
        "complete": True,
    }
    if system:
        summary["system"] = cap(system, CAP_SYSTEM)
        summary["systemHash"] = hashlib.sha256(system.encode()).hexdigest()[:16]
    summary["truncated"] = truncated
    return summary


def encode(summary: dict[str, Any]) -> bytes:
    return pydantic_core.to_json(summary)


def conversation_id(text: Text) -> str:
    h = text.hex(16)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# --- summary --------------------------------------------------------------------------------------------


def summary_figures(figures: dict[str, Any]) -> None:
    system = Text(2)(2048)
    print("per-turn summary, compact JSON (bytes; median of 200 turns):")
    for profile in PROFILES:
        row = {}
        for label, kw in (
            ("uncapped", {"capped": False}),
            ("capped", {"capped": True}),
            ("capped+system", {"capped": True, "system": system}),
        ):
            text = Text(1)  # the same turns in each variant
            sizes = sorted(len(encode(turn_summary(text, profile, conversation_id(text), **kw))) for _ in range(200))
            row[label] = sizes[len(sizes) // 2]
        print(f"  {profile.name:<6} " + "  ".join(f"{k} {v:>6,}" for k, v in row.items()))
        figures[f"summary_bytes_{profile.name}"] = row["capped"]
        figures[f"summary_bytes_{profile.name}_uncapped"] = row["uncapped"]
        figures[f"summary_bytes_{profile.name}_system"] = row["capped+system"]

    text = Text(1)
    pool = [turn_summary(text, AGENT, conversation_id(text)) for _ in range(2000)]
    encoded = [encode(s) for s in pool]
    enc_us = _best_us(lambda: [encode(s) for s in pool], len(pool))
    dec_us = _best_us(lambda: [pydantic_core.from_json(b) for b in encoded], len(encoded))
    print(f"  agent turn: encode {enc_us:.1f} µs, decode {dec_us:.1f} µs (CPU, best of 5)")
    figures["encode_us"] = round(enc_us, 1)
    figures["decode_us"] = round(dec_us, 1)


def _best_us(work: Callable[[], object], count: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best / count * 1e6


# --- memory ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class BufferedSession:
    """The design's buffered session: turns kept as the bytes they arrived as, decoded when scored."""

    conversation_id: str
    partition: int
    first_seen: float
    last_seen: float
    turns: list[bytes] = field(default_factory=list)
    turn_ids: set[bytes] = field(default_factory=set)  # agent span ids: a redelivered turn is kept once
    bytes: int = 0


@dataclass(slots=True, frozen=True)
class ToolCallObj:
    id: str
    name: str
    args: str
    result: str
    error: bool


@dataclass(slots=True, frozen=True)
class TurnObj:
    trace_id: bytes
    span_id: bytes
    start: int
    end: int
    user: str
    answer: str
    tool_calls: tuple[ToolCallObj, ...]
    input_tokens: int
    output_tokens: int


@dataclass(slots=True)
class ObjectSession:
    conversation_id: str
    partition: int
    first_seen: float
    last_seen: float
    turns: list[TurnObj] = field(default_factory=list)
    turn_ids: set[bytes] = field(default_factory=set)


def _as_object(s: dict[str, Any]) -> TurnObj:
    return TurnObj(
        bytes.fromhex(s["traceId"]),
        bytes.fromhex(s["spanId"]),
        s["start"],
        s["end"],
        s["user"],
        s["answer"],
        tuple(ToolCallObj(c["id"], c["name"], c["args"], c["result"], c["error"]) for c in s["toolCalls"]),
        s["inputTokens"],
        s["outputTokens"],
    )


def _as_run(s: dict[str, Any]) -> ScorerRunRequest:
    """The trace scope's mapped run for the same turn (pydantic models), for comparison."""
    span = s["spanId"]
    calls = tuple(
        ToolInvocation(state="result", tool_call_id=c["id"], tool_name=c["name"], args=c["args"], result=c["result"])
        for c in s["toolCalls"]
    )
    return ScorerRunRequest(
        target=SpanTarget(
            trace_id=s["traceId"],
            span_id=span,
            span_name="invoke_agent support-agent",
            convention="genai",
            agent_name="support-agent",
            service_name="support-api",
            model="gpt-4o-mini",
            input_tokens=s["inputTokens"],
            output_tokens=s["outputTokens"],
            end_time_unix_nano=s["end"],
        ),
        input=AgentRunInput(input_messages=(user_message(s["user"], id=f"{span}-in-0"),)),
        output=(assistant_message(s["answer"], tool_invocations=calls, id=f"{span}-out-0"),),
        assembly=RunAssembly(
            complete=True,
            ready_reason="root_idle",
            spans=3 + len(calls),
            llm_calls=2,
            tool_calls=len(calls),
            retrieved_documents=0,
        ),
    )


def _session_bytes(mode: str, turns: int, sessions: int, profile: Profile) -> float:
    """Retained bytes per session of ``turns`` turns, ``sessions`` sessions in one dict."""
    text = Text(11)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buffer: dict[str, Any] = {}
    for p in range(sessions):
        conv = conversation_id(text)
        if mode == "json":
            session: Any = BufferedSession(conv, p % PARTITIONS, 0.0, 0.0)
        elif mode == "objects":
            session = ObjectSession(conv, p % PARTITIONS, 0.0, 0.0)
        else:
            session = []
        for _ in range(turns):
            summary = turn_summary(text, profile, conv)
            if mode == "json":
                data = encode(summary)
                session.turns.append(data)
                session.turn_ids.add(bytes.fromhex(summary["spanId"]))
                session.bytes += len(data)
            elif mode == "objects":
                turn = _as_object(summary)
                session.turns.append(turn)
                session.turn_ids.add(turn.span_id)
            else:
                session.append(_as_run(summary))
        buffer[conv] = session
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del buffer
    return (after - before) / sessions


def memory_figures(figures: dict[str, Any], sessions: int) -> None:
    print(f"memory per buffered session (profile agent, {sessions} sessions per point, tracemalloc):")
    print(f"  {'turns':>5} {'json bytes':>12} {'objects':>12} {'pydantic runs':>14} {'sessions/256MiB (json)':>24}")
    for n in TURN_COUNTS:
        row = {mode: _session_bytes(mode, n, sessions, AGENT) for mode in ("json", "objects", "runs")}
        fit = int(BUDGET // row["json"])
        print(
            f"  {n:>5} {row['json']:>12,.0f} {row['objects']:>12,.0f} {row['runs']:>14,.0f} {fit:>24,}"
            f"   ({row['json'] / n:,.0f} / {row['objects'] / n:,.0f} / {row['runs'] / n:,.0f} B per turn)"
        )
        figures[f"mem_json_{n}"] = round(row["json"])
        figures[f"mem_objects_{n}"] = round(row["objects"])
        figures[f"mem_runs_{n}"] = round(row["runs"])
        figures[f"fit_256mib_{n}"] = fit
    for profile in (PROFILES[0], PROFILES[2]):
        per = _session_bytes("json", 10, sessions, profile)
        print(
            f"  profile {profile.name}, 10 turns, json bytes: {per:,.0f} B/session, {int(BUDGET // per):,} in 256 MiB"
        )
        figures[f"mem_json_10_{profile.name}"] = round(per)


# --- prompt ---------------------------------------------------------------------------------------------


def transcript(turns: list[dict[str, Any]]) -> str:
    lines = []
    for i, t in enumerate(turns, 1):
        lines.append(f"Turn {i}\nUser: {t['user']}")
        lines.extend(f"Tool {c['name']}({c['args']}) -> {c['result']}" for c in t["toolCalls"])
        lines.append(f"Assistant: {t['answer']}")
    return "\n".join(lines)


def prompt_figures(figures: dict[str, Any]) -> None:
    text = Text(3)
    print("session transcript in a judge prompt (characters; ≈ tokens at 4 characters per token):")
    for profile in PROFILES:
        row = []
        for n in TURN_COUNTS:
            conv = conversation_id(text)
            chars = len(transcript([turn_summary(text, profile, conv) for _ in range(n)]))
            row.append(f"{n}: {chars:,} ({chars // 4:,} tok)")
            figures[f"prompt_tokens_{profile.name}_{n}"] = chars // 4
        print(f"  {profile.name:<6} " + "  ".join(row))


# --- kafka ----------------------------------------------------------------------------------------------


async def kafka_figures(figures: dict[str, Any], records: int, conversations: int) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from sidecar.embedded.broker import EmbeddedBroker, create_topics

    text = Text(5)
    convs = [conversation_id(text) for _ in range(conversations)]
    batch = []
    for i in range(records):
        conv = convs[i % conversations]
        summary = turn_summary(text, AGENT, conv)
        key = f"{conv}/{summary['traceId']}:{summary['spanId']}".encode()
        batch.append((key, encode(summary), murmur2(conv.encode()) & 0x7FFFFFFF))
    total_bytes = sum(len(v) for _, v, _ in batch)

    async with EmbeddedBroker() as broker:
        topic = "session-turns"
        await create_topics(broker.bootstrap_servers, {topic: PARTITIONS})
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, acks="all", linger_ms=10, max_batch_size=256 * 1024
        )
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"warm-up", key=b"warm-up", partition=0)
            wall, cpu = time.perf_counter(), time.process_time()
            pending = []
            for key, value, h in batch:
                pending.append(await producer.send(topic, value, key=key, partition=h % PARTITIONS))
                if len(pending) >= 5000:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
            p_wall, p_cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False, fetch_max_bytes=16 * MiB
        )
        await consumer.start()
        try:
            parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            seen, sessions = 0, set()
            wall, cpu = time.perf_counter(), time.process_time()
            while seen < records + 1:
                fetched = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                if not fetched:
                    break
                for messages in fetched.values():
                    for message in messages:
                        seen += 1
                        if message.key != b"warm-up":
                            sessions.add(pydantic_core.from_json(message.value)["conversationId"])
            c_wall, c_cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            await consumer.stop()

    mb = total_bytes / 1e6
    print(
        f"kafka (embedded Tansu, {PARTITIONS} partitions, {records:,} agent summaries of "
        f"{total_bytes / records:,.0f} B, {conversations:,} conversations):"
    )
    print(
        f"  produce acks=all: {records / p_wall:,.0f} records/s, {mb / p_wall:.1f} MB/s, "
        f"client CPU {p_cpu / records * 1e6:.0f} µs/record"
    )
    print(
        f"  read back + decode: {seen - 1:,} records, {len(sessions):,} conversations, "
        f"{(seen - 1) / c_wall:,.0f} records/s, {mb / c_wall:.1f} MB/s, "
        f"client CPU {c_cpu / records * 1e6:.0f} µs/record"
    )
    figures["kafka_produce_rps"] = round(records / p_wall)
    figures["kafka_produce_cpu_us"] = round(p_cpu / records * 1e6)
    figures["kafka_restore_rps"] = round((seen - 1) / c_wall)
    figures["kafka_restore_cpu_us"] = round(c_cpu / records * 1e6)
    figures["kafka_restored_ok"] = seen - 1 == records and len(sessions) == conversations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100, help="sessions per memory point")
    parser.add_argument("--records", type=int, default=50_000, help="summaries through the broker")
    parser.add_argument("--conversations", type=int, default=5_000, help="distinct conversation ids in --records")
    parser.add_argument("--no-kafka", action="store_true", help="skip the broker section")
    args = parser.parse_args()

    figures: dict[str, Any] = {"python": ".".join(map(str, sys.version_info[:3]))}
    summary_figures(figures)
    memory_figures(figures, args.sessions)
    prompt_figures(figures)
    if not args.no_kafka:
        asyncio.run(kafka_figures(figures, args.records, args.conversations))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
