"""The fingerprint of every prebuilt scorer kind, pinned: a fingerprint names a scorer's score ids (score_id_of),
so a refactor that changes one silently gives every span a second score under a new id. A function step is
named in the fingerprint by its qualified name (``create_x_scorer.<locals>.generate_score``): moving such a
function changes the fingerprint even when nothing it does changes. A deliberate change of a kind's behaviour
(new score ids for the same spans: docs/architecture.md, the score contract) updates its pin here."""

from __future__ import annotations

from sidecar.scorers.catalog import scorer_kinds
from sidecar.scoring import JudgeModel

JUDGE = JudgeModel(model="openai/gpt-4o-mini")

# Kinds that need options to be built at all: pinned by their own tests.
NEED_OPTIONS = {"checks", "llm-judge", "tool-call-accuracy"}

PINNED = {
    "answer-relevancy": "7fc89c13e85b8d9c",
    "answer-similarity": "42a688d81d932d5c",
    "bias": "f0e6ee4889aadb30",
    "completeness": "cf7056ac9a1f8d44",
    "content-similarity": "3f56a0d0c8812646",
    "context-precision": "7ea92d67409bb6ec",
    "context-recall": "3a13e01dda9f85d3",
    "context-relevance": "5711697845366932",
    "conversation-completeness": "ee551369306061f7",
    "faithfulness": "3de907d8f78c718a",
    "hallucination": "1b2978a0f42b1da0",
    "keyword-coverage": "f0a5666062810c13",
    "knowledge-retention": "a7fb6e4af149f932",
    "noise-sensitivity": "6b45aa57f2fae0a3",
    "prompt-alignment": "26f82fdf14e1c56e",
    "role-adherence": "9dc98e0c6c2a6e6b",
    "rubric": "2d8db56c61a63867",
    "summarization": "576f04fef17cf1b2",
    "textual-difference": "4d536ece236f18af",
    "tone": "95ded0980f670756",
    "tool-call-accuracy-llm": "dc9f8a5e821822fc",
    "toxicity": "73abfc8d726c2903",
    "trajectory-llm": "45a324307b68c3e4",
    "trajectory": "b4e53c5328b01c95",
    "user-frustration": "98076e778ab2f633",
}


def test_every_prebuilt_kind_keeps_its_fingerprint_with_default_options() -> None:
    found = {}
    for name, kind in scorer_kinds().items():
        if not kind.prebuilt or name in NEED_OPTIONS:
            continue
        found[name] = kind.build(JUDGE if kind.needs_judge else None, {}).fingerprint
    assert found == PINNED
