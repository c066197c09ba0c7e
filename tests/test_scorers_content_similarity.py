"""Mastra's content-similarity scorer and the string-similarity (4.x) Dice coefficient it uses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.scorers.code.content_similarity import (
    ContentSimilarityOptions,
    create_content_similarity_scorer,
)
from sidecar.scorers.string_similarity import compare_two_strings
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.types import to_json_value

text = st.text(max_size=60)
words = st.lists(st.sampled_from(["fox", "Dog", "lazy", "QUICK", "a", "the", "jumps", "é", "42"]), max_size=12)


# -- compareTwoStrings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        # string-similarity 4.x README
        ("healed", "sealed", 0.8),
        (
            "Olive-green table for sale, in extremely good condition.",
            "For sale: table in very good condition, olive green in colour.",
            0.6060606060606061,
        ),
        (
            "Olive-green table for sale, in extremely good condition.",
            "For sale: green Subaru Impreza, 210,000 miles",
            0.2558139534883721,
        ),
        (
            "Olive-green table for sale, in extremely good condition.",
            "Wanted: mountain bike with at least 21 gears.",
            0.1411764705882353,
        ),
        # the package's edge cases
        ("", "", 1.0),
        ("a", "a", 1.0),
        ("a", "b", 0.0),
        ("a", "ab", 0.0),
        ("", "ab", 0.0),
        (" a b ", "ab", 1.0),  # whitespace removed entirely
        ("aaaa", "aa", 2 * 1 / (4 + 2 - 2)),  # bigram multisets: min counts
        ("Healed", "healed", 0.8),  # case-sensitive
    ],
)
def test_compare_two_strings_examples(first: str, second: str, expected: float) -> None:
    assert compare_two_strings(first, second) == expected


@given(text)
def test_identical_is_one(value: str) -> None:
    assert compare_two_strings(value, value) == 1.0


@given(text, text)
def test_symmetric_and_bounded(first: str, second: str) -> None:
    score = compare_two_strings(first, second)
    assert score == compare_two_strings(second, first)
    assert 0.0 <= score <= 1.0


@given(words, words)
def test_whitespace_insensitive(first: list[str], second: list[str]) -> None:
    spaced = compare_two_strings(" \t".join(first), "\n  ".join(second))
    assert spaced == compare_two_strings("".join(first), "".join(second))


# -- the scorer ----------------------------------------------------------------------------------


async def score(run_input: object, output: object, **options: bool) -> float:
    result = await create_content_similarity_scorer(options=options).run(input=run_input, output=output)
    assert result.score is not None
    return result.score


async def test_mastra_documented_examples() -> None:
    query = "The quick brown fox jumps over the lazy dog."
    assert await score([{"role": "user", "content": query}], {"text": "A quick brown fox jumped over a lazy dog."}) == (
        0.7761194029850746
    )
    moderate = "A brown fox quickly leaps across a sleeping dog."
    assert await score([{"role": "user", "content": moderate}], {"text": query}) == 0.40540540540540543


async def test_agent_run_shape_joins_messages_like_mastra() -> None:
    run_input = AgentRunInput(input_messages=(user_message("Hello  World"), user_message("again")))
    output = (assistant_message("hello world"), assistant_message("AGAIN"))
    scorer = create_content_similarity_scorer()
    result = await scorer.run(input=run_input, output=output)
    assert to_json_value(result.preprocess_step_result) == {
        "processedInput": "hello world, again",
        "processedOutput": "hello world, again",
    }
    assert result.score == 1.0
    assert result.judge is None  # a code scorer never calls a judge


async def test_case_insensitive_by_default_and_option_off() -> None:
    assert await score("Hello There", "hello there") == 1.0
    assert await score("Hello There", "hello there", ignore_case=False) == compare_two_strings(
        "Hello There", "hello there"
    )
    assert await score("Hello There", "hello there", ignore_case=False) < 1.0


async def test_whitespace_option_normalises_before_comparing() -> None:
    result = await create_content_similarity_scorer().run(input="  a\t\tb  c ", output="x")
    assert to_json_value(result.preprocess_step_result) == {"processedInput": "a b c", "processedOutput": "x"}
    raw = await create_content_similarity_scorer(options={"ignoreWhitespace": False}).run(input=" A\tb ", output="x")
    assert to_json_value(raw.preprocess_step_result) == {"processedInput": " a\tb ", "processedOutput": "x"}


@given(words, words)
async def test_scorer_case_insensitive_property(first: list[str], second: list[str]) -> None:
    a, b = " ".join(first), " ".join(second)
    assert await score(a.upper(), b) == await score(a.lower(), b.swapcase())


def test_options_accept_both_spellings_and_reject_unknown() -> None:
    assert ContentSimilarityOptions.model_validate({"ignoreCase": False}).ignore_case is False
    assert ContentSimilarityOptions.model_validate({"ignore_whitespace": False}).ignore_whitespace is False
    with pytest.raises(ValueError):
        ContentSimilarityOptions.model_validate({"ignoreKase": False})


def test_scorer_identity() -> None:
    scorer = create_content_similarity_scorer()
    assert scorer.id == "content-similarity"
    assert [name for name, _ in scorer.steps] == ["preprocess", "generate_score"]


agent_texts = st.lists(st.text(max_size=20), max_size=4)


@given(agent_texts, agent_texts, agent_texts)
async def test_typed_agent_runs_read_like_their_json(
    inputs: list[str], remembered: list[str], outputs: list[str]
) -> None:
    # The service hands typed AgentRunInput/AgentMessage values; eval and users may hand their JSON.
    # Both must give the same preprocess result and score.
    run_input = AgentRunInput(
        input_messages=tuple(user_message(t, id=f"in-{i}") for i, t in enumerate(inputs)),
        remembered_messages=tuple(user_message(t, id=f"old-{i}") for i, t in enumerate(remembered)),
    )
    output = tuple(assistant_message(t, id=f"out-{i}") for i, t in enumerate(outputs))
    scorer = create_content_similarity_scorer()
    typed = await scorer.run(input=run_input, output=output)
    plain = await scorer.run(input=to_json_value(run_input), output=to_json_value(output))
    assert to_json_value(typed.preprocess_step_result) == to_json_value(plain.preprocess_step_result)
    assert typed.score == plain.score
