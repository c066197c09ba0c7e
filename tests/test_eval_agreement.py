"""``eval`` against people (docs/feedback.md): items carrying a person's ``expected`` verdict, compared with each
scorer's score as the live join compares them; the agreement, kappa, MAE and confusion matrix in the table, the
numbers checked against scikit-learn's; ``--min-agreement`` decides the exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score, mean_absolute_error

from sidecar.cli import main
from sidecar.testing.judge_server import JudgeServer
from tests.test_eval_custom_judges import CONFIG, DATASET, judge  # noqa: F401 (the scripted reviewer fixture)

# The person's verdicts on the example's six answers. The reviewer judge says: compliant ×3, borderline (the French
# late return), violation ×2; the language judge fails the German customer answered in English only.
EXPECTED = {
    "refund-in-window-en": {"refund-policy": "compliant", "language-match": True},
    "gift-card-violation-en": {"refund-policy": "violation", "language-match": True},
    "late-return-borderline-fr": {"refund-policy": "violation", "language-match": True},  # the judge: borderline
    "software-refused-es": {"refund-policy": "compliant", "language-match": True},
    "wrong-language-de": {"refund-policy": "compliant", "language-match": True},  # the judge: fail
    "late-refund-violation-en": {"refund-policy": "violation", "language-match": True},
}
JUDGED = {
    "refund-policy": ["compliant", "violation", "borderline", "compliant", "compliant", "violation"],
    "language-match": [True, True, True, True, False, True],
}


def labelled_dataset(tmp_path: Path) -> Path:
    rows = [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps({**row, "expected": EXPECTED[row["id"]]}) + "\n" for row in rows))
    return path


def row_of(out: str, scorer: str) -> list[str]:
    start = out.index("agreement with the expected verdicts")
    return next(line.split() for line in out[start:].splitlines() if line.split()[:1] == [scorer])


def test_expected_verdicts_give_agreement_kappa_and_confusion_and_gate_the_exit(
    judge: JudgeServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dataset = labelled_dataset(tmp_path)
    base = ["eval", str(dataset), "--config", str(CONFIG), "--no-progress"]
    assert main([*base, "--min-agreement", "0.8"]) == 0
    out = capsys.readouterr().out
    said = [EXPECTED[i]["refund-policy"] for i in EXPECTED]
    kappa = cohen_kappa_score(JUDGED["refund-policy"], said)
    policy = row_of(out, "refund-policy")
    assert policy[1:4] == ["6", "0.833", f"{kappa:.3f}"] and policy[4] == "-" and policy[-1] == "ok"
    language = row_of(out, "language-match")
    # People say pass everywhere: agreement 5/6, kappa 0 (no better than always answering pass).
    assert language[1:5] == ["6", "0.833", "0.000", "-"]
    assert "refund-policy confusion (rows: judge, columns: expected):" in out
    header, *rows = out.split("refund-policy confusion")[1].splitlines()[1:5]
    assert header.split() == ["borderline", "compliant", "violation"]
    borderline = next(line.split() for line in rows if line.split()[:1] == ["borderline"])
    assert borderline == ["borderline", "0", "0", "1"]  # columns: borderline, compliant, violation

    assert main([*base, "--min-agreement", "0.9"]) == 1
    out = capsys.readouterr().out
    assert "AGREEMENT BELOW --min-agreement 0.9: language-match (0.83), refund-policy (0.83)" in out
    assert row_of(out, "refund-policy")[-1] == "FAIL"


def test_numbers_agree_within_a_tolerance_and_report_their_mae(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text("scorers:\n  - id: similarity\n    kind: content-similarity\n")
    rows = [
        ("the cat sat on the mat", "the cat sat on the mat", 1.0),
        ("the cat sat on the mat", "the cat sat on the mat", 0.5),
        ("the cat sat on the mat", "a dog ran in the park", 0.1),
        ("the cat sat on the mat", "a dog ran in the park", 0.9),
    ]
    dataset = tmp_path / "numbers.csv"
    dataset.write_text("input,output,expected\n" + "".join(f"{a},{b},{e}\n" for a, b, e in rows))
    assert (
        main(["eval", str(dataset), "--config", str(config), "--no-progress", "--output", str(tmp_path / "r.jsonl")])
        == 0
    )
    out = capsys.readouterr().out
    scores = [json.loads(line)["score"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    expected = [e for _, _, e in rows]
    agreed = sum(abs(s - e) <= 0.2 + 1e-9 for s, e in zip(scores, expected, strict=True))
    similarity = row_of(out, "similarity")
    assert similarity[1:3] == ["4", f"{agreed / 4:.3f}"] and similarity[3] == "-"
    assert similarity[4] == f"{mean_absolute_error(scores, expected):.3f}"
    # A looser tolerance agrees more.
    assert main(["eval", str(dataset), "--config", str(config), "--no-progress", "--agree-within", "1"]) == 0
    assert row_of(capsys.readouterr().out, "similarity")[2] == "1.000"


def test_min_agreement_without_expected_verdicts_or_out_of_range_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text("scorers:\n  - id: similarity\n    kind: content-similarity\n")
    dataset = tmp_path / "plain.jsonl"
    dataset.write_text(json.dumps({"input": "a", "output": "a"}) + "\n")
    args = ["eval", str(dataset), "--config", str(config), "--no-progress"]
    assert main([*args, "--min-agreement", "0.8"]) == 2
    assert "no scored item carries an expected verdict" in capsys.readouterr().err
    assert main([*args, "--min-agreement", "80"]) == 2
    assert "--min-agreement must be from 0 to 1" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input": "a", "output": "a", "expected": [1]}) + "\n")
    assert main(["eval", str(bad), "--config", str(config), "--no-progress"]) == 2
    assert "'expected' must be a number, a boolean or a label" in capsys.readouterr().err
