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
