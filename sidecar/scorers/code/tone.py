"""Mastra's tone code scorer (``createToneScorer``), ported.

preprocess (function: the sentiment of the run's output text, ``sidecar.scorers.code.sentiment``) →
generate_score (function: the preprocess step's score). No judge; only the output is read.

- With ``reference_tone`` (``referenceTone``): 1 − |comparative(output) − comparative(reference)|,
  at least 0 (tone consistency with a reference text).
- Without: tone stability across the response. The output is cut into sentences (``[^.!?]+[.!?]+``;
  the whole text when none match, and text after the last ``.!?`` is dropped, as in Mastra); the score
  is 1 − the population variance of the sentences' comparative scores, at least 0.

Sums run left to right like JavaScript's ``reduce`` (not ``math.fsum``, and not ``sum``, which compensates
on Python ≥ 3.12), and squares are products (V8's ``Math.pow(x, 2)``), so results equal Mastra's to the
last bit.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.code.sentiment import analyze, sentiment_labels
from sidecar.scorers.options import options_as
from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.text import get_output_messages_text
from sidecar.scoring import JudgeModel, NotScorable, Scorer, StepContext, create_scorer, not_scorable
from sidecar.scoring.prompting import js_number

__all__ = [
    "ToneConsistency",
    "ToneOptions",
    "ToneStability",
    "create_tone_scorer",
    "tone_consistency",
    "tone_stability",
]

_SENTENCE = re.compile(r"[^.!?]+[.!?]+")


class ToneOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    scale: float | None = None

    # A text whose tone the response should match; none (or empty): score the response's own stability.
    reference_tone: str | None = None


class ToneConsistency(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    score: float
    response_sentiment: float
    reference_sentiment: float
    difference: float


class ToneStability(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    score: float
    avg_sentiment: float
    sentiment_variance: float


def tone_consistency(response: str, reference: str) -> ToneConsistency:
    response_sentiment = analyze(response).comparative
    reference_sentiment = analyze(reference).comparative
    difference = abs(response_sentiment - reference_sentiment)
    return ToneConsistency(
        score=max(0.0, 1 - difference),
        response_sentiment=response_sentiment,
        reference_sentiment=reference_sentiment,
        difference=difference,
    )


def tone_stability(response: str) -> ToneStability:
    sentences = _SENTENCE.findall(response) or [response]
    sentiments = [analyze(sentence).comparative for sentence in sentences]
    total = 0.0
    for value in sentiments:
        total += value
    average = total / len(sentiments)
    squares = 0.0
    for value in sentiments:
        delta = value - average
        squares += delta * delta  # V8's Math.pow(x, 2) is x * x; Python's x ** 2 (libm pow) may differ by an ulp
    variance = squares / len(sentiments)
    return ToneStability(score=max(0.0, 1 - variance), avg_sentiment=average, sentiment_variance=variance)


def create_tone_scorer(options: ToneOptions | dict[str, Any] | None = None) -> Scorer:
    """Mastra's ``createToneScorer({ referenceTone })``."""
    opts = options_as(ToneOptions, options)
    reference = opts.reference_tone or None  # Mastra tests it for truthiness: "" scores stability
    scale = opts.scale or 1  # falsy → 1, as Mastra's LLM scorers read it
    sentiment_labels()  # load the lexicon now, not on the first span

    def preprocess(ctx: StepContext) -> ToneConsistency | ToneStability | NotScorable:
        response = get_output_messages_text(ctx.run.output)
        if response is None:
            return not_scorable("the run has no output text")
        return tone_consistency(response, reference) if reference is not None else tone_stability(response)

    def generate_score(ctx: StepContext) -> float:
        result: ToneConsistency | ToneStability = ctx.results.preprocess_step_result
        return result.score * scale

    # Different reference tones are different scorers: their scores must not share ids.
    variant = hashlib.sha256(reference.encode()).hexdigest()[:16] if reference is not None else "stability"
    return (
        create_scorer(
            id="tone-scorer",
            name="Tone Scorer",
            description=(
                "Sentiment of the response (AFINN-165): its closeness to a reference tone, or how steady it "
                "stays from sentence to sentence"
            ),
        )
        .preprocess(preprocess)
        .generate_score(generate_score)
        .with_version(f"1:{variant}:scale={js_number(scale)}")
    )


@scorer_kind(
    "tone",
    options=ToneOptions,
    needs_judge=False,
    description=(
        "sentiment consistency of the response (AFINN-165): with a reference tone, closeness to it; "
        "without, stability across its sentences"
    ),
    needs=("output",),
)
def _tone_kind(judge: JudgeModel | None, options: ToneOptions) -> Scorer:
    return create_tone_scorer(options)
