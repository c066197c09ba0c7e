"""What the HTTP sinks share beyond the delivery loop (exporters.delivery): a rejection in the destination's own
words (``rejected_in_their_words``: Langfuse's message, Datadog's errors) and a dropped item set aside as the
JSON it was posted as (``json_letters``: Phoenix, Langfuse, Datadog)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from exporters.delivery import DeadLetter, HttpAnswer, Outcome, json_letters, rejected, rejected_in_their_words


def _message(body: object) -> str | None:
    return str(body["message"]) if isinstance(body, dict) and "message" in body else None


HOOK = rejected_in_their_words(_message)


def test_a_refusal_is_worded_from_the_json_body_else_its_text() -> None:
    said = HttpAnswer(400, json.dumps({"message": "value must be a number", "trace": "..."}))
    assert HOOK(said, []) == rejected("HTTP 400: value must be a number")
    silent = HttpAnswer(422, '  {"other": 1}\n')
    assert HOOK(silent, []) == rejected('HTTP 422: {"other": 1}')  # the JSON says nothing: its text
    assert HOOK(HttpAnswer(413, "<html>Request Entity Too Large</html>"), []) == rejected(
        "HTTP 413: <html>Request Entity Too Large</html>"
    )


def test_other_answers_are_left_to_the_classifier() -> None:
    for status in (200, 202, 207, 401, 403, 404, 405, 408, 429, 500, 503, 409):
        assert HOOK(HttpAnswer(status, json.dumps({"message": "m"})), []) is None


@given(st.sampled_from([400, 413, 422]), st.text(), st.booleans())
def test_the_words_are_at_most_300_characters_whatever_the_body(status: int, text: str, as_json: bool) -> None:
    body = json.dumps({"message": text}) if as_json else text
    outcome = HOOK(HttpAnswer(status, body), [])
    assert isinstance(outcome, Outcome) and outcome.kind == "rejected"
    prefix = f"HTTP {status}: "
    assert outcome.detail.startswith(prefix) and len(outcome.detail) <= len(prefix) + 300


@dataclass(frozen=True)
class Item:
    score_id: str
    key: bytes
    body: dict[str, object]


def test_a_dropped_item_is_set_aside_as_the_json_that_was_posted() -> None:
    letters: list[tuple[DeadLetter, str, str]] = []

    def posted(item: Item) -> dict[str, object]:
        return item.body

    set_aside = json_letters(
        "langfuse", lambda letter, reason, detail: letters.append((letter, reason, detail)), posted
    )
    set_aside(Item("s-1", b"trace-1", {"value": 0.5, "name": "relevancy"}), "rejected", "HTTP 400: no")
    [(letter, reason, detail)] = letters
    assert (letter.exporter, letter.score_id, letter.key) == ("langfuse", "s-1", b"trace-1")
    assert json.loads(letter.payload) == {"value": 0.5, "name": "relevancy"}
    assert (reason, detail) == ("rejected", "HTTP 400: no")
