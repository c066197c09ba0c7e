"""Mastra's tone code scorer and the port of the npm ``sentiment`` package (AFINN-165 with emoji)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.scorers.code.sentiment import NEGATORS, analyze, sentiment_labels
from sidecar.scorers.code.tone import ToneOptions, create_tone_scorer, tone_consistency, tone_stability
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.types import to_json_value


async def score(response: str, reference: str | None = None) -> tuple[float, dict[str, float]]:
    """Score as Mastra's tests do: one assistant message out (tone reads no input)."""
    scorer = create_tone_scorer({"referenceTone": reference} if reference is not None else None)
    result = await scorer.run(input=AgentRunInput(), output=(assistant_message(response),))
    assert result.score is not None and result.judge is None
    details = to_json_value(result.preprocess_step_result)
    assert details["score"] == result.score
    return result.score, details


# Mastra's index.test.ts cases. Its assertions are bounds; the pinned numbers are what Mastra computes
# with sentiment 5.0.2 (checked with Node), and ours equal them to the last bit.
CONSISTENCY_CASES = [
    # response, reference, score, responseSentiment, referenceSentiment, difference
    (
        "I love this amazing product!",
        "This product is wonderful and fantastic!",
        0.9333333333333333,
        1.4,
        1.3333333333333333,
        0.06666666666666665,
    ),
    ("This is terrible and disappointing.", "This is excellent and amazing!", 0.0, -1.0, 1.4, 2.4),
    ("The sky is blue. The grass is green.", "Trees are tall. Water is wet.", 1.0, 0.0, 0.0, 0.0),
    (
        "The product has great features but some annoying bugs.",
        "While the interface is beautiful, performance is poor.",
        0.9861111111111112,
        0.1111111111111111,
        0.125,
        0.013888888888888895,
    ),
    # Not one of Mastra's cases (an emoji label); checked with Node like the others.
    ("We're happy to help 😀", "Thank you, glad to assist!", 0.6000000000000001, 1.4, 1.0, 0.3999999999999999),
]

STABILITY_CASES = [
    # response, score, avgSentiment, sentimentVariance
    (
        "I love this product! It works amazingly well. The features are fantastic.",
        0.8194444444444444,
        0.5833333333333334,
        0.18055555555555558,
    ),
    (
        "This is terrible. It never works properly. The support is awful.",
        0.8194444444444444,
        -0.4166666666666667,
        0.18055555555555555,
    ),
    (
        "This is amazing! But it has terrible flaws. Yet somehow I love it. Though it frustrates me.",
        0.16479166666666678,
        0.10833333333333331,
        0.8352083333333332,
    ),
    ("This is a great product.", 1.0, 0.6, 0.0),
    ("", 1.0, 0.0, 0.0),
    ("The sky is blue. The grass is green. The tree is tall.", 1.0, 0.0, 0.0),
    # Not Mastra's cases; checked with Node. Text after the last .!? is dropped, as in Mastra.
    ("Good. Bad", 1.0, 3.0, 0.0),
    # Found by fuzzing against Node: squares must be products (Python's x ** 2 is one ulp off here).
    (
        "embittered:pleasurable. 😪\u2028gift, pissed\x85resentful, 🇯! improves/postpones/okay? dispute:conciliated...",
        0.9392361111111112,
        0.37499999999999994,
        0.06076388888888889,
    ),
    (
        "Thanks so much, this is great! Sadly the second step failed. Please try again.",
        0.5330864197530865,
        0.12222222222222222,
        0.4669135802469136,
    ),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "response_s", "reference_s", "difference"), CONSISTENCY_CASES
)
async def test_consistency_with_a_reference_tone(
    response: str, reference: str, expected: float, response_s: float, reference_s: float, difference: float
) -> None:
    value, details = await score(response, reference)
    assert value == expected
    assert details == {
        "score": expected,
        "responseSentiment": response_s,
        "referenceSentiment": reference_s,
        "difference": difference,
    }


@pytest.mark.parametrize(("response", "expected", "average", "variance"), STABILITY_CASES)
async def test_stability_without_a_reference(response: str, expected: float, average: float, variance: float) -> None:
    value, details = await score(response)
    assert value == expected
    assert details == {"score": expected, "avgSentiment": average, "sentimentVariance": variance}


async def test_mastra_bounds_hold() -> None:
    # A few of the assertions of Mastra's tests, as written there.
    value, details = await score("This is terrible and disappointing.", "This is excellent and amazing!")
    assert value < 0.5 and details["difference"] > 0.5
    value, details = await score(
        "This is amazing! But it has terrible flaws. Yet somehow I love it. Though it frustrates me."
    )
    assert value < 0.7 and details["sentimentVariance"] > 0.2


async def test_an_empty_reference_tone_scores_stability_like_mastra() -> None:
    assert await score("Good. Bad", "") == await score("Good. Bad")


async def test_reads_every_output_message_and_no_input() -> None:
    scorer = create_tone_scorer()
    output = (assistant_message("I love it.", id="a"), assistant_message("I hate it.", id="b"))
    typed = await scorer.run(input=None, output=output)
    plain = await scorer.run(
        input=to_json_value(AgentRunInput(input_messages=(user_message("x"),))), output=to_json_value(output)
    )
    assert typed.score == plain.score == tone_stability("I love it., I hate it.").score


async def test_an_output_without_text_is_not_scorable() -> None:
    result = await create_tone_scorer().run(input=None, output={"unexpected": 1})
    assert result.score is None and result.not_scorable is not None


def test_options_and_identity() -> None:
    assert ToneOptions.model_validate({"referenceTone": "calm"}).reference_tone == "calm"
    assert ToneOptions.model_validate({"reference_tone": "calm"}).reference_tone == "calm"
    with pytest.raises(ValueError):
        ToneOptions.model_validate({"referenceTones": "calm"})
    stability, calm, upbeat = (
        create_tone_scorer(),
        create_tone_scorer({"referenceTone": "calm"}),
        create_tone_scorer({"referenceTone": "upbeat!"}),
    )
    assert stability.id == calm.id == "tone-scorer"
    # Different references are different scorers: their score ids must differ.
    assert len({stability.fingerprint, calm.fingerprint, upbeat.fingerprint}) == 3
    assert create_tone_scorer({"referenceTone": "calm"}).fingerprint == calm.fingerprint


# -- the sentiment package -------------------------------------------------------------------------


def test_lexicon_is_afinn_165_with_the_emoji_ranking() -> None:
    labels = sentiment_labels()
    assert len(labels) == 3382 + 767  # sentiment 5.0.2: labels.json and build/emoji.json
    assert (labels["abandon"], labels["outstanding"], labels["does not work"]) == (-2, 5, -3)
    assert (labels["😀"], labels["❤"], labels["😭"]) == (2, 3, -1)
    assert len(NEGATORS) == 12


@pytest.mark.parametrize(
    ("text", "score", "comparative", "tokens", "positive", "negative"),
    [
        # Checked against sentiment 5.0.2 with Node.
        (
            "I don't like this. Not bad at all!",
            1,
            0.125,
            ("i", "don't", "like", "this", "not", "bad", "at", "all"),
            ("bad",),
            ("like",),
        ),
        ("Great job 😀 👍", 7, 1.75, ("great", "job", "😀", "👍"), ("👍", "😀", "great"), ()),
        ("Love\nit, hate\tthat", 3, 1.0, ("love", "it", "hate\tthat"), ("love",), ()),  # a lone tab splits nothing
        ("", 0, 0.0, ("",), (), ()),
        ("The service does not work", 0, 0.0, ("the", "service", "does", "not", "work"), (), ()),  # no phrases
    ],
)
def test_analyze_agrees_with_the_package(
    text: str,
    score: int,
    comparative: float,
    tokens: tuple[str, ...],
    positive: tuple[str, ...],
    negative: tuple[str, ...],
) -> None:
    result = analyze(text)
    assert (result.score, result.comparative, result.tokens, result.positive, result.negative) == (
        score,
        comparative,
        tokens,
        positive,
        negative,
    )


@given(st.text(max_size=80))
def test_tone_scores_stay_in_the_unit_interval(text: str) -> None:
    assert 0.0 <= tone_stability(text).score <= 1.0
    assert 0.0 <= tone_consistency(text, "Thanks, that is great!").score <= 1.0
