"""Sampling from the record key: exactly the decisions decoding gives, and records skipped undecoded are
committed and counted (a real broker, Collector-shaped keys: the trace id as 32 lowercase hex characters)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from hypothesis import given, settings
from hypothesis import strategies as st

from exporters.kafka_scores import KafkaScoreSink
from exporters.prometheus import SidecarMetrics
from sidecar.conventions.selection import Selection, sample_score
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.ingest import decode_traces
from sidecar.ingest.key_sampling import KeySampler, trace_id_from_key
from sidecar.ingest.pipeline import IngestConfig, trace_ids_of
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.limits import RuntimeLimits
from sidecar.runtime.stages.span import SpanAssembly
from sidecar.scoring import create_scorer
from tests.support.custom_scorer import create_constant_scorer
from tests.support.service import scoring_service
from tests.support.sidecar_process import committed_total, read_topic

FAST_CONSUMER = {"fetch_max_wait_ms": 50, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
TEMPLATE = next(iter(TrafficGenerator(seed=5).traces(1)))
TEMPLATE_BYTES = TEMPLATE.request.SerializeToString()
TEMPLATE_ID = bytes.fromhex(TEMPLATE.trace_id)
trace_ids = st.binary(min_size=16, max_size=16).filter(any)
rates = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=3)


def record_of(trace_id: bytes) -> bytes:
    """The template's trace (one agent span and its children) under another trace id."""
    return TEMPLATE_BYTES.replace(TEMPLATE_ID, trace_id)


@given(trace_ids, st.booleans())
def test_a_collector_key_names_its_trace(trace_id: bytes, upper: bool) -> None:
    key = trace_id.hex().upper() if upper else trace_id.hex()
    assert trace_id_from_key(key.encode()) == trace_id


@given(st.one_of(st.none(), st.binary(max_size=40).filter(lambda b: len(b) != 32), st.just(b"0" * 32)))
def test_a_key_that_is_not_a_trace_id_says_nothing(key: bytes | None) -> None:
    assert trace_id_from_key(key) is None


@settings(max_examples=200, deadline=None)
@given(trace_ids, rates)
def test_key_sampling_decides_exactly_what_decoding_decides(trace_id: bytes, scorer_rates: list[float]) -> None:
    scorers = [ConfiguredScorer(create_constant_scorer(), selection=Selection(sample_rate=r)) for r in scorer_rates]
    mapped = SpanAssembly(scorers).of_record(decode_traces(record_of(trace_id)))
    every_scorer_samples_out = not mapped.runs and all(counts.sampled_out for _, counts in mapped.skipped)
    sampler = KeySampler(scorer_rates)
    if sampler.useful:
        assert sampler.samples_out(trace_id) == every_scorer_samples_out
    else:
        assert not every_scorer_samples_out  # a scorer keeping everything keeps this record too


async def test_records_every_scorer_samples_out_are_committed_undecoded_and_the_others_scored(
    kafka_bootstrap: str, new_topic: Callable[..., Any], unique_name: Callable[[str], str]
) -> None:
    spans = await new_topic("spans", partitions=2)
    scores = await new_topic("scores", partitions=1)
    rate = 0.1
    keyed = [bytes.fromhex(f"{i + 1:032x}") for i in range(300)]
    unkeyed = [bytes.fromhex(f"{10_000 + i:032x}") for i in range(20)]  # no key, or a foreign one: decoded
    # Keys are trusted once a decoded record has shown one is its trace's id: the first keyed record handled is
    # decoded. Each partition starts with a record every scorer samples out, so exactly one of them is decoded.
    firsts = [t for t in (bytes.fromhex(f"{20_000 + i:032x}") for i in range(50)) if sample_score(t) >= rate][:2]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    await producer.start()
    try:
        sends = [
            await producer.send(spans, record_of(t), key=t.hex().encode(), partition=p) for p, t in enumerate(firsts)
        ]
        await asyncio.gather(*sends)
        keyed = firsts + keyed
        sends = [await producer.send(spans, record_of(t), key=t.hex().encode()) for t in keyed[2:]]
        sends += [
            await producer.send(spans, record_of(t), key=None if i % 2 else b"tenant-a") for i, t in enumerate(unkeyed)
        ]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
    kept = {t.hex() for t in keyed + unkeyed if sample_score(t) < rate}
    skipped = sum(1 for t in keyed if sample_score(t) >= rate) - 1  # the record decoded to confirm the keys
    assert 0 < len(kept) < len(keyed)

    metrics = SidecarMetrics()
    group = unique_name("group")
    scorer = create_scorer(id="length", description="answer length").generate_score(lambda ctx: 0.5)
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans, dead_letter_topic=await new_topic("dead")),
        topics=[spans],
        scorers=[ConfiguredScorer(scorer, selection=Selection(sample_rate=rate))],
        sinks=[KafkaScoreSink(kafka_bootstrap, topic=scores)],
        observer=metrics,
        limits=RuntimeLimits(commit_interval_s=0.2),
        consumer_options=FAST_CONSUMER,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    records = await read_topic(kafka_bootstrap, scores, expect=len(kept), timeout_s=30)
    await asyncio.sleep(0.6)  # a checkpoint
    stop.set()
    await asyncio.wait_for(running, 30)

    assert {json.loads(r.value)["traceId"] for r in records} == kept
    registry = metrics.registry
    assert registry.get_sample_value("scoring_sidecar_records_sampled_out_total", {"topic": spans}) == skipped
    consumed = registry.get_sample_value("scoring_sidecar_records_consumed_total", {"topic": spans})
    assert consumed == len(keyed) + len(unkeyed)
    # The skipped records were never decoded: only the others' spans were seen.
    spans_per_record = sum(len(scope.spans) for rs in TEMPLATE.request.resource_spans for scope in rs.scope_spans)
    assert registry.get_sample_value("scoring_sidecar_spans_seen_total") == (consumed - skipped) * spans_per_record
    assert await committed_total(kafka_bootstrap, group, spans, 2) == len(keyed) + len(unkeyed)


def two_traces(first: bytes, second: bytes) -> bytes:
    """One record holding two traces (concatenated protobuf messages merge their repeated fields)."""
    return record_of(first) + record_of(second)


def test_decoding_tells_the_trace_id_of_every_span_a_record_holds() -> None:
    a, b = bytes.fromhex(f"{1:032x}"), bytes.fromhex(f"{2:032x}")
    for value, expected in ((record_of(a), {a}), (two_traces(a, b), {a, b})):
        assert trace_ids_of(decode_traces(value)) == expected


@pytest.mark.parametrize("producer_keys", ["uuid4", "first trace of several"])
async def test_keys_that_are_not_the_records_trace_turn_key_sampling_off_and_every_sampled_in_span_is_scored(
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    producer_keys: str,
) -> None:
    spans = await new_topic("spans", partitions=2)
    scores = await new_topic("scores", partitions=1)
    rate = 0.5
    ids = [bytes.fromhex(f"{30_000 + i:032x}") for i in range(240)]
    if producer_keys == "uuid4":  # 32 hex characters, unrelated to the record's trace
        records = [(record_of(t), uuid.uuid4().hex.encode()) for t in ids]
    else:  # a trace id, keying a record that batches that trace and another
        records = [(two_traces(a, b), a.hex().encode()) for a, b in zip(ids[::2], ids[1::2], strict=True)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(spans, value, key=key) for value, key in records])
    finally:
        await producer.stop()
    kept = {t.hex() for t in ids if sample_score(t) < rate}
    assert 0 < len(kept) < len(ids)

    metrics = SidecarMetrics()
    group = unique_name("group")
    scorer = create_scorer(id="length", description="answer length").generate_score(lambda ctx: 0.5)
    service = scoring_service(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        ingest=IngestConfig(topic=spans, dead_letter_topic=await new_topic("dead")),
        topics=[spans],
        scorers=[ConfiguredScorer(scorer, selection=Selection(sample_rate=rate))],
        sinks=[KafkaScoreSink(kafka_bootstrap, topic=scores)],
        observer=metrics,
        limits=RuntimeLimits(commit_interval_s=0.2),
        consumer_options=FAST_CONSUMER,
    )
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="sidecar.runtime.records"):
        running = asyncio.create_task(service.run(stop))
        scored = await read_topic(kafka_bootstrap, scores, expect=len(kept), timeout_s=15)
        await asyncio.sleep(0.6)  # a checkpoint
        stop.set()
        await asyncio.wait_for(running, 30)

    assert {json.loads(r.value)["traceId"] for r in scored} == kept
    registry = metrics.registry
    assert not registry.get_sample_value("scoring_sidecar_records_sampled_out_total", {"topic": spans})
    assert registry.get_sample_value("scoring_sidecar_records_consumed_total", {"topic": spans}) == len(records)
    assert await committed_total(kafka_bootstrap, group, spans, 2) == len(records)
    warnings = [r.getMessage() for r in caplog.records if "key sampling is off" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "kafka.key_sampling: false" in warnings[0]
