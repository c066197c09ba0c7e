"""``scoring-sidecar validate``: what it reports, and what it warns about, in one pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.cli import main

EVAL_RUBRIC = """\
judges:
  default: {{model: openai/gpt-4o-mini, api_key: sk-x}}
scorers:
  - id: checklist
    kind: rubric
    judge: default
{options}"""


def test_a_rubric_with_no_criteria_passes_validate_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Valid (an eval item may carry its own rubric) but likely a mistake: every run without one scores 1."""
    path = tmp_path / "rubric.yaml"
    path.write_text(EVAL_RUBRIC.format(options="    options: {criteria: []}\n"))
    assert main(["validate", "--config", str(path)]) == 0
    err = capsys.readouterr().err
    assert (
        "warning: scorers[0].options.criteria (line 7): rubric scorer 'checklist' has no criteria: each run is "
        "graded against the rubric it carries (request_context.rubric), and a run without one passes (score 1)"
    ) in err, err

    path.write_text(EVAL_RUBRIC.format(options=""))  # no options at all: the same warning, at the scorer
    assert main(["validate", "--config", str(path)]) == 0
    assert "warning: scorers[0].options.criteria (line 4): rubric scorer 'checklist' has no criteria" in (
        capsys.readouterr().err
    )

    path.write_text(EVAL_RUBRIC.format(options="    options: {criteria: 'Gives numbered steps'}\n"))
    assert main(["validate", "--config", str(path)]) == 0
    assert "has no criteria" not in capsys.readouterr().err


FOUR_PROBLEMS = """\
kafka:
  bootstrap_servers: localhost:9092
  topics: [otlp_spans]
judges:
  default: {model: openai/gpt-4o-mini, api_key: sk-x}
scorers:
  - id: alignment
    kind: prompt-alignment
    judge: default
    sampling: 25%
  - id: similarity
    kind: answer-similarity
    judge: default
  - id: relevancy
    kind: answer-relevancy
    judge: grader
runtime:
  max_in_flight_run: 100
"""


def test_validate_lists_four_unrelated_problems_in_one_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A value of the wrong type, an unknown key, a scorer naming an undeclared judge (a rule across blocks) and
    an eval-only kind in a live file (a rule of `run` only): all four at once, not one fix at a time."""
    path = tmp_path / "four.yaml"
    path.write_text(FOUR_PROBLEMS)
    assert main(["validate", "--config", str(path)]) == 2
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    assert lines[0] == f"config INVALID: {path}"
    problems = lines[1:]
    assert len(problems) == 4, problems
    assert problems[0].startswith("- scorers[0].sampling (line 10): ")
    assert problems[1] == (
        "- scorers[1].kind (line 12): kind 'answer-similarity' scores eval datasets only: needs a ground truth (the "
        "expected answer of each dataset item), which live traces do not carry"
    )
    assert problems[2] == "- scorers[2].judge (line 16): no judge named 'grader' (judges: default)"
    assert problems[3].startswith(
        "- runtime.max_in_flight_run (line 18): unknown key (did you mean 'max_in_flight_runs'?"
    )


def test_an_eval_only_kind_is_reported_in_the_same_pass_as_a_broken_kafka_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live rules each read only the blocks they need: the scorers' rule runs although the kafka block (which the
    exporters' rules read) has a problem of its own, so four unrelated problems are named in one run."""
    path = tmp_path / "four.yaml"
    path.write_text(
        "kafka: {bootstrap_servers: 'localhost:9092', topics: [otlp_spans], max_record_bytes: -5}\n"
        "judges:\n  default: {model: openai/gpt-4o-mini, api_key: sk-x, timeoutt_s: 3}\n"
        "scorers:\n"
        "  - {id: similarity, kind: answer-similarity, judge: default}\n"
        "  - {id: tone, kind: tonee}\n"
    )
    assert main(["validate", "--config", str(path)]) == 2
    problems = [line.strip() for line in capsys.readouterr().err.splitlines()][1:]
    assert [problem.split(" (line")[0] for problem in problems] == [
        "- kafka.max_record_bytes",
        "- judges.default.timeoutt_s",
        "- scorers[0].kind",
        "- scorers[1].kind",
    ], problems
    assert "kind 'answer-similarity' scores eval datasets only" in problems[2]


def test_rules_across_blocks_are_all_reported_when_one_of_them_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A duplicate scorer id (checked for eval and run) used to hide the live service's own rules (checked after)."""
    path = tmp_path / "rules.yaml"
    path.write_text(
        "kafka: {bootstrap_servers: 'localhost:9092', topics: [otlp_spans]}\n"
        "judges:\n  default: {model: openai/gpt-4o-mini, api_key: sk-x}\n"
        "scorers:\n"
        "  - {id: same, kind: completeness}\n"
        "  - {id: same, kind: context-recall, judge: default}\n"
        "exporters:\n  kafka_scores: {topic: otlp_spans}\n"
    )
    assert main(["validate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "scorers[1].id (line 6): duplicate scorer id (also scorers[0])" in err, err
    assert "scorers[1].kind (line 6): kind 'context-recall' scores eval datasets only" in err, err
    assert "exporters.kafka_scores.topic (line 8): must differ from the input and dead-letter topics" in err, err
    # The same file without kafka is an eval configuration: the live rules do not apply.
    path.write_text(path.read_text().split("\n", 1)[1])
    assert main(["validate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "duplicate scorer id" in err and "eval datasets only" not in err and "must differ" not in err, err


def test_a_percentage_for_sampling_is_explained_as_a_fraction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "four.yaml"
    path.write_text(FOUR_PROBLEMS)
    assert main(["validate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        "scorers[0].sampling (line 10): a fraction from 0 to 1 of the traces to score: 0.25 scores a quarter of "
        "them (not 25%)"
    ) in err, err
    assert "unable to parse" not in err


def test_counts_read_in_the_singular_for_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(EVAL_RUBRIC.format(options="    options: {criteria: 'Gives numbered steps'}\n"))
    assert main(["validate", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("config OK for eval: 1 scorer (checklist), 1 judge (default); "), out


SASL = """\
kafka:
  bootstrap_servers: localhost:9092
  security:
    security_protocol: SASL_SSL
    sasl_mechanism: SCRAM-SHA-512
    sasl_username: ${KAFKA_SASL_USERNAME:-scorer}
    sasl_password: ${KAFKA_SASL_PASSWORD:-}
scorers:
  - {id: c, kind: completeness}
"""


def test_a_key_left_empty_by_an_unset_variable_names_the_variable() -> None:
    from sidecar.settings import SettingsError, load_settings

    with pytest.raises(SettingsError) as caught:
        load_settings(SASL, environ={})
    (problem,) = caught.value.problems
    assert str(problem) == (
        "kafka.security.sasl_password (line 7): required with security_protocol SASL_SSL "
        "(written ${KAFKA_SASL_PASSWORD:-}: KAFKA_SASL_PASSWORD is unset or empty)"
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(SASL, environ={"KAFKA_SASL_PASSWORD": ""})  # set but empty: the same
    assert "KAFKA_SASL_PASSWORD is unset or empty" in str(caught.value)
    secret = "s3cret-password"
    settings = load_settings(SASL, environ={"KAFKA_SASL_PASSWORD": secret})
    assert settings.kafka.security.sasl_password is not None
    assert settings.kafka.security.sasl_password.get_secret_value() == secret


LIVE_CLAIMS = ("work in a live configuration", "the same `judges` and `scorers` as a live configuration")


@pytest.mark.parametrize(
    "example",
    sorted(
        path.name
        for path in (Path(__file__).resolve().parents[1] / "examples").glob("eval*.yaml")
        if any(claim in path.read_text() for claim in LIVE_CLAIMS)
    ),
)
def test_examples_that_say_their_scorers_work_live_validate_in_a_live_configuration(
    example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What an example says of its scorers holds: its judges and scorers, pasted under a kafka block, pass validate."""
    source = (Path(__file__).resolve().parents[1] / "examples" / example).read_text()
    live = tmp_path / "live.yaml"
    live.write_text("kafka: {bootstrap_servers: 'localhost:9092', topics: [otlp_spans]}\n" + source)
    assert main(["validate", "--config", str(live)]) == 0, capsys.readouterr().err
