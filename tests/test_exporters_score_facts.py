"""A score's explanation within each destination's limit: one ``clip`` (exporters.score_facts) for the OTLP
event, the Phoenix annotation, the Langfuse comment and the Datadog reasoning."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from exporters.datadog.mapping import MAX_REASONING_CHARS, datadog_evaluation
from exporters.langfuse.mapping import MAX_COMMENT_CHARS, langfuse_score
from exporters.otlp.mapping import GEN_AI_EVALUATION_EXPLANATION, MAX_EXPLANATION_CHARS, evaluation_attributes
from exporters.phoenix import MAX_EXPLANATION_CHARS as PHOENIX_MAX_EXPLANATION_CHARS
from exporters.phoenix import span_annotation
from exporters.score_facts import clip
from sidecar.core import ScoredRun
from tests.support.runs import finished_run


@given(st.text(), st.integers(min_value=1, max_value=200))
def test_a_clipped_text_fits_its_limit_and_keeps_its_beginning(text: str, limit: int) -> None:
    clipped = clip(text, limit)
    assert len(clipped) <= limit
    if len(text) <= limit:
        assert clipped == text  # what fits is left alone
    else:
        assert clipped == text[: limit - 1] + "…"  # cut, and said to be cut
        assert len(clipped) == limit


def _reasoned(reason: str) -> ScoredRun:
    run = finished_run("relevancy", "agent", "scored", 0.5, span_end_unix_nano=1_700_000_000_000_000_000)
    assert run.result is not None
    return dataclasses.replace(run, result=run.result.model_copy(update={"reason": reason}))


def test_every_destination_clips_a_long_reason_to_its_own_limit() -> None:
    long = "why " * 5000
    otlp = evaluation_attributes(_reasoned(long))[GEN_AI_EVALUATION_EXPLANATION]
    phoenix = span_annotation(_reasoned(long))
    langfuse = langfuse_score(_reasoned(long))
    datadog = datadog_evaluation(_reasoned(long))
    assert phoenix is not None and langfuse is not None and datadog is not None
    assert otlp == clip(long, MAX_EXPLANATION_CHARS) and len(str(otlp)) == MAX_EXPLANATION_CHARS
    assert phoenix["result"]["explanation"] == clip(long, PHOENIX_MAX_EXPLANATION_CHARS)
    assert langfuse.body["comment"] == clip(long, MAX_COMMENT_CHARS)
    assert datadog.metric["reasoning"] == clip(long, MAX_REASONING_CHARS)
    short = "the answer addresses the question"
    assert evaluation_attributes(_reasoned(short))[GEN_AI_EVALUATION_EXPLANATION] == short
    short_datadog = datadog_evaluation(_reasoned(short))
    assert short_datadog is not None and short_datadog.metric["reasoning"] == short
