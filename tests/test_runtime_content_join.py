"""The content join as a stage (``runtime.stages.content``), with the real claims: a logs record commits only once
the spans it completed are done, a span record only once its stages' work is, whichever arrived first; the bytes
bound hands the oldest on, counted; a revoke drops what the join handed on of the revoked partitions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from sidecar.core import names as n
from sidecar.core.observers import ContentWaitOutcome, LogContentOutcome, ServiceObserver
from sidecar.ingest import decode_traces
from sidecar.ingest.kafka import DeadLetterPublisher
from sidecar.ingest.logs import decode_logs
from sidecar.runtime.agent_labels import AgentLabels
from sidecar.runtime.claims import Claim, Claims
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.join_buffer import JoinLimits
from sidecar.runtime.stages.base import Fetched, FetchedLogs, Stage, StageFacts
from sidecar.runtime.stages.content import ContentJoinStage
from tests.support.otel import otlp_proto, record_spans
from tests.support.waits import eventually
from tests.test_conventions_log_content import SPAN_ID, TRACE_ID, _event, _logs

SPANS = TopicPartition("spans", 0)
LOGS = TopicPartition("logs", 0)
ANSWER = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Paris."}]}])


class Holding(Stage):
    """A stage that holds a part of each record's claim until the test lets it go, and keeps what it was handed."""

    facts = StageFacts(scope="span", unit="span", backfills=True, conversation_items=False, late_spans=False)

    def __init__(self) -> None:
        super().__init__(())
        self.taken: list[Fetched] = []
        self.parts: list[Claim] = []

    def key_sample_rate(self) -> float:
        return 1.0

    def take(self, record: Fetched) -> None:
        record.claim.take()
        self.parts.append(record.claim)
        self.taken.append(record)

    def finish_all(self) -> None:
        for part in self.parts:
            part.release()
        self.parts.clear()


class Counts(ServiceObserver):
    def __init__(self) -> None:
        self.content: dict[str, int] = {}
        self.waits: dict[str, int] = {}

    def log_content(self, outcome: LogContentOutcome, n: int = 1) -> None:
        self.content[outcome] = self.content.get(outcome, 0) + n

    def content_waits(self, outcome: ContentWaitOutcome, n: int = 1) -> None:
        self.waits[outcome] = self.waits.get(outcome, 0) + n


def _span_record() -> Any:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("chat", attributes={n.GEN_AI_OPERATION_NAME: "chat"}):
            pass

    traces = decode_traces(otlp_proto(record_spans(build)))
    span = traces.resource_spans[0].scope_spans[0].spans[0]
    span.trace_id = TRACE_ID.to_bytes(16, "big")
    span.span_id = SPAN_ID.to_bytes(8, "big")
    return traces


def _answer_logs() -> Any:
    return decode_logs(
        _logs(lambda logger: _event(logger, n.EVENT_INFERENCE_DETAILS, attributes={n.GEN_AI_OUTPUT_MESSAGES: ANSWER}))
    )


def _join(
    max_bytes: int = 1 << 20, join_wait_s: float = 30
) -> tuple[ContentJoinStage, Holding, Counts, Claims[TopicPartition]]:
    downstream = Holding()
    counts = Counts()
    dispatcher = RunDispatcher((), counts, AgentLabels(), run_timeout_s=5)
    dead_letters = DeadLetterPublisher("127.0.0.1:1", "dead", encoding="otlp_proto")  # never reached here
    join = ContentJoinStage(
        [downstream], JoinLimits(join_wait_s=join_wait_s, max_bytes=max_bytes), dispatcher=dispatcher, observer=counts,
        dead_letters=dead_letters,
    )  # fmt: skip
    return join, downstream, counts, Claims()


def _hand(join: Stage, claims: Claims[TopicPartition], offset: int, *, logs: bool) -> None:
    claim = claims.open(LOGS if logs else SPANS, offset, 100)
    assert claim is not None
    if logs:
        join.take_logs(FetchedLogs(LOGS, offset, _answer_logs(), claim))
    else:
        join.take(Fetched(SPANS, offset, None, _span_record(), b"raw", claim))
    claim.seal()


def _done(claims: Claims[TopicPartition], tp: TopicPartition) -> int:
    return claims.offsets.position(tp) or 0


def _stages_see_the_answer(downstream: Holding) -> None:
    (handed,) = downstream.taken
    span = handed.traces.resource_spans[0].scope_spans[0].spans[0]
    assert any(kv.key == n.GEN_AI_OUTPUT_MESSAGES for kv in span.attributes)
    assert handed.whole is None  # the bytes as they came no longer hold the span as it is


async def test_either_order_commits_both_records_only_once_the_stages_are_done() -> None:
    for logs_first in (True, False):
        join, downstream, counts, claims = _join()
        first, second = (True, False) if logs_first else (False, True)
        _hand(join, claims, 0, logs=first)
        assert downstream.taken == [] and _done(claims, SPANS) == 0 and _done(claims, LOGS) == 0
        _hand(join, claims, 0, logs=second)
        _stages_see_the_answer(downstream)
        assert _done(claims, SPANS) == 0 and _done(claims, LOGS) == 0  # the stages still work on it
        downstream.finish_all()
        assert _done(claims, SPANS) == 1 and _done(claims, LOGS) == 1
        assert counts.waits == {"joined": 1} and counts.content == {"joined": 1}


async def test_the_bytes_bound_hands_the_oldest_record_on_without_its_content() -> None:
    join, downstream, counts, claims = _join(max_bytes=10)
    _hand(join, claims, 0, logs=False)
    assert len(downstream.taken) == 1 and counts.waits == {"evicted": 1}
    downstream.finish_all()
    assert _done(claims, SPANS) == 1
    _hand(join, claims, 0, logs=True)  # its span went on: the content is let go at once too (over the bound)
    assert counts.content == {"evicted": 1} and _done(claims, LOGS) == 1


async def test_a_revoke_drops_what_was_handed_on_of_its_partitions() -> None:
    join, downstream, _, claims = _join()
    _hand(join, claims, 0, logs=False)
    _hand(join, claims, 0, logs=True)
    (handed,) = downstream.taken
    task = asyncio.get_running_loop().create_future()
    handed.claim.tasks.append(task)  # type: ignore[arg-type]
    claims.revoke({SPANS})
    join.revoked({SPANS})
    assert task.cancelled()
    downstream.finish_all()  # late work of the old assignment completes nothing
    assert _done(claims, SPANS) == 0
    # The logs partition, still owned, is not held back for good by a span its new owner scores.
    assert _done(claims, LOGS) == 1
    _hand(join, claims, 1, logs=False)  # handed on with its content, its work still running when its partition goes
    _hand(join, claims, 1, logs=True)
    claims.revoke({SPANS})
    join.revoked({SPANS})
    assert _done(claims, LOGS) == 2 and len(join.buffer) == 0


def test_the_join_feeds_its_downstream_stages_only() -> None:
    join, downstream, _, _ = _join()
    fed: Sequence[Stage] = join.feeds()
    assert list(fed) == [downstream] and join.name == "content join"


async def test_a_span_whose_content_never_comes_goes_on_as_it_is_after_join_wait_s() -> None:
    join, downstream, counts, claims = _join(join_wait_s=0.2)
    stop = asyncio.Event()
    (ticker,) = [asyncio.create_task(work) for work in join.background(stop)]
    try:
        _hand(join, claims, 0, logs=False)
        assert downstream.taken == []

        def handed_on() -> bool:
            return len(downstream.taken) == 1

        await eventually(handed_on, timeout_s=5)
        span = downstream.taken[0].traces.resource_spans[0].scope_spans[0].spans[0]
        assert not any(kv.key == n.GEN_AI_OUTPUT_MESSAGES for kv in span.attributes)  # as it came
        assert counts.waits == {"timed_out": 1}
        downstream.finish_all()
        assert _done(claims, SPANS) == 1
        _hand(join, claims, 0, logs=True)  # too late: held for its span, then let go
        await eventually(lambda: counts.content.get("expired") == 1, timeout_s=5)
        assert _done(claims, LOGS) == 1
    finally:
        stop.set()
        await ticker
