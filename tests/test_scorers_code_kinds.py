"""The code kinds ported from Mastra's NLP-based scorers, as a configuration names them."""

from __future__ import annotations

import textwrap

import pytest

from sidecar.runtime.settings import SettingsError, load_settings
from sidecar.scorers.registry import scorer_kinds
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message

CODE_KINDS = {
    "completeness": ("input", "output"),
    "keyword-coverage": ("input", "output"),
    "textual-difference": ("input", "output"),
    "tone": ("output",),
}


@pytest.mark.parametrize(("name", "needs"), CODE_KINDS.items())
def test_declared_as_code_kinds(name: str, needs: tuple[str, ...]) -> None:
    kind = scorer_kinds()[name]
    assert kind.prebuilt and not kind.needs_judge and kind.judge_calls_per_run == 0
    assert kind.needs == frozenset(needs)
    assert kind.direction == "higher" and kind.eval_only is None


@pytest.mark.parametrize("name", CODE_KINDS)
async def test_built_from_the_registry_without_a_judge(name: str) -> None:
    scorer = scorer_kinds()[name].build(None, {})
    result = await scorer.run(
        input=AgentRunInput(input_messages=(user_message("The quick brown fox is great"),)),
        output=(assistant_message("A quick brown fox! Great."),),
    )
    assert result.score is not None and 0.0 <= result.score <= 1.0 and result.judge is None


def problems_of(text: str) -> list[tuple[str, int | None, str]]:
    with pytest.raises(SettingsError) as caught:
        load_settings(textwrap.dedent(text).lstrip("\n"), environ={})
    return [(p.path, p.line, p.message) for p in caught.value.problems]


def test_options_are_validated_with_did_you_mean() -> None:
    problems = problems_of(
        """
        kafka: {bootstrap_servers: x}
        scorers:
          - id: a
            kind: tone
            options: {referenceTon: calm}
          - id: b
            kind: completeness
            options: {scale: 10}
          - id: c
            kind: tone
            options: {reference_tone: 3}
        """
    )
    assert [(path, line) for path, line, _ in problems] == [
        ("scorers[0].options.referenceTon", 5),
        ("scorers[1].options.scale", 8),
        ("scorers[2].options.reference_tone", 11),
    ]
    assert "did you mean 'referenceTone'?" in problems[0][2]
    assert "unknown option of kind 'completeness'" in problems[1][2]


def test_a_valid_configuration_of_every_code_kind() -> None:
    settings = load_settings(
        textwrap.dedent(
            """
            kafka: {bootstrap_servers: x}
            scorers:
              - {id: complete, kind: completeness}
              - {id: keywords, kind: keyword-coverage, options: {}}
              - {id: diff, kind: textual-difference}
              - {id: tone, kind: tone, options: {referenceTone: "Thanks, happy to help!"}}
            """
        ).lstrip("\n"),
        environ={},
    )
    assert [s.kind for s in settings.scorers] == ["completeness", "keyword-coverage", "textual-difference", "tone"]
