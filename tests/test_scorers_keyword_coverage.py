"""Mastra's keyword-coverage code scorer and the port of the npm ``keyword-extractor`` package."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.scorers.code.keyword_coverage import create_keyword_coverage_scorer
from sidecar.scorers.code.keywords import ENGLISH_STOPWORDS, extract_keywords
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.types import to_json_value


async def coverage(first: str, second: str) -> tuple[float, int, int]:
    """Score as Mastra's tests do; (score, totalKeywordsLength, matchedKeywordsLength)."""
    scorer = create_keyword_coverage_scorer()
    result = await scorer.run(
        input=AgentRunInput(input_messages=(user_message(first),)), output=(assistant_message(second),)
    )
    assert result.score is not None and result.judge is None
    counts = to_json_value(result.analyze_step_result)
    return result.score, counts["totalKeywordsLength"], counts["matchedKeywordsLength"]


# Mastra's index.test.ts cases with what Mastra computes (keyword-extractor 0.0.28, checked with Node):
# ours are equal.
MASTRA_CASES = [
    ("The quick brown fox jumps over the lazy dog", "The quick brown fox jumps over the lazy dog", 1.0, 6, 6),
    ("The quick brown fox jumps over the lazy dog", "A quick brown fox runs past a sleeping cat", 0.5, 6, 3),
    ("The quick brown fox", "A quick brown fox", 1.0, 3, 3),  # "the" and "a" are stop words
    ("The Quick Brown Fox", "the quick brown fox", 1.0, 3, 3),
    ("", "", 1.0, 0, 0),
    ("The quick brown fox", "", 0.0, 3, 0),
    ("The 123 quick 456 brown fox", "The quick brown fox", 1.0, 3, 3),  # numbers are dropped
    ("The quick-brown fox!", "The quick brown fox", 0.5, 2, 1),  # "quick-brown" is one keyword
    ("The quick brown fox jumps over the lazy dog", "Lorem ipsum dolor sit amet", 0.0, 6, 0),
    ("quick brown fox", "quick brown fox", 1.0, 3, 3),
]


@pytest.mark.parametrize(("first", "second", "expected", "total", "matched"), MASTRA_CASES)
async def test_mastra_cases(first: str, second: str, expected: float, total: int, matched: int) -> None:
    assert await coverage(first, second) == (expected, total, matched)


async def test_input_without_keywords_scores_1_like_mastra() -> None:
    assert await coverage("Is it the one?", "Nothing alike") == (1.0, 0, 0)


async def test_keywords_are_kept_in_the_preprocess_result() -> None:
    scorer = create_keyword_coverage_scorer()
    run_input = AgentRunInput(input_messages=(user_message("Quick fox", id="a"), user_message("lazy dog", id="b")))
    typed = await scorer.run(input=run_input, output=(assistant_message("the lazy fox"),))
    assert to_json_value(typed.preprocess_step_result) == {
        "referenceKeywords": ["quick", "fox", "lazy", "dog"],
        "responseKeywords": ["lazy", "fox"],
    }
    plain = await scorer.run(input=to_json_value(run_input), output=to_json_value((assistant_message("the lazy fox"),)))
    assert typed.score == plain.score == 0.5


async def test_a_run_without_input_is_not_scorable() -> None:
    # Mastra reads a missing input as empty text and scores 1; a run without input is not scorable here.
    result = await create_keyword_coverage_scorer().run(input=None, output="the quick fox")
    assert result.score is None and result.not_scorable is not None


def test_scorer_identity() -> None:
    scorer = create_keyword_coverage_scorer()
    assert scorer.id == "keyword-coverage-scorer"
    assert [name for name, _ in scorer.steps] == ["preprocess", "analyze", "generate_score"]
    with pytest.raises(ValueError):
        create_keyword_coverage_scorer({"language": "english"})  # Mastra's scorer has no options


# -- the keyword-extractor package -----------------------------------------------------------------


def test_stop_list_is_smart() -> None:
    assert len(ENGLISH_STOPWORDS) == 570  # keyword-extractor 0.0.28's en.js: 571 entries, one repeated
    assert {"the", "a's", "ain't", "yourselves", "zero", "hello"} <= ENGLISH_STOPWORDS
    assert not {"quick", "fox", "data"} & ENGLISH_STOPWORDS


@pytest.mark.parametrize(
    ("text", "keywords"),
    [
        # Checked against keyword-extractor 0.0.28 with Node.
        (
            'Visit <b>https://Example.com/Path</b> for "details", (quickly)!',
            ["visit", "https://Example.com/Path", "details", "quickly"],
        ),
        ("'quoted' ‘curly’ words # @ 2024 3rd", ["quoted", "curly", "words", "3rd"]),
        ("Fox fox FOX", ["fox"]),
        # A straight quote goes only at a word's ends (with and without a URL in the text: two code paths).
        ("'alpha' beta\u3000'gamma' ''' x'y", ["alpha", "beta", "gamma", "'", "x'y"]),
        ("see https://A.io/X 'quoted' ''' x'y", ["https://A.io/X", "quoted", "'", "x'y"]),
        ("", []),
        ("<p></p>", []),
    ],
)
def test_extract_agrees_with_the_package(text: str, keywords: list[str]) -> None:
    assert extract_keywords(text) == keywords


@given(st.lists(st.sampled_from(["fox", "Dog", "the", "a", "42", "quick-brown", "it's", "“x”", " ", "\t"])))
def test_keywords_are_lower_case_unique_and_not_stop_words(words: list[str]) -> None:
    keywords = extract_keywords(" ".join(words))
    assert len(keywords) == len(set(keywords))
    assert all(k == k.lower() and k not in ENGLISH_STOPWORDS for k in keywords)
