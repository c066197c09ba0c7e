"""The one delivery loop of every sink (``exporters.delivery``): its rules against a scripted transport,
the HTTP batch sink against a scripted destination on loopback, the exporter registry, ``Flushable``.

Each test names a rule and would fail if that rule broke. Phoenix, Kafka and OTLP run these rules against
their real destinations in their own test files.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from aiohttp import web

from exporters.delivery import (
    CONFIRMED,
    DeliveryQueue,
    DeliveryRules,
    Entry,
    HttpAnswer,
    HttpBatchSink,
    Outcome,
    Refused,
    Settle,
    StatusClassifier,
    WaitRule,
    Wording,
    checkpointed,
    failed,
    rejected,
    wait,
)
from exporters.otlp import OtlpTraceSink
from exporters.registry import exporter_kinds
from sidecar.core import Flushable, ScoredRun, Sink, problem_of
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.checkpoint import Checkpoint
from sidecar.runtime.offsets import OffsetTracker, PartitionKey
from sidecar.scoring import create_scorer
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.retry_after import parse_retry_after
from sidecar.settings import ExportersSettings
from tests.support.loopback import serve_on_loopback
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.runs import scored_run_of

log = logging.getLogger("tests.delivery")
Judge = Callable[[list[str]], Outcome]


class Dropped(ServiceObserver):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    def exporter_dropped(self, name: str, reason: str, n: int = 1) -> None:
        self.events.append((name, reason, n))


class ScriptedTransport:
    """A destination in-process: ``judge`` answers each batch (default: confirmed); every batch is recorded.
    While ``gate`` is clear, sends wait (a slow destination); a batch holding a ``blocked`` value waits until
    it is released."""

    def __init__(self, judge: Judge | None = None) -> None:
        self.judge = judge or (lambda values: CONFIRMED)
        self.batches: list[list[str]] = []
        self.times: list[float] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.blocked: set[str] = set()
        self._released = asyncio.Event()

    def release(self, value: str) -> None:
        self.blocked.discard(value)
        self._released.set()

    async def send(self, batch: Sequence[Entry[str]], settle: Settle[str]) -> None:
        await self.gate.wait()
        while any(entry.value in self.blocked for entry in batch):
            self._released.clear()
            await self._released.wait()
        values = [entry.value for entry in batch]
        self.batches.append(values)
        self.times.append(time.monotonic())
        settle(batch, self.judge(values))

    @property
    def sent(self) -> list[str]:
        return [value for batch in self.batches for value in batch]


def queue_of(transport: ScriptedTransport, observer: ServiceObserver | None = None, **rules: Any) -> DeliveryQueue[str]:
    options: dict[str, Any] = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}
    options.update(rules)
    return DeliveryQueue(
        "scripted",
        transport,
        DeliveryRules(**options),
        wording=Wording("items", "stored"),
        describe=lambda value: f"item {value}",
        log=log,
        observer=observer,
    )


@pytest.fixture
async def queues() -> AsyncIterator[list[DeliveryQueue[str]]]:
    made: list[DeliveryQueue[str]] = []
    yield made
    for queue in made:
        await queue.close()


def started(queues: list[DeliveryQueue[str]], queue: DeliveryQueue[str]) -> DeliveryQueue[str]:
    queue.start()
    queues.append(queue)
    return queue


# -- bounds and the watermark ---------------------------------------------------------------------------------


async def test_a_full_queue_makes_put_wait_and_drops_nothing(queues: list[DeliveryQueue[str]]) -> None:
    transport = ScriptedTransport()
    transport.gate.clear()  # the destination does not answer yet
    queue = started(queues, queue_of(transport, max_pending=2))
    await queue.put("a")
    await queue.put("b")
    third = asyncio.create_task(queue.put("c"))
    await asyncio.sleep(0.1)
    assert not third.done() and queue.outstanding == 2  # backpressure: the caller waits, nothing is dropped
    transport.gate.set()
    await asyncio.wait_for(third, 2)
    assert await queue.flush(2) is True
    assert sorted(transport.sent) == ["a", "b", "c"] and queue.dropped == {"rejected": 0}


async def test_a_flush_waits_only_for_what_was_put_before_it(queues: list[DeliveryQueue[str]]) -> None:
    transport = ScriptedTransport()
    transport.blocked = {"during"}  # never confirmed until released
    queue = started(queues, queue_of(transport, batch_size=1))
    await queue.put("before")
    flushing = asyncio.create_task(queue.flush(2))
    await asyncio.sleep(0)
    await queue.put("during")  # belongs to the next flush
    assert await flushing is True
    assert queue.outstanding == 1
    assert await queue.flush(0.2) is False  # now it is this flush's item
    transport.release("during")
    assert await queue.flush(2) is True


# -- what is sent again, what is dropped ------------------------------------------------------------------------


async def test_a_rejected_batch_is_split_and_only_its_culprit_is_dropped(
    queues: list[DeliveryQueue[str]], caplog: pytest.LogCaptureFixture
) -> None:
    transport = ScriptedTransport(lambda values: rejected("HTTP 400: no 'bad' here") if "bad" in values else CONFIRMED)
    observer = Dropped()
    queue = queue_of(transport, observer)
    for value in ("a", "bad", "c"):
        queue.put_nowait(value)  # before start: one batch of three
    started(queues, queue)
    with caplog.at_level(logging.ERROR, logger="tests.delivery"):
        assert await queue.flush(2) is False  # a drop fails the flush that sees it
    assert transport.batches == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]  # each alone, in order
    assert queue.dropped == {"rejected": 1} and observer.events == [("scripted", "rejected", 1)]
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "item bad" in line and "HTTP 400: no 'bad' here" in line
    assert await queue.flush(1) is True  # and the next one commits


class LetterBox:
    """A dead-letter publisher in-process: ``set_aside`` (checkpointed) keeps each letter, ``flush`` answers
    ``acknowledges``; the checkpoint flushes it after the sinks."""

    name = "dead_letters"

    def __init__(self) -> None:
        self.letters: list[tuple[str, str, str]] = []
        self.acknowledges = True

    @checkpointed
    def set_aside(self, value: str, reason: str, detail: str) -> None:
        self.letters.append((value, reason, detail))

    async def start(self) -> None:
        pass

    async def flush(self, timeout_s: float) -> bool:
        return self.acknowledges

    @property
    def outstanding(self) -> int:
        return 0

    async def close(self) -> None:
        pass


class QueueSink:
    """A delivery queue as the checkpoint sees a sink."""

    def __init__(self, queue: DeliveryQueue[str]) -> None:
        self.name = queue.name
        self.queue = queue

    async def start(self) -> None:
        pass

    async def flush(self, timeout_s: float) -> bool:
        return await self.queue.flush(timeout_s)

    @property
    def outstanding(self) -> int:
        return self.queue.outstanding

    async def close(self) -> None:
        pass


def refusing_bad(values: list[str]) -> Outcome:
    return rejected("HTTP 400: no bad here") if any(v.startswith("bad") for v in values) else CONFIRMED


async def test_a_refusal_in_every_interval_set_aside_durably_fails_no_flush(queues: list[DeliveryQueue[str]]) -> None:
    """One item refused for good in each checkpoint interval (one scorer always refused): each drop is handed to a
    checkpointed set-aside (the dead-letter topic), so no flush fails for it and commits go on; every refused item
    reached the set-aside."""
    box = LetterBox()
    queue = started(
        queues,
        DeliveryQueue(
            "scripted",
            ScriptedTransport(refusing_bad),
            DeliveryRules(backoff_base_s=0.01, backoff_max_s=0.05),
            wording=Wording("items", "stored"),
            describe=lambda value: f"item {value}",
            log=log,
            set_aside=box.set_aside,
            set_aside_checkpointed=True,
        ),
    )
    for interval in range(4):
        for value in (f"ok-{interval}", f"bad-{interval}"):
            await queue.wait_for_room()
            queue.put_nowait(value)
        assert await queue.flush(2) is True
    assert [letter[0] for letter in box.letters] == [f"bad-{i}" for i in range(4)]
    assert queue.dropped == {"rejected": 4} and queue.outstanding == 0


async def test_a_drop_fails_the_flush_unless_a_checkpointed_set_aside_took_it(
    queues: list[DeliveryQueue[str]],
) -> None:
    """A plain set-aside (kept nowhere durable), or a checkpointed one that raised: the flush that sees the drop
    fails, as without a set-aside."""
    seen: list[str] = []

    def raising(value: str, reason: str, detail: str) -> None:
        raise RuntimeError("no room")

    for set_aside, marked in ((lambda value, reason, detail: seen.append(value), False), (raising, True)):
        queue = started(
            queues,
            DeliveryQueue(
                "scripted",
                ScriptedTransport(refusing_bad),
                DeliveryRules(backoff_base_s=0.01, backoff_max_s=0.05),
                wording=Wording("items", "stored"),
                describe=lambda value: f"item {value}",
                log=log,
                set_aside=set_aside,
                set_aside_checkpointed=marked,
            ),
        )
        queue.put_nowait("bad")
        assert await queue.flush(2) is False
        assert await queue.flush(1) is True
    assert seen == ["bad"]


async def test_the_checkpoint_commits_past_steady_refusals_once_their_letters_are_acknowledged(
    queues: list[DeliveryQueue[str]],
) -> None:
    """The service's order: the sinks, then the dead-letter publisher. A refusal in every interval commits each
    time; when the publisher cannot confirm the letters, the checkpoint commits nothing."""
    box = LetterBox()
    queue = started(
        queues,
        DeliveryQueue(
            "scripted",
            ScriptedTransport(refusing_bad),
            DeliveryRules(backoff_base_s=0.01, backoff_max_s=0.05),
            wording=Wording("items", "stored"),
            describe=lambda value: f"item {value}",
            log=log,
            set_aside=box.set_aside,
            set_aside_checkpointed=True,
        ),
    )
    partition = PartitionKey("spans", 0)
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    committer = RecordingCommitter()
    checkpoint = Checkpoint(tracker, [QueueSink(queue), box], committer)
    for offset in range(3):
        tracker.track(partition, offset)
        queue.put_nowait(f"bad-{offset}")
        tracker.done(partition, offset)
        assert await checkpoint.commit([partition], timeout_s=2) is True
    assert committer.commits == [{partition: 1}, {partition: 2}, {partition: 3}]
    assert [letter[0] for letter in box.letters] == ["bad-0", "bad-1", "bad-2"]
    box.acknowledges = False
    tracker.track(partition, 3)
    queue.put_nowait("bad-3")
    tracker.done(partition, 3)
    assert await checkpoint.commit([partition], timeout_s=2) is False
    assert len(committer.commits) == 3 and checkpoint.sinks_down() == []


async def test_the_hold_rule_keeps_what_the_destination_rejects(queues: list[DeliveryQueue[str]]) -> None:
    """The switch for rejected items: ``hold`` sends them again at the next flush, whole, and drops nothing."""
    answers = [rejected("HTTP 400"), CONFIRMED]
    transport = ScriptedTransport(lambda values: answers.pop(0))
    queue = queue_of(transport, rejected="hold", retry_between_flushes=False)
    queue.put_nowait("a")
    queue.put_nowait("b")
    started(queues, queue)
    assert await queue.flush(2) is False
    assert queue.outstanding == 2 and queue.dropped == {"rejected": 0}
    assert await queue.flush(2) is True
    assert transport.batches == [["a", "b"], ["a", "b"]]


async def test_failed_items_go_again_after_a_backoff_or_only_at_the_next_flush(
    queues: list[DeliveryQueue[str]],
) -> None:
    answers = [failed("HTTP 503"), CONFIRMED]
    between = ScriptedTransport(lambda values: answers.pop(0))
    queue = started(queues, queue_of(between))
    await queue.put("a")
    for _ in range(100):
        if queue.outstanding == 0:
            break
        await asyncio.sleep(0.01)
    assert between.sent == ["a", "a"] and queue.outstanding == 0  # sent again without a flush

    at_flush = ScriptedTransport(lambda values: failed("broker down"))
    held = started(queues, queue_of(at_flush, retry_between_flushes=False))
    await held.put("b")
    await asyncio.sleep(0.2)
    assert at_flush.sent == ["b"] and held.outstanding == 1 and held.last_error == "broker down"
    at_flush.judge = lambda values: CONFIRMED
    assert await held.flush(2) is True  # the flush sent it again
    assert at_flush.sent == ["b", "b"]


async def test_retry_after_holds_an_item_even_across_a_flush(queues: list[DeliveryQueue[str]]) -> None:
    answers = [failed("HTTP 429", retry_after_s=0.5), CONFIRMED]
    transport = ScriptedTransport(lambda values: answers.pop(0))
    queue = started(queues, queue_of(transport))
    await queue.put("a")
    assert await queue.flush(1) is False  # failed during the flush: returns at once
    assert await queue.flush(0.1) is False  # not brought forward by a flush
    assert transport.sent == ["a"]
    assert await queue.flush(2) is True
    assert transport.times[1] - transport.times[0] >= 0.49


async def test_items_waiting_for_the_destination_are_given_up_at_their_deadline(
    queues: list[DeliveryQueue[str]], caplog: pytest.LogCaptureFixture
) -> None:
    """Items the destination cannot take yet wait (unconfirmed, without failing a flush); their batch-mates
    go again at once; past ``max_wait_s`` they are dropped with the rule's reason."""

    def judge(values: list[str]) -> Outcome:
        late = frozenset(i for i, value in enumerate(values) if value.startswith("late"))
        return wait(late, "no span") if late else CONFIRMED

    observer = Dropped()
    rule = WaitRule(reason="not_there", max_wait_s=0.3, waiting_for="spans", setting="x.wait_s", advice="check it")
    queue = queue_of(ScriptedTransport(judge), observer, wait=rule, drop_reasons=("rejected", "not_there"))
    queue.put_nowait("late-1")
    queue.put_nowait("ok")
    started(queues, queue)
    assert await queue.flush(0.1) is False  # waits for it within its timeout
    assert queue.outstanding == 1 and queue.waiting == 1 and queue.failed_attempts == 0
    with caplog.at_level(logging.ERROR, logger="tests.delivery"):
        assert await queue.flush(2) is False  # given up: a drop fails the flush that sees it
    assert queue.outstanding == 0 and queue.dropped == {"rejected": 0, "not_there": 1}
    assert observer.events == [("scripted", "not_there", 1)]
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "item late-1" in line and "x.wait_s" in line and "check it" in line


async def test_discarding_confirms_at_once_and_ignores_what_comes(queues: list[DeliveryQueue[str]]) -> None:
    transport = ScriptedTransport(lambda values: failed("no logs signal"))
    queue = started(queues, queue_of(transport, retry_between_flushes=False))
    await queue.put("a")
    assert await queue.flush(1) is False
    assert queue.discard() == 1
    await queue.put("b")
    assert await queue.flush(0.1) is True
    assert queue.outstanding == 0 and queue.discarded == 2 and queue.dropped == {"rejected": 0}


async def test_close_gives_what_is_queued_one_last_attempt_and_counts_what_it_abandons(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = ScriptedTransport()
    queue = queue_of(transport, linger_s=10, batch_size=100)  # lingering: nothing would go out for 10 s
    queue.start()
    await queue.put("a")
    await queue.close(drain_s=2)
    assert transport.sent == ["a"] and queue.outstanding == 0

    stuck = ScriptedTransport(lambda values: failed("down"))
    queue = queue_of(stuck, retry_between_flushes=False)
    queue.start()
    await queue.put("b")
    await queue.put("c")
    with caplog.at_level(logging.WARNING, logger="tests.delivery"):
        await queue.close()
    assert queue.outstanding == 0 and await queue.flush(0.1) is True
    assert any("with 2 items not stored" in r.getMessage() for r in caplog.records)


# -- Retry-After, the HTTP batch sink -------------------------------------------------------------------------


def test_retry_after_in_all_its_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "3"}) == 0.25  # the precise one wins
    in_ten = parse_retry_after({"Retry-After": email.utils.formatdate(time.time() + 10, usegmt=True)})
    assert in_ten is not None and 8.5 <= in_ten <= 10.0
    assert parse_retry_after({"Retry-After": email.utils.formatdate(time.time() - 60, usegmt=True)}) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-5"}) == 0.0
    assert parse_retry_after({}) is None and parse_retry_after(None) is None
    # Numbers no one can wait for are as if absent (a NaN deadline would hold an item forever).
    for unreadable in ("nan", "inf", "-inf", "1e999"):
        assert parse_retry_after({"Retry-After": unreadable}) is None, unreadable
        assert parse_retry_after({"retry-after-ms": unreadable}) is None, unreadable
    assert parse_retry_after({"retry-after-ms": "nan", "Retry-After": "2"}) == 2.0


def test_the_status_classifier_asks_the_sinks_hooks_first() -> None:
    def teapot(answer: HttpAnswer, values: Sequence[str]) -> Outcome | None:
        return wait(frozenset({0}), "brewing") if answer.status == 404 and "tea" in answer.text else None

    classify: StatusClassifier[str] = StatusClassifier(
        credentials=lambda answer: f"key refused ({answer.status})",
        no_api=lambda answer: f"no API ({answer.status})",
        hooks=(teapot,),
    )
    assert classify(HttpAnswer(201, ""), ["a"]) == CONFIRMED
    assert classify(HttpAnswer(404, "tea not ready"), ["a"]) == wait(frozenset({0}), "brewing")
    assert classify(HttpAnswer(404, "Not Found"), ["a"]) == Refused("no API (404)")
    assert classify(HttpAnswer(405, ""), ["a"]) == Refused("no API (405)")
    assert classify(HttpAnswer(403, ""), ["a"]) == Refused("key refused (403)")
    for status in (408, 429, 500, 503):
        assert classify(HttpAnswer(status, "later", 2.0), ["a"]) == failed(f"HTTP {status}: later", 2.0)
    for status in (400, 413, 422):
        assert classify(HttpAnswer(status, " why ", None), ["a"]) == rejected(f"HTTP {status}: why")


class ScriptedDestination:
    """An HTTP API on loopback: answers scripted statuses (with headers) first, then 200; records each
    request's time and JSON body."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str]]] = []
        self.requests: list[tuple[float, Any]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> ScriptedDestination:
        app = web.Application()
        app.router.add_post("/v1/items", self._handle)
        self._runner, port = await serve_on_loopback(app)
        self.url = f"http://127.0.0.1:{port}/v1/items"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append((time.monotonic(), await request.json()))
        status, headers = self.script.pop(0) if self.script else (200, {})
        return web.Response(status=status, text=f"scripted {status}", headers=headers)


def score_sink(url: str) -> HttpBatchSink[str]:
    return HttpBatchSink(
        "scripted",
        url,
        item=lambda run: run.score_id if run.outcome == "scored" else None,
        payload=lambda ids: {"ids": ids},
        classify=StatusClassifier(
            credentials=lambda answer: f"the destination refuses the key (HTTP {answer.status})",
            no_api=lambda answer: f"no API at {url} (HTTP {answer.status})",
        ),
        describe=lambda score_id: f"score {score_id}",
        rules=DeliveryRules(backoff_base_s=0.01, backoff_max_s=0.05),
        wording=Wording("scores", "stored"),
        destination="the scripted destination",
        log=log,
        headers={"Authorization": "Bearer secret-token"},
        timeout_s=2,
    )


async def scored_run() -> ScoredRun:
    scorer = create_scorer(id="length").generate_score(lambda ctx: 0.5)
    request = _request()
    return await scored_run_of(scorer, request, agent_label="support")


def _request() -> Any:
    from sidecar.core.runs import ScorerRunRequest, SpanTarget

    return ScorerRunRequest(
        target=SpanTarget(trace_id="4bf92f3577b34da6a3ce929d0e0e4736", span_id="00f067aa0ba902b7"),
        input=AgentRunInput(input_messages=(user_message("Hi?"),)),
        output=(assistant_message("Hello."),),
    )


@pytest.mark.parametrize(
    "retry_after",
    [
        {"Retry-After": "1"},
        {"retry-after-ms": "1000"},
        {"Retry-After": "HTTP-DATE"},  # replaced below: two seconds from now, as an HTTP date
    ],
    ids=["delta-seconds", "retry-after-ms", "http-date"],
)
async def test_the_http_sink_honours_retry_after_in_every_form(retry_after: dict[str, str]) -> None:
    if retry_after.get("Retry-After") == "HTTP-DATE":
        retry_after = {"Retry-After": email.utils.formatdate(time.time() + 2, usegmt=True)}
    destination = await ScriptedDestination().start()
    sink = score_sink(destination.url)
    try:
        destination.script = [(429, retry_after)]
        await sink.start()
        run = await scored_run()
        await sink.submit(run)
        assert await sink.flush(5) is False  # 429: kept
        assert await sink.flush(5) is True  # sent again once the pause is over, not before
        (first, body), (second, _) = destination.requests
        assert body == {"ids": [run.score_id]}
        assert second - first >= 0.9
    finally:
        await sink.close()
        await destination.stop()


async def test_a_refusal_is_the_http_sinks_problem_until_the_destination_takes_items_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    destination = await ScriptedDestination().start()
    sink = score_sink(destination.url)
    try:
        destination.script = [(401, {}), (401, {})]
        await sink.start()
        with caplog.at_level(logging.INFO, logger="tests.delivery"):
            await sink.submit(await scored_run())
            assert await sink.flush(5) is False
            assert await sink.flush(5) is False
            assert problem_of(sink) == "the destination refuses the key (HTTP 401)"
            assert await sink.flush(5) is True
        assert problem_of(sink) is None and sink.outstanding == 0
    finally:
        await sink.close()
        await destination.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "refuses the key" in errors[0]  # once, not per retry
    assert any("the scripted destination takes scores again" in r.getMessage() for r in caplog.records)
    assert all("secret-token" not in r.getMessage() for r in caplog.records)
    assert "secret-token" not in repr(sink)


# -- OTLP: exports never run on the event loop -----------------------------------------------------------------


async def test_otlp_exports_run_off_the_event_loop(otlp_receiver: OtlpReceiver) -> None:
    """The SDK exporter retries a failing receiver with a sleep of 0.8 to 1.2 s inside ``export``: on the
    event loop that would stall every other task that long. The loop keeps ticking meanwhile."""
    sink = OtlpTraceSink(otlp_receiver.endpoint("http/protobuf"), "http/protobuf", timeout_s=3, schedule_delay_s=0)
    await sink.start()
    try:
        run = await scored_run()
        await sink.submit(run)
        assert await sink.flush(10) is True  # warm: the exporter's first use (imports, a session) is behind
        otlp_receiver.fail()  # 503: the exporter backs off and retries within its timeout
        await sink.submit(run)
        flushing = asyncio.create_task(sink.flush(10))
        lags: list[float] = []
        for _ in range(75):
            before = time.monotonic()
            await asyncio.sleep(0.02)
            lags.append(time.monotonic() - before - 0.02)
        assert max(lags) < 0.5, max(lags)
        assert await flushing is False
        otlp_receiver.recover()
        assert await sink.flush(10) is True
    finally:
        await sink.close(timeout_s=2)


# -- the registry and Flushable --------------------------------------------------------------------------------


def test_every_declared_exporter_has_its_settings_field_and_its_block_model() -> None:
    kinds = exporter_kinds()
    assert [kind.name for kind, _ in ExportersSettings().declared()] == [
        "kafka_scores",
        "otlp",
        "phoenix",
        "langfuse",
        "datadog",
        "mlflow",
    ]
    fields = ExportersSettings.model_fields
    assert set(fields) - {"prometheus"} == set(kinds)
    for name, kind in kinds.items():
        assert fields[name].annotation is kind.settings
        assert isinstance(ExportersSettings().block(name), kind.settings)
    assert kinds["phoenix"].drop_reasons == ("rejected", "span_not_found")
    # One rule for what a destination rejects for good: OTLP drops (and sets aside) it too.
    assert kinds["kafka_scores"].drop_reasons == ("rejected",) and kinds["otlp"].drop_reasons == ("rejected",)


class DeadLetterPublisher:
    """A checkpointed publisher that takes no ScoredRun (what a dead-letter or internal-topic publisher is)."""

    name = "dead_letters"

    def __init__(self) -> None:
        self.flushes = 0

    async def start(self) -> None:
        pass

    async def flush(self, timeout_s: float) -> bool:
        self.flushes += 1
        return True

    @property
    def outstanding(self) -> int:
        return 0

    async def close(self) -> None:
        pass


class RecordingCommitter:
    def __init__(self) -> None:
        self.commits: list[dict[PartitionKey, int]] = []

    async def commit(self, offsets: dict[PartitionKey, int]) -> None:
        self.commits.append(dict(offsets))


async def test_a_publisher_that_is_not_a_sink_fits_the_checkpoint() -> None:
    publisher = DeadLetterPublisher()
    assert isinstance(publisher, Flushable) and not isinstance(publisher, Sink)
    assert problem_of(publisher) is None
    partition = PartitionKey("spans", 0)
    tracker: OffsetTracker[PartitionKey] = OffsetTracker()
    tracker.track(partition, 0)
    assert tracker.done(partition, 0)
    committer = RecordingCommitter()
    assert await Checkpoint(tracker, [publisher], committer).commit([partition], timeout_s=1)
    assert publisher.flushes == 1 and committer.commits == [{partition: 1}]
