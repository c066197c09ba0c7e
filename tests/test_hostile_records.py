"""Hostile records through the broker and a ``scoring-sidecar run`` process: records just under and over
``kafka.max_record_bytes`` that cannot be scored (garbage, a valid export with one huge attribute, many malformed
spans), then valid traces. The service stays up, scores the valid traces, commits the bad records with bounded
dead letters (docs/limits.md), and a restart does not meet them again."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from sidecar.core import names
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer
from tests.support.judge import SECRET_KEY
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    read_scores,
    read_topic,
    score_values,
    sidecar_config,
)
from tests.support.sidecar_process import (
    metric_sample as sample,
)

MAX_RECORD = 1024 * 1024  # kafka.max_record_bytes by default
HEADERS = [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"), ("tenant", b"t" * 300)]


def garbage(size: int, seed: int) -> bytes:
    # Not OTLP: a protobuf field number 0 is invalid at the very first byte.
    return b"\x00" + random.Random(seed).randbytes(size - 1)


def with_huge_attribute(trace: GeneratedTrace, size: int) -> bytes:
    """A valid export whose agent span carries one attribute that brings the record to ``size`` bytes."""
    request = ExportTraceServiceRequest()
    request.CopyFrom(trace.request)
    agent = next(s for s in request.resource_spans[0].scope_spans[0].spans if s.span_id.hex() == trace.agent_span_id)
    attribute = KeyValue(key="app.blob", value=AnyValue(string_value=""))
    agent.attributes.append(attribute)
    padding = size - request.ByteSize()
    agent.attributes[-1].value.string_value = "x" * (padding - 8)
    while request.ByteSize() > size:
        agent.attributes[-1].value.string_value = agent.attributes[-1].value.string_value[:-1]
    return request.SerializeToString()


def with_malformed_spans(trace: GeneratedTrace, size: int) -> bytes:
    """A valid export holding, beside its trace, as many agent spans with malformed span ids as fit in ``size``."""
    request = ExportTraceServiceRequest()
    request.CopyFrom(trace.request)
    spans = request.resource_spans[0].scope_spans[0].spans
    agent = next(s for s in spans if s.span_id.hex() == trace.agent_span_id)
    one = agent.ByteSize() + 8
    n = 0
    while request.ByteSize() + one < size:
        bad = spans.add()
        bad.CopyFrom(agent)
        bad.span_id = n.to_bytes(3, "big")  # 3 bytes, not 8: invalid_span
        n += 1
    return request.SerializeToString()


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        for value, key in records:
            await (await producer.send(topic, value, key=key, headers=HEADERS))
    finally:
        await producer.stop()


def letter_bytes(record: Any) -> int:
    return len(record.value or b"") + len(record.key or b"") + sum(len(k) + len(v) for k, v in record.headers)


@pytest.mark.slow
async def test_records_that_cannot_be_scored_are_committed_with_bounded_letters_and_the_service_stays_up(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    judge_server.reset(heuristic_reply)
    spans, scores, dead = (await new_topic("spans"), await new_topic("scores"), await new_topic("dead"))
    generator = TrafficGenerator(seed=36)
    carriers = list(generator.traces(4))
    hostile: dict[str, bytes] = {
        "garbage under": garbage(MAX_RECORD - 200, 1),
        "garbage over": garbage(MAX_RECORD + 300 * 1024, 2),
        "huge attribute under": with_huge_attribute(carriers[0], MAX_RECORD - 2048),
        "huge attribute over": with_huge_attribute(carriers[1], MAX_RECORD + 200 * 1024),
        "malformed spans under": with_malformed_spans(carriers[2], MAX_RECORD - 2048),
    }
    expected_reason = {
        "garbage under": b"decode_error",
        "garbage over": b"record_too_large",
        "huge attribute under": b"too_large",
        "huge attribute over": b"record_too_large",
        "malformed spans under": b"invalid_span",
    }
    valid = list(generator.traces(10))
    scored = [*valid, carriers[2]]  # the malformed spans' record holds a valid trace too
    await produce(
        kafka_bootstrap,
        spans,
        [(value, b"hostile") for value in hostile.values()] + [(t.request.SerializeToString(), t.key) for t in valid],
    )
    group = unique_name("group")
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead, group=group,
        judge_url=judge_server.url, metrics_port=free_port(),
    )  # fmt: skip
    sidecar = SidecarProcess(config, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})
    sidecar.start()
    try:
        await sidecar.wait_ready()
        records = await read_scores(kafka_bootstrap, scores, score_ids=2 * len(scored), timeout_s=90)
        await _wait_committed(kafka_bootstrap, group, spans, len(hostile) + len(valid))
        metrics = await sidecar.metrics_text()
        assert sidecar.process is not None and sidecar.process.poll() is None  # still up
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    log = sidecar.log_path.read_text()
    assert "Traceback" not in log, log[-4000:]

    # The valid traces are scored, by both scorers.
    values = score_values(records)
    targets = {(t.trace_id, t.agent_span_id) for t in scored}
    for scorer in ("prompt-alignment", "similarity"):
        assert {(v["traceId"], v["spanId"]) for v in values if v["scorerId"] == scorer} == targets

    # Every hostile record is committed with one bounded dead letter: at most the record's bytes twice over.
    letters = await read_topic(kafka_bootstrap, dead, expect=len(hostile), timeout_s=10)
    by_offset: dict[int, list[Any]] = {}
    for letter in letters:
        by_offset.setdefault(int(dict(letter.headers)[names.DL_SOURCE_OFFSET]), []).append(letter)
    assert sorted(by_offset) == list(range(len(hostile))), [dict(x.headers) for x in letters]
    for offset, (what, value) in enumerate(hostile.items()):
        (letter,) = by_offset[offset]
        headers = dict(letter.headers)
        assert headers[names.DL_REASON] == expected_reason[what], (what, headers)
        assert letter_bytes(letter) <= 2 * len(value), what
        assert letter_bytes(letter) <= 1024 * 1024, what  # what the dead-letter producer can send
        if names.DL_TRUNCATED in headers:  # cut to fit: the original's size is named
            assert headers[names.DL_TRUNCATED] == str(len(value)).encode()
            assert value.startswith(letter.value)
        else:
            assert letter.value == value
    assert int(dict(by_offset[4][0].headers)[names.DL_SPAN_COUNT]) > 1000  # one letter for every malformed span
    assert sample(metrics, "scoring_sidecar_dead_letters_total", {}) == len(hostile)
    assert sample(metrics, "scoring_sidecar_dead_letters_total", {"reason": "record_too_large"}) == 2

    # A restart of the same group does not meet them again.
    sidecar.start()
    try:
        await sidecar.wait_ready()
        await asyncio.sleep(2.0)  # several polls and checkpoints
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    assert sample(metrics, "scoring_sidecar_dead_letters_total", {}) == 0
    assert len(await read_topic(kafka_bootstrap, dead, expect=len(hostile) + 1, timeout_s=3)) == len(hostile)


async def _wait_committed(bootstrap: str, group: str, topic: str, count: int, timeout_s: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (committed := await committed_total(bootstrap, group, topic, 1)) < count:
        assert asyncio.get_running_loop().time() < deadline, f"{committed} of {count} records committed"
        await asyncio.sleep(0.3)
