"""A disagreement made into an example row of a judge written in YAML (``examples_file``): the run's ``input`` and
``output`` as the judge's template reads them, the person's verdict in the judge's own terms (``expected``), their
comment as the ``reason``; and, for the reviewer, where it came from (ignored by the judge: it does not change the
scorer's version)."""

from __future__ import annotations

from typing import Any

from sidecar.core import ScorerRunRequest
from sidecar.scorers.custom.llm_judge import LlmJudgeOptions
from sidecar.scorers.custom.llm_judge_output import BooleanOutput, CategoriesOutput, NumberOutput
from sidecar.scorers.custom.llm_judge_variables import run_text
from sidecar.scoring.agreement import judge_boolean
from sidecar.scoring.steps import ScorerRun

__all__ = ["Unconvertible", "example_row", "expected_verdict"]


class Unconvertible(ValueError):
    """A person's verdict the judge's output type cannot express (a label for a number judge...)."""


def expected_verdict(human: Any, options: LlmJudgeOptions) -> bool | float | str:
    """The person's verdict (a number on the score's scale, a boolean, a label) as the judge answers: a number of
    the output's range, a boolean, or one of its labels."""
    output = options.output
    scale = 1.0 if options.scale is None else options.scale
    if isinstance(output, CategoriesOutput):
        if isinstance(human, str) and human in output.labels:
            return human
        raise Unconvertible(f"{human!r} is not one of the judge's labels ({', '.join(output.labels)})")
    if isinstance(output, BooleanOutput):
        if isinstance(human, bool):
            return human
        if isinstance(human, str) and human.lower() in ("pass", "fail", "true", "false", "yes", "no"):
            return judge_boolean(0.0, human)
        if isinstance(human, int | float):
            return judge_boolean(float(human), None, scale)
        raise Unconvertible(f"{human!r} is not a boolean verdict")
    assert isinstance(output, NumberOutput)
    if isinstance(human, bool):
        return output.max if human else output.min
    if isinstance(human, int | float):
        share = min(1.0, max(0.0, float(human) / scale))
        return round(output.min + share * (output.max - output.min), 6)
    raise Unconvertible(f"{human!r} is not a number")


def example_row(pair: dict[str, Any], request: ScorerRunRequest, options: LlmJudgeOptions) -> dict[str, Any]:
    """The example a disagreement makes (``pair``: its record on the pairs topic; ``request``: its run, rebuilt from
    the traces topic as the service built it)."""
    run = ScorerRun(input=request.input, output=request.output, run_id=str(pair.get("scoreId", "")))
    return {
        "input": str(run_text("input", run)),
        "output": str(run_text("output", run)),
        "expected": expected_verdict(pair["humanValue"], options),
        "reason": pair.get("comment") or "",
        # For the reviewer: where it came from, what the judge said.
        "judged": pair.get("judgeLabel") if pair.get("judgeLabel") is not None else pair.get("judgeScore"),
        "judgeReason": pair.get("judgeReason"),
        "author": pair.get("author"),
        "scoreId": pair.get("scoreId"),
        "pairId": pair.get("pairId"),
        "traceId": pair.get("traceId"),
        "spanId": pair.get("spanId"),
        "pairedAt": pair.get("pairedAt"),
    }
