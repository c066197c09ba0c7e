"""Mastra's textual-difference code scorer: its test cases, the LCS ratio, word changes."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.scorers.code.js_text import utf16_pair
from sidecar.scorers.code.textual_difference import (
    TextualDifferencePreprocess,
    count_changes,
    create_textual_difference_scorer,
    lcs_ratio,
    textual_difference,
)
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.types import to_json_value


async def run(first: str, second: str) -> TextualDifferencePreprocess:
    """Score as Mastra's tests do: one user message in, one assistant message out."""
    scorer = create_textual_difference_scorer()
    result = await scorer.run(
        input=AgentRunInput(input_messages=(user_message(first),)), output=(assistant_message(second),)
    )
    assert result.not_scorable is None and result.judge is None
    details = TextualDifferencePreprocess.model_validate(result.preprocess_step_result)
    assert result.score == details.ratio
    return details


# Mastra's index.test.ts cases. Its assertions are bounds; the pinned numbers are what its current scorer
# computes (checked against @mastra/evals' code with Node), and ours equal them exactly.
MASTRA_CASES = [
    # input, output, ratio, changes, confidence, lengthDiff
    ("The quick brown fox", "The quick brown fox", 1.0, 0, 1.0, 0.0),
    ("The quick brown fox", "The quick brown cat", 0.8421052631578947, 1, 1.0, 0.0),
    ("The quick brown fox", "The very quick brown fox", 0.8837209302325582, 1, 0.7916666666666666, 0.20833333333333334),
    ("The quick brown fox jumps", "The quick fox jumps", 0.8636363636363636, 1, 0.76, 0.24),
    (
        "The quick brown fox jumps over the lazy dog",
        "The slow black fox runs under the active cat",
        0.5287356321839081,
        6,
        0.9772727272727273,
        0.022727272727272728,
    ),
    (
        "The quick brown fox",
        "Lorem ipsum dolor sit amet",
        0.26666666666666666,
        5,
        0.7307692307692308,
        0.2692307692307692,
    ),
    ("", "", 1.0, 0, 1.0, 0.0),
    ("The quick brown fox", "", 0.0, 4, 0.0, 1.0),
    ("The Quick Brown Fox", "the quick brown fox", 0.7894736842105263, 4, 1.0, 0.0),
    (
        "The   quick\nbrown    fox",
        "The quick brown fox",
        0.8372093023255814,
        1,
        0.7916666666666666,
        0.20833333333333334,
    ),
]


@pytest.mark.parametrize(("first", "second", "ratio", "changes", "confidence", "length_diff"), MASTRA_CASES)
async def test_mastra_cases(
    first: str, second: str, ratio: float, changes: int, confidence: float, length_diff: float
) -> None:
    details = await run(first, second)
    assert (details.ratio, details.changes, details.confidence, details.length_diff) == (
        ratio,
        changes,
        confidence,
        length_diff,
    )


async def test_mastra_bounds_hold() -> None:
    # The assertions of Mastra's tests, as written there.
    assert (await run("The quick brown fox", "The quick brown cat")).ratio > 0.8
    multiple = await run("The quick brown fox jumps over the lazy dog", "The slow black fox runs under the active cat")
    assert 0.4 < multiple.ratio < 0.7 and multiple.changes > 3
    different = await run("The quick brown fox", "Lorem ipsum dolor sit amet")
    assert different.ratio < 0.3 and different.changes > 3


@pytest.mark.parametrize(
    ("first", "second", "ratio", "changes"),
    [
        # More cases checked against Mastra's code with Node: UTF-16 units, whitespace-only changes, word order.
        ("I 😀 you", "I 🙂 you", 0.875, 1),
        ("a\tb", "a b", 0.6666666666666666, 1),
        ("one two three", "three two one", 0.5384615384615384, 0),
    ],
)
def test_more_cases_agree_with_mastra(first: str, second: str, ratio: float, changes: int) -> None:
    details = textual_difference(first, second)
    assert (details.ratio, details.changes) == (ratio, changes)


async def test_messages_are_joined_and_json_runs_read_like_typed_ones() -> None:
    run_input = AgentRunInput(input_messages=(user_message("Hello", id="a"), user_message("world", id="b")))
    output = (assistant_message("Hello", id="c"), assistant_message("there", id="d"))
    scorer = create_textual_difference_scorer()
    typed = await scorer.run(input=run_input, output=output)
    plain = await scorer.run(input=to_json_value(run_input), output=to_json_value(output))
    assert typed.score == plain.score == lcs_ratio("Hello, world", "Hello, there")
    assert to_json_value(typed.preprocess_step_result) == to_json_value(plain.preprocess_step_result)


async def test_a_run_without_input_is_not_scorable() -> None:
    result = await create_textual_difference_scorer().run(input=None, output="some text")
    assert result.score is None
    assert result.not_scorable is not None and result.not_scorable.step == "preprocess"


def test_scorer_identity() -> None:
    scorer = create_textual_difference_scorer()
    assert scorer.id == "textual-difference-scorer"
    assert [name for name, _ in scorer.steps] == ["preprocess", "generate_score"]
    with pytest.raises(ValueError):
        create_textual_difference_scorer({"ignoreCase": True})  # Mastra's scorer has no options


# -- the ratio -------------------------------------------------------------------------------------


def _lcs_table(first: list[int] | str, second: list[int] | str) -> int:
    """Mastra's dynamic programme, row by row: the reference for rapidfuzz's LCS."""
    previous = [0] * (len(second) + 1)
    for a in first:
        current = [0]
        for j, b in enumerate(second, start=1):
            current.append(previous[j - 1] + 1 if a == b else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


texts = st.text(alphabet=st.sampled_from("ab c\t😀é🙂"), max_size=24)


@given(texts, texts)
def test_ratio_is_mastras_lcs_ratio_over_utf16_units(first: str, second: str) -> None:
    a, b = utf16_pair(first, second)
    if first == second:
        expected = 1.0
    elif not a or not b:
        expected = 0.0
    else:
        expected = 2.0 * _lcs_table(a, b) / (len(a) + len(b))
    assert lcs_ratio(first, second) == expected


@given(st.text(max_size=40), st.text(max_size=40))
def test_ratio_is_at_least_difflibs_and_symmetric(first: str, second: str) -> None:
    # difflib's matching blocks form a common subsequence, so the LCS ratio is never below difflib's ratio
    # (compared over the same UTF-16 units); the two coincide on Mastra's own cases but not in general.
    a, b = utf16_pair(first, second)
    assert lcs_ratio(first, second) >= difflib.SequenceMatcher(None, a, b).ratio() - 1e-12
    assert lcs_ratio(first, second) == lcs_ratio(second, first)
    assert 0.0 <= lcs_ratio(first, second) <= 1.0


def test_lcs_and_difflib_differ_where_mastra_changed_algorithm() -> None:
    # Mastra's scorer used the npm difflib port until @mastra/evals 1.x; the ratios part ways here.
    assert lcs_ratio("The quick brown fox", "Lorem ipsum dolor sit amet") == 0.26666666666666666
    assert difflib.SequenceMatcher(None, "The quick brown fox", "Lorem ipsum dolor sit amet").ratio() == (
        0.2222222222222222
    )


@pytest.mark.parametrize(
    ("first", "second", "changes"),
    [
        ("same words", "same words", 0),
        ("a  b", "a b", 1),  # whitespace only: the word counts differ by 0, so 1
        ("a b c", "a\u00a0b c", 1),  # U+00A0 is whitespace to JavaScript
        ("a b\x1cc", "a b c", 2),  # U+001C is not (Python's \s would say it is)
        ("a a b", "a b b", 1),  # each word matched once
        ("x", "", 1),
        ("", "x y", 2),
    ],
)
def test_count_changes(first: str, second: str, changes: int) -> None:
    # Each checked against Mastra's code with Node.
    assert count_changes(first, second) == changes
