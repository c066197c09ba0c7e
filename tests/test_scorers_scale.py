"""Every kind takes ``scale`` (falsy → 1): a 0–10 scorer is a configuration away, whatever the kind."""

from __future__ import annotations

import pytest

from sidecar.scorers.catalog import scorer_kinds
from sidecar.scoring import AgentRunInput
from sidecar.scoring.agent import assistant_message, user_message

CODE_KINDS = ("completeness", "keyword-coverage", "textual-difference", "tone")


def test_every_prebuilt_kind_has_a_scale_option() -> None:
    missing = [
        name for name, kind in scorer_kinds().items() if kind.prebuilt and "scale" not in kind.options.model_fields
    ]
    assert missing == []


@pytest.mark.parametrize("name", CODE_KINDS)
async def test_a_code_kind_scores_on_its_scale(name: str) -> None:
    kind = scorer_kinds()[name]
    run_input = AgentRunInput(input_messages=(user_message("Explain how the planets orbit the sun."),))
    output = (assistant_message("The planets orbit the sun on ellipses, pulled by its gravity. It is calm."),)
    unit = await kind.build(None, {}).run(input=run_input, output=output)
    tenfold = kind.build(None, {"scale": 10})
    scaled = await tenfold.run(input=run_input, output=output)
    assert unit.score is not None and scaled.score == pytest.approx(unit.score * 10)
    assert tenfold.fingerprint != kind.build(None, {}).fingerprint  # another scale, other score ids
