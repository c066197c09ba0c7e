"""Where a conversation's score goes: its score record (keyed by the conversation, with its turns' traces and its
window's start), its scorer-run span's attributes (parented to the last turn), and the conversations' metrics."""

from __future__ import annotations

from exporters.kafka_scores import score_record, score_record_json
from exporters.otlp.mapping import run_span_attributes, scored_span_context
from exporters.prometheus import SidecarMetrics
from sidecar.conventions.session_runs import session_run
from sidecar.conventions.session_turns import TurnSummary
from sidecar.core.timestamps import iso_millis
from tests.support.runs import scored_run_of
from tests.support.session_scorers import TurnCountOptions, create_turn_count_scorer

BASE_NS = 1_780_000_000_000_000_000


def summaries(conversation: str, n: int) -> list[TurnSummary]:
    return [
        TurnSummary(
            conversation_id=conversation,
            trace_id=f"{i + 1:032x}",
            span_id=f"{i + 1:016x}",
            start_time_unix_nano=BASE_NS + i * 60_000_000_000,
            end_time_unix_nano=BASE_NS + i * 60_000_000_000 + 2_000_000_000,
            agent_name="support-bot",
            user=f"question {i + 1}",
            answer=f"answer {i + 1}",
            scorers=("turns",),
        )
        for i in range(n)
    ]


async def test_the_score_record_is_keyed_by_the_conversation_and_names_its_turns() -> None:
    request = session_run("conv-7", summaries("conv-7", 3), "idle")
    run = await scored_run_of(create_turn_count_scorer(None, TurnCountOptions()), request, agent_label="support-bot")
    record = score_record(run)
    assert record is not None
    key, _, _ = record
    assert key == b"conv-7"
    body = score_record_json(run)
    assert body is not None
    assert body["conversationId"] == "conv-7"
    assert body["turnTraceIds"] == [f"{i:032x}" for i in (1, 2, 3)]
    assert body["windowStart"] == iso_millis(BASE_NS)
    # Attached to the last turn; named by the first (the score id's subject).
    assert (body["traceId"], body["spanId"]) == (f"{3:032x}", f"{3:016x}")
    assert abs(body["score"] - 0.3) < 1e-9
    assert (
        body["reason"]
        == "turn 1: question 1 -> answer 1 | turn 2: question 2 -> answer 2 | turn 3: question 3 -> answer 3"
    )
    assert body["metadata"]["scope"] == "session"
    assert body["metadata"]["session"] == {"turns": 3, "closeReason": "idle", "complete": True, "truncated": False}


async def test_the_scorer_run_span_hangs_under_the_last_turn_with_the_conversation() -> None:
    request = session_run("conv-8", summaries("conv-8", 2), "max_turns")
    run = await scored_run_of(create_turn_count_scorer(None, TurnCountOptions()), request, agent_label="support-bot")
    parent = scored_span_context(run)
    assert parent is not None and (parent.trace_id, parent.span_id) == (2, 2)
    attributes = run_span_attributes(run)
    assert attributes["gen_ai.conversation.id"] == "conv-8"
    assert attributes["scoring_sidecar.session.turns"] == 2
    assert attributes["scoring_sidecar.session.close_reason"] == "max_turns"
    assert attributes["scoring_sidecar.session.complete"] is False
    assert attributes["scoring_sidecar.run.scope"] == "session"


async def test_the_conversations_metrics() -> None:
    now = BASE_NS + 600_000_000_000
    metrics = SidecarMetrics(clock_ns=lambda: now)
    get = metrics.registry.get_sample_value
    # Every series exists from the start, at 0.
    assert get("scoring_sidecar_session_turns_total", {"outcome": "late"}) == 0
    assert get("scoring_sidecar_sessions_closed_total", {"reason": "evicted"}) == 0
    metrics.session_turns("published", 3)
    metrics.session_turns("duplicate")
    metrics.session_buffer(4, 12_000)
    metrics.session_closed("max_turns", 50)
    metrics.session_restored("turns", 0, 1.5, 1000)
    request = session_run("conv-9", summaries("conv-9", 2), "idle")  # last turn ended at BASE + 62 s
    metrics.run_finished(
        await scored_run_of(create_turn_count_scorer(None, TurnCountOptions()), request, agent_label="support-bot")
    )
    assert get("scoring_sidecar_session_turns_total", {"outcome": "published"}) == 3
    assert get("scoring_sidecar_session_turns_total", {"outcome": "duplicate"}) == 1
    assert get("scoring_sidecar_sessions_open") == 4 and get("scoring_sidecar_session_buffered_bytes") == 12_000
    assert get("scoring_sidecar_sessions_closed_total", {"reason": "max_turns"}) == 1
    assert get("scoring_sidecar_session_turns_per_window_bucket", {"le": "20.0"}) == 0
    assert get("scoring_sidecar_session_turns_per_window_bucket", {"le": "50.0"}) == 1
    assert get("scoring_sidecar_session_restore_seconds_bucket", {"le": "2.5"}) == 1
    # A conversation's score is late by idle_s by design: its delay has its own histogram, not the per-run one.
    assert get("scoring_sidecar_session_score_delay_seconds_count", {"scorer": "turn-count"}) == 1
    assert get("scoring_sidecar_session_score_delay_seconds_bucket", {"scorer": "turn-count", "le": "600.0"}) == 1
    assert get("scoring_sidecar_session_score_delay_seconds_bucket", {"scorer": "turn-count", "le": "300.0"}) == 0
    assert get("scoring_sidecar_score_latency_seconds_count", {"scorer": "turn-count"}) is None
