"""The output-quality kinds in the registry: what each declares, options through settings validation (typos,
camelCase, Mastra's constraints), eval-only kinds in a live configuration, building by kind."""

from __future__ import annotations

import textwrap

import pytest

from sidecar.scorers.catalog import scorer_kinds
from sidecar.scoring import JudgeModel
from sidecar.settings import SettingsError, load_eval_settings, load_settings
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import agent_run

HEAD = """\
kafka: {bootstrap_servers: localhost:9092}
judges: {j: {model: openai/gpt-4o-mini}}
scorers:
"""


def problems(scorers: str, *, live: bool = True) -> list[tuple[str, int | None, str]]:
    text = HEAD + textwrap.indent(textwrap.dedent(scorers).lstrip("\n"), "  ")
    with pytest.raises(SettingsError) as caught:
        (load_settings if live else load_eval_settings)(text)
    return [(p.path, p.line, p.message) for p in caught.value.problems]


@pytest.mark.parametrize(
    ("name", "calls", "needs", "direction", "eval_only"),
    [
        ("answer-relevancy", 3, {"input", "output"}, "higher", False),
        ("toxicity", 2, {"input", "output"}, "lower", False),
        ("bias", 3, {"output"}, "lower", False),
        ("summarization", 3, {"input", "output"}, "higher", False),
        ("rubric", 1, {"input", "output"}, "higher", False),
        ("answer-similarity", 3, {"output", "ground_truth"}, "higher", True),
    ],
)
def test_declared_kinds(name: str, calls: int, needs: set[str], direction: str, eval_only: bool) -> None:
    kind = scorer_kinds()[name]
    assert kind.needs_judge and kind.prebuilt
    assert (kind.judge_calls_per_run, set(kind.needs), kind.direction) == (calls, needs, direction)
    assert (kind.eval_only is not None) == eval_only
    assert kind.options.model_config.get("extra") == "forbid"
    assert "scale" in kind.options.model_fields  # every kind of this group has Mastra's scale option


@pytest.mark.parametrize(
    ("kind", "typo", "hint"),
    [
        ("answer-relevancy", "uncertainty_wieght: 0.5", "did you mean 'uncertainty_weight'?"),
        ("toxicity", "scael: 2", "did you mean 'scale'?"),
        ("bias", "Scale: 2", "did you mean 'scale'?"),
        ("summarization", "maxQuestion: 3", "did you mean 'maxQuestions'?"),
        ("rubric", "criterias: '- a'", "did you mean 'criteria'?"),
    ],
)
def test_an_option_typo_says_what_was_meant(kind: str, typo: str, hint: str) -> None:
    [(path, line, message)] = problems(f"- id: x\n  kind: {kind}\n  judge: j\n  options: {{{typo}}}\n")
    assert path.startswith("scorers[0].options.") and line == 7
    assert f"unknown option of kind {kind!r} ({hint}" in message


def test_options_in_mastras_camel_case_and_their_constraints() -> None:
    settings = load_eval_settings(
        HEAD
        + "  - {id: ar, kind: answer-relevancy, judge: j, options: {uncertaintyWeight: 0.5, scale: 10}}\n"
        + "  - {id: su, kind: summarization, judge: j, options: {maxQuestions: 3, source: the document}}\n"
        + "  - {id: as, kind: answer-similarity, judge: j, options: {requireGroundTruth: false, exactMatchBonus: 0}}\n"
    )
    assert [s.kind for s in settings.scorers] == ["answer-relevancy", "summarization", "answer-similarity"]
    [(path, _, message)] = problems("- {id: su, kind: summarization, judge: j, options: {maxQuestions: 0}}\n")
    assert path == "scorers[0].options.maxQuestions"
    assert "maxQuestions must be at least 1 for Summarization scoring" in message


def test_a_rubric_in_the_configuration() -> None:
    settings = load_settings(
        HEAD
        + textwrap.indent(
            textwrap.dedent(
                """\
                - id: report-rubric
                  kind: rubric
                  judge: j
                  options:
                    criteria:
                      - {description: Has an analysis section}
                      - {description: Cites sources, required: false}
                - id: checklist
                  kind: rubric
                  judge: j
                  options:
                    criteria: |
                      - Has an analysis section
                      - Has recommendations
                """
            ),
            "  ",
        )
    )
    assert len(settings.scorers) == 2
    found = problems("- {id: r, kind: rubric, judge: j, options: {criteria: [{descripton: Has analysis}]}}\n")
    assert [path for path, _, _ in found] == [
        "scorers[0].options.criteria[0].description",
        "scorers[0].options.criteria[0].descripton",
    ]
    assert found[0][2] == "required key is missing"
    assert "unknown field of kind 'rubric' (did you mean 'description'?" in found[1][2]


def test_answer_similarity_is_refused_live_with_the_reason() -> None:
    [(path, line, message)] = problems("- {id: sim, kind: answer-similarity, judge: j}\n")
    assert (path, line) == ("scorers[0].kind", 4)
    assert "scores eval datasets only" in message and "ground truth" in message
    # The same scorer is fine in an eval configuration.
    assert load_eval_settings(HEAD + "  - {id: sim, kind: answer-similarity, judge: j}\n").scorers[0].id == "sim"


async def test_built_by_kind_with_options(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.json({"verdicts": [{"verdict": "yes", "reason": "rude"}]}), Reply(content="The score."))
    scorer = scorer_kinds()["toxicity"].build(make_judge_model(), {"scale": 10})
    run_input, output = agent_run("How is Sarah?", "Sarah is clueless.")
    assert (await scorer.run(input=run_input, output=output)).score == 10


def test_building_needs_a_judge() -> None:
    with pytest.raises(ValueError, match="needs a judge"):
        scorer_kinds()["rubric"].build(None, {})
    assert scorer_kinds()["rubric"].build(JudgeModel(model="openai/gpt-4o-mini"), {}).id == "rubric-scorer"
