"""The join of human feedback with the sidecar's scores (``sidecar.runtime.feedback``), without a broker: records
read and checked where they enter, both arrival orders, redeliveries, expiry and bounds, and a lane rebuilt from its
state-topic writes holding what the old one held (a property over generated event sequences)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporters.kafka_scores import score_record
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.runtime.feedback import (
    Feedback,
    FeedbackError,
    FeedbackLimits,
    Join,
    JoinedScorer,
    ScoreSeen,
    pair_id_of,
    parse_feedback,
    parse_score,
)
from sidecar.scoring import AgentRunInput, LabelledScore, create_scorer
from sidecar.scoring.agent import assistant_message, user_message
from tests.support.runs import scored_run_of

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
BOUNDS = {"max_record_bytes": 4096, "max_comment_chars": 40}
SCORERS = {
    "quality": JoinedScorer("quality"),
    "policy": JoinedScorer("policy", scale=2.0),
    "chat": JoinedScorer("chat", conversations=True),
}


def feedback(**fields: Any) -> Feedback:
    body = {"traceId": TRACE, "spanId": SPAN, "name": "quality", "value": 0.8, **fields}
    return parse_feedback(json.dumps({k: v for k, v in body.items() if v is not None}).encode(), **BOUNDS)


def score(score_id: str = "s1", **fields: Any) -> ScoreSeen:
    base: dict[str, Any] = {
        "score_id": score_id, "scorer_id": "quality", "fingerprint": "f1", "score": 0.9, "label": None,
        "reason": "fine", "judge_model": "openai/gpt-4o-mini", "trace_id": TRACE, "span_id": SPAN, "scope": "span",
    }  # fmt: skip
    return ScoreSeen(**{**base, **fields})


def join(**limits: Any) -> Join:
    return Join(FeedbackLimits(**limits), SCORERS)


# -- records -----------------------------------------------------------------------------------------------------
def test_a_feedback_record_is_read_with_its_id_from_what_it_says() -> None:
    one = feedback(comment="spot on", author="ana", timestamp="2025-01-02T03:04:05Z")
    assert (one.trace_id, one.span_id, one.name, one.value, one.author) == (TRACE, SPAN, "quality", 0.8, "ana")
    assert one.timestamp_ms == 1735787045000
    # The comment aside, the same label is the same feedback (sent twice: one label); its own id wins.
    assert (
        feedback(comment="other words", author="ana", timestamp="2025-01-02T03:04:05Z").feedback_id == one.feedback_id
    )
    assert feedback(value=0.7, author="ana", timestamp="2025-01-02T03:04:05Z").feedback_id != one.feedback_id
    assert feedback(id="label-17").feedback_id == "label-17"
    assert feedback(traceId=TRACE.upper()).trace_id == TRACE
    assert feedback(value=True).value is True and feedback(value="compliant").value == "compliant"
    assert feedback(value=1).value == 1.0 and isinstance(feedback(value=1).value, float)


def test_a_long_comment_is_cut_at_its_bound() -> None:
    cut = feedback(comment="x" * 100).comment
    assert cut is not None and len(cut) == BOUNDS["max_comment_chars"] and cut.endswith("…")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"spanId": SPAN, "name": "q", "value": 1}).encode(), "traceId"),
        (json.dumps({"traceId": "zz" * 16, "name": "q", "value": 1}).encode(), "traceId"),
        (json.dumps({"traceId": "0" * 32, "name": "q", "value": 1}).encode(), "traceId"),
        (json.dumps({"traceId": TRACE, "name": "q", "value": [1]}).encode(), "value"),
        (json.dumps({"traceId": TRACE, "name": "q", "value": 1, "timestamp": "2025-01-02T03:04:05"}).encode(), "zone"),
        (json.dumps({"traceId": TRACE, "name": "q", "value": "x", "comment": "y" * 5000}).encode(), "max_record_bytes"),
        (None, "empty"),
    ],
)
def test_a_bad_feedback_record_says_what_is_wrong(value: bytes | None, problem: str) -> None:
    with pytest.raises(FeedbackError, match=problem):
        parse_feedback(value, **BOUNDS)


async def test_a_score_record_of_the_kafka_exporter_is_read_back() -> None:
    scorer = create_scorer(id="policy", description="d").generate_score(lambda ctx: LabelledScore(0.5, "borderline"))
    request = ScorerRunRequest(
        target=SpanTarget(trace_id=TRACE, span_id=SPAN, agent_name="support"),
        input=AgentRunInput(input_messages=(user_message("refund?"),)),
        output=(assistant_message("yes"),),
    )
    run = await scored_run_of(scorer, request, agent_label="support")
    encoded = score_record(run)
    assert encoded is not None
    seen = parse_score(encoded[1])
    assert seen is not None
    assert (seen.score_id, seen.scorer_id, seen.fingerprint) == (run.score_id, "policy", scorer.fingerprint)
    assert (seen.score, seen.label, seen.trace_id, seen.span_id, seen.scope) == (0.5, "borderline", TRACE, SPAN, "span")
    assert parse_score(b"{}") is None and parse_score(b"junk") is None and parse_score(None) is None


# -- the join ----------------------------------------------------------------------------------------------------
def test_feedback_first_then_its_score_makes_one_pair() -> None:
    j = join()
    held = j.feedback(0, feedback(), now_ms=1)
    assert held.held and not held.pairs and [w[1] for w in held.writes] == [b"f/" + feedback().feedback_id.encode()]
    paired = j.score(0, score(), now_ms=2)
    [pair] = paired.pairs
    assert pair.pair_id == pair_id_of("s1", feedback().feedback_id)
    assert pair.comparison.agreed and pair.comparison.kind == "number"
    keys = [key for _, key, _ in paired.writes]
    assert b"f/" + feedback().feedback_id.encode() in keys and b"s/s1" in keys and b"w/quality" in keys
    assert [value for _, key, value in paired.writes if key.startswith(b"f/")] == [None]  # the feedback's tombstone
    assert j.held_of(0) == (0, 1)  # the score stays for later feedback


def test_a_score_first_then_its_feedback_makes_one_pair_and_a_second_person_another() -> None:
    j = join()
    assert not j.score(0, score(), now_ms=1).pairs
    [first] = j.feedback(0, feedback(author="ana"), now_ms=2).pairs
    [second] = j.feedback(0, feedback(author="bo", value=0.1), now_ms=3).pairs
    assert first.comparison.agreed and not second.comparison.agreed
    stats = dict(j.stats())["quality"]
    assert (stats.pairs, stats.agreed, stats.mae) == (2, 1, pytest.approx((0.1 + 0.8) / 2))


def test_redelivered_feedback_and_scores_change_nothing() -> None:
    j = join()
    j.feedback(0, feedback(), now_ms=1)
    assert j.feedback(0, feedback(), now_ms=2).duplicates == 1  # held already
    assert len(j.score(0, score(), now_ms=3).pairs) == 1
    again = j.feedback(0, feedback(), now_ms=4)  # paired already
    assert again.duplicates == 1 and not again.pairs and not again.writes
    assert j.score(0, score(), now_ms=5).writes == []


def test_subjects_match_as_score_ids_are_derived() -> None:
    j = join()
    # A trace scorer's feedback without a span id meets the trace's score; scale 2 divides both sides.
    j.score(0, score("t1", scorer_id="policy", scope="trace", score=1.6), now_ms=1)
    [pair] = j.feedback(0, feedback(name="policy", spanId=None, value=1.0), now_ms=2).pairs
    assert (pair.comparison.judge, pair.comparison.human, pair.comparison.agreed) == (0.8, 0.5, False)
    # Another span's feedback does not meet it.
    other = feedback(name="policy", spanId="1111111111111111")
    assert j.feedback(0, other, now_ms=3).held
    # A conversation's score meets feedback naming the conversation and any of its window's turns.
    turn = "1" * 32
    chat = score("c1", scorer_id="chat", scope="session", conversation_id="conv-1", turn_trace_ids=(TRACE, turn))
    j.score(1, chat, now_ms=4)
    said = feedback(name="chat", traceId=turn, spanId=None, conversationId="conv-1", value=True)
    [pair] = j.feedback(1, said, now_ms=5).pairs
    assert pair.comparison.kind == "boolean" and pair.partition_key == b"conv-1"


def test_feedback_that_cannot_be_joined_is_rejected_with_its_reason() -> None:
    j = join(names={"helpfulness": "quality"})
    assert j.feedback(0, feedback(name="helpfulness"), now_ms=1).held  # a mapped name
    assert "no scorer's" in j.feedback(0, feedback(name="nope"), now_ms=1).rejected[0][1]
    assert "conversationId" in j.feedback(0, feedback(name="chat"), now_ms=1).rejected[0][1]
    j.score(0, score("s9", span_id="2" * 16), now_ms=1)
    [(_, why)] = j.feedback(0, feedback(spanId="2" * 16, value="great"), now_ms=2).rejected
    assert "has none" in why  # a label, and the judge's score has none


def test_what_waits_too_long_expires_and_unmatched_feedback_is_counted() -> None:
    j = join(hold_s=10)
    j.feedback(0, feedback(traceId="3" * 32), now_ms=0)
    j.score(0, score(), now_ms=5_000)
    assert not j.expire(now_ms=9_999).writes
    gone = j.expire(now_ms=10_000)
    assert gone.unmatched == {"quality": 1} and [v for _, _, v in gone.writes] == [None]
    gone = j.expire(now_ms=15_000)
    assert not gone.unmatched and gone.writes == [(0, b"s/s1", None)]  # a score nobody named: let go
    assert j.held == 0


def test_past_max_held_the_oldest_goes_first() -> None:
    j = join(max_held=2)
    j.feedback(0, feedback(traceId="4" * 32), now_ms=1)
    j.score(0, score("a", trace_id="5" * 32), now_ms=2)
    effects = j.score(0, score("b", trace_id="6" * 32), now_ms=3)
    assert effects.unmatched == {"quality": 1} and j.held == 2


def test_the_window_keeps_the_last_pairs() -> None:
    j = join(window=3)
    for i in range(5):
        j.score(0, score(f"s{i}", trace_id=f"{i + 1:032x}"), now_ms=i)
        j.feedback(0, feedback(traceId=f"{i + 1:032x}", value=0.9 if i < 3 else 0.0), now_ms=10 + i)
    stats = dict(j.stats())["quality"]
    assert (stats.pairs, stats.agreed) == (3, 1)
    assert list(j.stats()) == []  # nothing changed since


# -- a lane rebuilt from its writes --------------------------------------------------------------------------------
traces = st.sampled_from([f"{i:032x}" for i in range(1, 5)])
events = st.lists(
    st.one_of(
        st.tuples(
            st.just("feedback"), traces, st.sampled_from(["quality", "policy"]), st.sampled_from([0.1, 0.9, True])
        ),
        st.tuples(st.just("score"), traces, st.sampled_from(["quality", "policy"]), st.sampled_from([0.2, 0.8])),
        st.tuples(st.just("expire"), traces, st.just(""), st.just(0.0)),
    ),
    max_size=25,
)


def apply(j: Join, event: tuple[str, str, str, Any], now_ms: int) -> Any:
    what, trace, scorer, value = event
    if what == "feedback":
        return j.feedback(0, feedback(traceId=trace, name=scorer, value=value, spanId=None), now_ms)
    if what == "score":
        return j.score(0, score(f"{scorer}-{trace}", trace_id=trace, scorer_id=scorer, score=value), now_ms)
    return j.expire(now_ms)


@settings(max_examples=150, deadline=None)
@given(events, events)
def test_a_lane_restored_from_its_writes_behaves_as_the_lane_that_wrote_them(
    before: list[Any], after: list[Any]
) -> None:
    live = join(hold_s=30, max_held=6, window=4)
    log: list[tuple[bytes, bytes | None]] = []
    for i, event in enumerate(before):
        log.extend((key, value) for _, key, value in apply(live, event, i * 1000).writes)
    rebuilt = join(hold_s=30, max_held=6, window=4)
    rebuilt.open(0)
    for key, value in log:
        assert rebuilt.restore(0, key, value)
    rebuilt.restored()
    assert rebuilt.held_of(0) == live.held_of(0)
    for scorer in ("quality", "policy"):
        assert rebuilt.window(scorer) == live.window(scorer)
    for i, event in enumerate(after, start=len(before)):
        a, b = apply(live, event, i * 1000), apply(rebuilt, event, i * 1000)
        assert [p.pair_id for p in a.pairs] == [p.pair_id for p in b.pairs]
        assert a.unmatched == b.unmatched and a.duplicates == b.duplicates


def test_a_lane_dropped_is_forgotten_and_foreign_state_records_are_skipped() -> None:
    j = join()
    j.feedback(0, feedback(), now_ms=1)
    j.drop(0)
    assert j.held == 0 and j.lanes == frozenset()
    assert not j.restore(1, b"x/unknown", b"{}") and not j.restore(1, b"f/x", b"not json")


def test_records_older_than_hold_s_are_not_held() -> None:
    j = join(hold_s=10)
    assert j.feedback(0, feedback(), now_ms=20_000, at_ms=5_000).unmatched == {"quality": 1}
    assert not j.score(0, score(), now_ms=20_000, at_ms=5_000).writes and j.held == 0
    # An old score still meets the feedback that waits for it (and is kept, with whom it met).
    j.feedback(0, feedback(value=0.1), now_ms=20_000)
    assert len(j.score(0, score(), now_ms=21_000, at_ms=5_000).pairs) == 1 and j.held_of(0) == (0, 1)


def test_the_demos_reviewer_labels_every_other_trace_and_contradicts_one_label_in_four() -> None:
    from sidecar.embedded.feedback import human_labels
    from sidecar.embedded.traffic import TrafficGenerator

    traces = list(TrafficGenerator(seed=9).traces(40))
    labels = [label for n, trace in enumerate(traces) for label in human_labels(trace, n)]
    assert len(labels) == 40  # 20 traces labelled, two labels each
    aligned = [label for label in labels if label["name"] == "prompt-alignment"]
    by_trace = {trace.trace_id: trace for trace in traces}
    contrary = [label for label in aligned if label["value"] != (by_trace[label["traceId"]].quality != "poor")]
    assert len(contrary) == 5
    for label in labels:  # each reads as the feedback stage reads it
        parse_feedback(json.dumps(label).encode(), **BOUNDS)
