"""Kafka score records through a real Kafka-compatible broker (Tansu), from real scorer runs."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaConnectionError
from aiokafka.partitioner import DefaultPartitioner
from pydantic import BaseModel

from exporters.kafka_scores import KafkaScoreSink, score_record, score_record_json
from sidecar import __version__
from sidecar.core import ScoredRun, Sink, score_id_for
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.embedded.broker import EmbeddedBroker, create_topics
from sidecar.scoring import Scorer, create_scorer, not_scorable
from sidecar.scoring.agent import AgentRunInput, SystemMessage, assistant_message, user_message
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY, JudgeModelFactory
from tests.support.runs import scored_run_of
from tests.support.sidecar_process import read_topic

NewTopic = Callable[..., Awaitable[str]]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
FINISHED_NS = 1_700_000_000_123_456_789  # 2023-11-14T22:13:20.123456789Z
FAST_CONSUMER = {"fetch_max_wait_ms": 50}
QUESTION = "How do I reset my password?"
ANSWER = "Open Settings, choose Security, then Reset password."
ANALYSIS = {"addressed": True, "confidence": 0.75}
REASON = "The score is 0.75 because the answer addresses the question."


@pytest.fixture
def transport() -> str:
    """One judge client path is enough here (the judge's own tests cover both)."""
    return "http"


class Analysis(BaseModel):
    addressed: bool
    confidence: float


def judged_scorer(make_judge_model: JudgeModelFactory) -> Scorer:
    """Every step kind: a function preprocess, a judged analyze, a function score, a judged reason."""
    return (
        create_scorer(
            id="helpfulness",
            name="Helpfulness",
            judge={"model": make_judge_model(), "instructions": "You are a strict judge."},
        )
        .preprocess(lambda ctx: {"question": ctx.run.input.input_messages[0].text})
        .analyze(
            description="is the question addressed",
            create_prompt=lambda ctx: (
                f"Question: {ctx.results.preprocess_step_result['question']}\nAnswer: {ctx.run.output[0].text}"
            ),
            output_schema=Analysis,
        )
        .generate_score(lambda ctx: ctx.results.analyze_step_result.confidence)
        .generate_reason(description="explain", create_prompt=lambda ctx: f"Explain the score {ctx.score}.")
    )


def make_request(trace_id: str = TRACE_ID, span_id: str = SPAN_ID) -> ScorerRunRequest:
    target = SpanTarget(
        trace_id=trace_id,
        span_id=span_id,
        span_name="invoke_agent support",
        convention="genai",
        agent_name="support",
        agent_id="agent-7",
        version="2.3.0",
        service_name="shop",
        model="gpt-4o",
        end_time_unix_nano=FINISHED_NS - 5_000_000_000,
    )
    return ScorerRunRequest(
        target=target,
        input=AgentRunInput(
            input_messages=(user_message(QUESTION),), system_messages=(SystemMessage(content="Be brief."),)
        ),
        output=(assistant_message(ANSWER),),
    )


async def run_scorer(scorer: Scorer, request: ScorerRunRequest) -> ScoredRun:
    """Run the scorer as the runtime does and wrap the outcome."""
    return await scored_run_of(scorer, request, agent_label="support", finished_unix_nano=FINISHED_NS)


async def scored_run(judge_server: JudgeServer, make_judge_model: JudgeModelFactory, **ids: str) -> ScoredRun:
    judge_server.script(Reply.json(ANALYSIS), Reply(content=REASON))
    run = await run_scorer(judged_scorer(make_judge_model), make_request(**ids))
    assert run.outcome == "scored", run.error
    return run


async def read_all(bootstrap: str, topic: str, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Exactly ``count`` records: waits for them, then checks the partition holds no more."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **FAST_CONSUMER)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning()
        records: list[ConsumerRecord[bytes, bytes]] = []
        for _ in range(100):
            if len(records) >= count:
                break
            for batch in (await consumer.getmany(timeout_ms=100)).values():
                records.extend(batch)
        assert len(records) == count, f"{len(records)} records, expected {count}"
        assert consumer.highwater(tp) == count  # and nothing more was produced
        return records
    finally:
        await consumer.stop()


async def test_scored_run_record_through_the_broker(
    kafka_bootstrap: str, new_topic: NewTopic, judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    topic = await new_topic("scores")
    run = await scored_run(judge_server, make_judge_model)
    assert run.result is not None and run.result.judge is not None
    sink = KafkaScoreSink(kafka_bootstrap, topic)
    assert isinstance(sink, Sink) and sink.name == "kafka_scores"
    await sink.start()
    try:
        await sink.submit(run)
        assert await sink.flush(5.0)
        assert sink.sent == 1 and sink.outstanding == 0
    finally:
        await sink.close()

    [record] = await read_all(kafka_bootstrap, topic, 1)
    assert record.key == TRACE_ID.encode()
    assert dict(record.headers) == {"content-type": b"application/json", "score-id": run.score_id.encode()}
    body = json.loads(record.value)
    result_json = json.loads(run.result.to_json())
    fingerprint = judged_scorer(make_judge_model).fingerprint
    expected_score_id = score_id_for(fingerprint, TRACE_ID, SPAN_ID)
    assert body == {
        "scoreId": expected_score_id,
        "timestamp": "2023-11-14T22:13:20.123Z",
        "traceId": TRACE_ID,
        "spanId": SPAN_ID,
        "scorerId": "helpfulness",
        "scorerName": "Helpfulness",
        "scoreSource": "live",
        "score": 0.75,
        "reason": REASON,
        "scoreTraceId": TRACE_ID,
        "runId": run.result.run_id,
        "preprocessStepResult": {"question": QUESTION},
        "analyzeStepResult": ANALYSIS,
        "analyzePrompt": f"Question: {QUESTION}\nAnswer: {ANSWER}",
        "generateReasonPrompt": "Explain the score 0.75.",
        # The judge record exactly as the result serialises it (camelCase, no telemetry fields).
        "judge": result_json["judge"],
        "metadata": {
            "agentName": "support",
            "agentId": "agent-7",
            "agentVersion": "2.3.0",
            "serviceName": "shop",
            "model": "gpt-4o",
            "spanName": "invoke_agent support",
            "spanKind": "agent",
            "convention": "genai",
            "scorerFingerprint": fingerprint,
            "sidecarVersion": __version__,
            "scope": "span",
        },
    }
    # The judge record in detail: both judged steps, with what the provider reported.
    analyze = body["judge"]["analyze"]["executions"][0]
    assert analyze["status"] == "success" and analyze["output"] == ANALYSIS
    assert analyze["usage"] == {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
    assert analyze["judgeModelId"] == "gpt-4o-mini" and analyze["judgeProvider"] == "openai"
    assert analyze["attemptCount"] == 1 and analyze["modelCallCount"] == 1
    assert {"calls", "step", "estimatedCostUsd"}.isdisjoint(analyze)
    assert body["judge"]["generateReason"]["executions"][0]["output"] == REASON
    # The traced conversation is not part of the record, and no secret is anywhere in it.
    assert {"input", "output", "groundTruth", "requestContext", "notScorable"}.isdisjoint(body)
    assert "Be brief." not in record.value.decode() and SECRET_KEY not in record.value.decode()


async def test_redelivered_run_has_the_same_score_id(
    kafka_bootstrap: str, new_topic: NewTopic, judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    topic = await new_topic("scores-dup")
    first = await scored_run(judge_server, make_judge_model)
    # The record is redelivered after a crash: the span is scored again (a new run id, same score id).
    again = await scored_run(judge_server, make_judge_model)
    other_span = await scored_run(judge_server, make_judge_model, span_id="1111111111111111")
    assert first.result is not None and again.result is not None
    assert first.result.run_id != again.result.run_id
    sink = KafkaScoreSink(kafka_bootstrap, topic, compression_type="gzip")
    await sink.start()
    try:
        for run in (first, again, first, other_span):
            await sink.submit(run)
        assert await sink.flush(5.0)
    finally:
        await sink.close()

    records = await read_all(kafka_bootstrap, topic, 4)
    bodies = [json.loads(r.value) for r in records]
    assert [b["runId"] for b in bodies] == [
        first.result.run_id,
        again.result.run_id,
        first.result.run_id,
        bodies[3]["runId"],
    ]
    deduplicated = {b["scoreId"]: b for b in bodies}  # what a consumer keyed by score id keeps
    assert list(deduplicated) == [first.score_id, other_span.score_id]
    assert first.score_id == again.score_id != other_span.score_id
    assert [dict(r.headers)["score-id"].decode() for r in records] == [b["scoreId"] for b in bodies]
    assert records[0].value == records[2].value  # the same run encodes to the same bytes


async def test_failed_and_not_scorable_runs_produce_nothing(
    kafka_bootstrap: str, new_topic: NewTopic, judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    topic = await new_topic("scores-outcomes")
    # Failed after the score was computed: generate_reason's judge call is refused.
    judge_server.script(Reply.json(ANALYSIS), Reply.error(400, "content policy"))
    failed = await run_scorer(judged_scorer(make_judge_model), make_request(span_id="2222222222222222"))
    assert failed.outcome == "failed" and failed.result is not None and failed.result.score == 0.75
    # Not scorable: preprocess says so, no judge call.
    skipping = (
        create_scorer(id="needs-tools", judge=make_judge_model())
        .preprocess(lambda ctx: not_scorable("no tool calls"))
        .generate_score(lambda ctx: 1.0)
    )
    unscorable = await run_scorer(skipping, make_request(span_id="3333333333333333"))
    assert unscorable.outcome == "not_scorable"
    scored = await scored_run(judge_server, make_judge_model)
    assert score_record(failed) is None and score_record(unscorable) is None
    assert score_record_json(failed) is None

    sink = KafkaScoreSink(kafka_bootstrap, topic)
    await sink.start()
    try:
        for run in (failed, unscorable, scored):
            await sink.submit(run)
        assert await sink.flush(5.0)
        assert sink.ignored == {"failed": 1, "not_scorable": 1}
        assert sink.sent == 1
    finally:
        await sink.close()
    [record] = await read_all(kafka_bootstrap, topic, 1)
    assert json.loads(record.value)["scoreId"] == scored.score_id


async def test_score_record_is_the_reusable_format() -> None:
    scorer = create_scorer(id="length").generate_score(lambda ctx: len(ctx.run.output[0].text) / 100)
    run = await run_scorer(scorer, make_request())
    encoded = score_record(run)
    assert encoded is not None
    key, value, headers = encoded
    assert key == TRACE_ID.encode()
    assert headers == [("content-type", b"application/json"), ("score-id", run.score_id.encode())]
    body = json.loads(value)
    assert body == score_record_json(run)
    # No generate_reason step: reason is null; absent steps leave no keys; no judge without prompt steps.
    assert body["reason"] is None and body["score"] == pytest.approx(len(ANSWER) / 100)
    assert {"preprocessStepResult", "analyzeStepResult", "judge", "analyzePrompt"}.isdisjoint(body)
    assert list(body)[:11] == [
        "scoreId",
        "timestamp",
        "traceId",
        "spanId",
        "scorerId",
        "scorerName",
        "scoreSource",
        "score",
        "reason",
        "scoreTraceId",
        "runId",
    ]
    assert value == score_record(run)[1]  # type: ignore[index]  # deterministic bytes


class BrokerOutage:
    """A private broker and a sink on it; the broker can go down and come back (same port, empty storage)."""

    def __init__(self, topic: str, **sink_options: Any) -> None:
        self.topic = topic
        self._sink_options = sink_options
        self._brokers: list[EmbeddedBroker] = []
        self.sink: KafkaScoreSink | None = None

    async def __aenter__(self) -> KafkaScoreSink:
        broker = await self._start(EmbeddedBroker())
        options = {"request_timeout_ms": 500, "retry_backoff_ms": 50}
        self.sink = KafkaScoreSink(broker.bootstrap_servers, self.topic, options, **self._sink_options)
        await self.sink.start()
        return self.sink

    async def _start(self, broker: EmbeddedBroker) -> EmbeddedBroker:
        self._brokers.append(await broker.start_async())
        await create_topics(broker.bootstrap_servers, {self.topic: 1})
        return broker

    async def go_down(self) -> None:
        await self._brokers[-1].stop_async(timeout_s=0.2)  # Tansu lingers on SIGTERM while clients are connected

    async def come_back(self) -> str:
        """The broker on its old port, empty (memory storage); returns its bootstrap servers."""
        return (await self._start(EmbeddedBroker(port=self._brokers[0].port))).bootstrap_servers

    async def __aexit__(self, *exc: object) -> None:
        if self.sink is not None:
            await self.sink.close(timeout_s=1.0)
        for broker in self._brokers:
            await broker.stop_async(timeout_s=0.2)


async def test_flush_is_false_while_the_broker_is_down_then_resends(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    run = await scored_run(judge_server, make_judge_model)
    outage = BrokerOutage("scores-outage")
    async with outage as sink:
        await sink.submit(run)
        assert await sink.flush(5.0)  # metadata known, one record acknowledged
        await outage.go_down()

        started = time.monotonic()
        await sink.submit(run)  # never raises, never waits for the broker
        assert time.monotonic() - started < 0.1
        assert not await sink.flush(1.0)  # not acknowledged: the runtime must not commit
        assert sink.outstanding == 1
        assert not await sink.flush(1.0)  # still not: the record is kept, never forgotten
        assert sink.outstanding == 1 and sink.failed_attempts >= 1 and sink.dropped == 0

        # The broker comes back (empty: memory storage); the next flush sends the kept record.
        bootstrap = await outage.come_back()
        ok = False
        for _ in range(10):
            if ok := await sink.flush(1.0):
                break
        assert ok and sink.outstanding == 0
        [record] = await read_all(bootstrap, outage.topic, 1)
        assert json.loads(record.value)["scoreId"] == run.score_id


async def test_record_too_large_is_dropped_and_reported_once(
    kafka_bootstrap: str, new_topic: NewTopic, judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    topic = await new_topic("scores-large")
    run = await scored_run(judge_server, make_judge_model)
    encoded = score_record(run)
    assert encoded is not None
    sink = KafkaScoreSink(kafka_bootstrap, topic, {"max_request_size": len(encoded[1]) // 2})
    await sink.start()
    try:
        await sink.submit(run)
        assert not await sink.flush(5.0)  # the broker can never take it: reported...
        assert sink.dropped == 1 and sink.outstanding == 0
        assert await sink.flush(5.0)  # ...once, and not retried forever
    finally:
        await sink.close()


async def test_lifecycle_edges(kafka_bootstrap: str) -> None:
    sink = KafkaScoreSink(kafka_bootstrap, "never-used")
    assert await sink.flush(0.1)  # nothing submitted, not started
    await sink.close()  # closing an unstarted sink is fine
    await sink.start()
    await sink.close(timeout_s=1.0)
    await sink.close(timeout_s=1.0)  # and closing twice
    assert await sink.flush(0.1)
    with pytest.raises(KafkaConnectionError):
        await KafkaScoreSink("127.0.0.1:1", "t", {"request_timeout_ms": 500}).start()


async def test_close_with_the_broker_down_is_bounded(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    run = await scored_run(judge_server, make_judge_model)
    outage = BrokerOutage("scores-close")
    async with outage as sink:
        await sink.submit(run)
        assert await sink.flush(5.0)
        await outage.go_down()
        await sink.submit(run)
        await sink.submit(run)
        started = time.monotonic()
        await sink.close(timeout_s=0.3)  # abandons the two records (nothing was committed past them)
        assert time.monotonic() - started < 1.0
        assert sink.outstanding == 0
        assert await sink.flush(0.1)  # closed: nothing left to wait for


async def test_records_submitted_during_a_flush_do_not_fail_it(
    kafka_bootstrap: str, new_topic: NewTopic, judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    # Under steady traffic a checkpoint's flush always overlaps new submissions: those belong to the next
    # checkpoint, and counting them here would put every commit off while traffic flows.
    topic = await new_topic("scores-overlap")
    runs = [await scored_run(judge_server, make_judge_model, span_id=f"{i:016x}") for i in range(1, 41)]
    sink = KafkaScoreSink(kafka_bootstrap, topic)
    await sink.start()
    try:
        await sink.submit(runs[0])
        flushing = asyncio.create_task(sink.flush(5.0))
        await asyncio.sleep(0)  # the flush has started waiting for the first record
        for run in runs[1:]:
            await sink.submit(run)
        assert await flushing
        assert await sink.flush(5.0)
    finally:
        await sink.close()
    assert len(await read_all(kafka_bootstrap, topic, len(runs))) == len(runs)


@pytest.mark.slow
async def test_submit_waits_while_max_pending_records_are_unacknowledged(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    # While the broker is down the sink holds at most max_pending records: the run that would exceed it
    # waits in submit (and stays in flight, so the runtime pauses its consumer) instead of memory growing.
    runs = [await scored_run(judge_server, make_judge_model, span_id=f"{i:016x}") for i in range(1, 4)]
    outage = BrokerOutage("scores-bounded", max_pending=2)
    async with outage as sink:
        await sink.submit(runs[0])
        assert await sink.flush(5.0)
        await outage.go_down()

        await sink.submit(runs[0])
        await sink.submit(runs[1])
        third = asyncio.create_task(sink.submit(runs[2]))
        await asyncio.sleep(0.5)
        assert not third.done() and sink.outstanding == 2

        bootstrap = await outage.come_back()
        for _ in range(10):
            await sink.flush(1.0)
            if third.done() and sink.outstanding == 0:
                break
        await asyncio.wait_for(third, 5.0)
        assert await sink.flush(5.0) and sink.outstanding == 0
        ids = {json.loads(r.value)["scoreId"] for r in await read_all(bootstrap, outage.topic, 3)}
        assert ids == {run.score_id for run in runs}


async def test_records_fill_batches_across_partitions_and_each_lands_once(
    kafka_bootstrap: str, new_topic: NewTopic, judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    # Batches smaller than one record (each record then goes alone) and several partitions: every record
    # lands once, in the partition Kafka's default partitioner picks for its key (the trace id).
    topic = await new_topic("scores-batched", partitions=3)
    runs = [
        await scored_run(judge_server, make_judge_model, trace_id=f"{i:032x}", span_id=f"{i:016x}")
        for i in range(1, 13)
    ]
    sink = KafkaScoreSink(kafka_bootstrap, topic, max_batch_size=256)
    await sink.start()
    try:
        for run in runs:
            await sink.submit(run)
        assert await sink.flush(10.0) and sink.sent == len(runs) and sink.outstanding == 0
    finally:
        await sink.close()
    records = await read_topic(kafka_bootstrap, topic, expect=len(runs), timeout_s=10)
    assert sorted(json.loads(r.value)["scoreId"] for r in records) == sorted(run.score_id for run in runs)
    reference = DefaultPartitioner()
    assert all(r.partition == reference(r.key, [0, 1, 2], [0, 1, 2]) for r in records)
    assert len({r.partition for r in records}) > 1
