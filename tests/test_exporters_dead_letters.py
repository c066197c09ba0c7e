"""Score dead letters through the broker (Tansu): what a destination refuses for good is dropped from its sink,
counted, logged and set aside on the score topic's dead-letter topic, checkpointed like a sink."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from exporters.dead_letters import ScoreDeadLetters, letter_record
from exporters.delivery import DeadLetter
from exporters.kafka_scores import KafkaScoresExporterSettings, KafkaScoreSink, score_record
from exporters.registry import KafkaConnection
from sidecar.core import names
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.scoring import create_scorer
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from tests.support.runs import scored_run_of
from tests.support.sidecar_process import read_topic

NewTopic = Callable[..., Awaitable[str]]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def headers_of(record: object) -> dict[str, bytes]:
    return {k: bytes(v) for k, v in getattr(record, "headers", ())}


def test_the_score_topics_dead_letter_topic_is_named_after_it() -> None:
    assert KafkaScoresExporterSettings().score_dead_letter_topic == "agent_scores.dead_letter"
    assert KafkaScoresExporterSettings(topic="scores").score_dead_letter_topic == "scores.dead_letter"
    assert KafkaScoresExporterSettings(dead_letter_topic="held").score_dead_letter_topic == "held"


def test_a_letter_is_the_refused_payload_with_who_why_and_the_destinations_words() -> None:
    letter = DeadLetter("langfuse", "score-1", TRACE_ID.encode(), b'{"id":"score-1"}')
    record = letter_record(letter, "rejected", "HTTP 400: " + "x" * 5000)
    assert (record.key, record.value, record.score_id) == (TRACE_ID.encode(), b'{"id":"score-1"}', "score-1")
    headers = dict(record.headers)
    assert headers[names.DL_EXPORTER] == b"langfuse" and headers[names.DL_REASON] == b"rejected"
    assert headers["score-id"] == b"score-1" and len(headers[names.DL_DETAIL]) == 1000  # the words, clipped
    large = letter_record(DeadLetter("otlp", "s", b"k", b"y" * 2000), "rejected", "HTTP 413", max_value_bytes=1000)
    assert json.loads(large.value) == {"scoreId": "s", "truncated": True, "bytes": 2000}
    assert dict(large.headers)[names.DL_TRUNCATED] == b"2000"


async def test_a_record_the_broker_refuses_is_set_aside_and_checkpointed(
    kafka_bootstrap: str, new_topic: NewTopic
) -> None:
    """A score record over the producer's size limit: the Kafka sink drops it (the flush that sees it fails),
    the dead letters take it (its value as it was), and their flush confirms once the broker has it."""
    scores, dead = await new_topic("scores"), await new_topic("scores-dl")
    scorer = create_scorer(id="length").generate_score(lambda ctx: 0.5).generate_reason(lambda ctx: "r" * 3000)
    request = ScorerRunRequest(
        target=SpanTarget(trace_id=TRACE_ID, span_id="00f067aa0ba902b7"),
        input=AgentRunInput(input_messages=(user_message("Hello?"),)),
        output=(assistant_message("Hi."),),
    )
    run = await scored_run_of(scorer, request, agent_label="support")
    encoded = score_record(run)
    assert encoded is not None
    letters = ScoreDeadLetters(KafkaConnection(kafka_bootstrap, {}), dead)
    sink = KafkaScoreSink(
        kafka_bootstrap, scores, {"max_request_size": len(encoded[1]) // 2}, set_aside=letters.set_aside
    )
    await letters.start()
    await sink.start()
    try:
        await sink.submit(run)
        # The dead letters took the drop: the sink's flush succeeds, and the checkpoint's flush of the letters,
        # after the sinks', confirms it before anything is committed past it.
        assert await sink.flush(10) is True
        assert sink.dropped == 1 and letters.letters == 1 and letters.outstanding == 1
        assert await letters.flush(10) is True and letters.sent == 1
        assert await sink.flush(1) is True
    finally:
        await sink.close()
        await letters.close()
    [record] = await read_topic(kafka_bootstrap, dead, expect=1, timeout_s=10)
    assert record.key == TRACE_ID.encode() and record.value == encoded[1]
    headers = headers_of(record)
    assert headers[names.DL_EXPORTER] == b"kafka_scores" and headers[names.DL_REASON] == b"rejected"
    assert headers["score-id"] == run.score_id.encode() and b"MessageSizeTooLarge" in headers[names.DL_DETAIL]
