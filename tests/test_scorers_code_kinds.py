"""The code kinds ported from Mastra's NLP-based scorers, as a configuration names them."""

from __future__ import annotations

import textwrap

import pytest

from sidecar.scorers.catalog import scorer_kinds
from sidecar.scorers.code.js_text import js_split_whitespace, js_trim, utf16_len, utf16_pair
from sidecar.scorers.text import get_input_messages_text, get_output_messages_text
from sidecar.scoring.agent import AgentRunInput, assistant_message, user_message
from sidecar.scoring.types import to_json_value
from sidecar.settings import SettingsError, load_settings

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
            options: {ignoreCase: true}
          - id: c
            kind: tone
            options: {reference_tone: 3}
        """
    )
    assert [(path, line) for path, line, _ in problems] == [
        ("scorers[0].options.referenceTon", 5),
        ("scorers[1].options.ignoreCase", 8),
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


# -- what the code kinds read ----------------------------------------------------------------------


def test_input_and_output_text_of_each_run_shape() -> None:
    agent_input = AgentRunInput(input_messages=(user_message("a", id="1"), user_message("b", id="2")))
    assert get_input_messages_text(agent_input) == "a, b"
    assert get_input_messages_text(to_json_value(agent_input)) == "a, b"
    assert get_input_messages_text(AgentRunInput()) == ""  # present but empty: Mastra's numbers apply
    assert get_input_messages_text("plain") == "plain"
    assert get_input_messages_text([{"role": "user", "content": "hi"}]) == "hi"
    assert get_input_messages_text(None) is None
    assert get_input_messages_text({"unexpected": 1}) is None

    output = (assistant_message("x", id="1"), assistant_message("y", id="2"))
    assert get_output_messages_text(output) == "x, y"
    assert get_output_messages_text(to_json_value(output)) == "x, y"
    assert get_output_messages_text({"text": "z"}) == "z"
    assert get_output_messages_text("z") == "z"
    assert get_output_messages_text({"unexpected": 1}) is None


def test_javascript_string_semantics() -> None:
    assert js_trim("\ufeff\u00a0 x \x1c") == "x \x1c"  # U+FEFF is JavaScript whitespace, U+001C is not
    assert js_split_whitespace(" a\u3000b ") == ["", "a", "b", ""]
    assert (utf16_len("abc"), utf16_len("é"), utf16_len("😀")) == (3, 1, 2)
    assert utf16_pair("ab", "é") == ("ab", "é")
    assert utf16_pair("a", "😀") == ([97], [0xD83D, 0xDE00])
