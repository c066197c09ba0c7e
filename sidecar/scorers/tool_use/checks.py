"""Mastra's quick checks (``checks.*`` of ``code/checks``), ported as one kind that runs a list of them.

In Mastra each check is its own scorer scoring 1 or 0 (``similarity`` without a threshold: the similarity
itself). The ``checks`` kind runs the configured list on one run: preprocess (every check's result) →
generate_score (the mean of the checks' scores: with one check, exactly that check's score).

Text checks read the text of the output's assistant messages (each message's last text part, joined with
a space for includes/excludes/similarity and with nothing for equals/matches, as Mastra joins them); tool
checks read the turn's tool calls (``sidecar.scorers.tools``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from sidecar.scorers.registry import scorer_kind
from sidecar.scorers.string_similarity import compare_two_strings
from sidecar.scorers.text import get_text_content_from_message
from sidecar.scorers.tools import as_messages, extract_tool_calls, tool_invocations
from sidecar.scorers.tools_common import apply_scale, options_version, scale_of
from sidecar.scoring import AgentMessage, JudgeModel, Scorer, StepContext, create_scorer
from sidecar.scoring.types import to_json_value

__all__ = [
    "Check",
    "CheckResult",
    "ChecksOptions",
    "ChecksPreprocess",
    "compile_js_regex",
    "create_checks_scorer",
]

_CHECK = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class _CheckBase(BaseModel):
    model_config = _CHECK

    # Mastra's ScorerIdentityOptions: a name for this check in the results (default: Mastra's scorer id).
    id: str | None = None
    name: str | None = None


class Includes(_CheckBase):
    type: Literal["includes"]
    expected: str
    ignore_case: bool = True


class Excludes(_CheckBase):
    type: Literal["excludes"]
    unwanted: str
    ignore_case: bool = True


class Equals(_CheckBase):
    type: Literal["equals"]
    expected: str
    ignore_case: bool = True


_JS_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "u": 0, "g": 0, "d": 0, "y": 0, "v": 0}


def compile_js_regex(pattern: str, flags: str = "", *, exact: bool = False) -> re.Pattern[str]:
    """A JavaScript regular expression (source and flags) as Python's nearest equivalent.

    ``\\d``, ``\\w`` and ``\\b`` are ASCII in JavaScript, so the pattern is compiled ASCII-only (``\\s`` then
    misses the rarer Unicode spaces JavaScript counts); ``g``, ``u``, ``d`` and ``v`` change nothing for one
    test of a fresh expression; ``y`` (sticky) anchors the match at the start. Syntax only JavaScript has
    (``(?<name>…)`` named groups in Python 3.11, ``\\p{…}``) is an options error, not a silent mismatch.
    """
    unknown = set(flags) - set(_JS_FLAGS)
    if unknown or len(set(flags)) != len(flags):
        raise ValueError(f"invalid regular expression flags {flags!r}")
    value = re.ASCII
    for flag in flags:
        value |= _JS_FLAGS[flag]
    if exact:
        # Mastra anchors the source as written (`^${source}$`); JavaScript's `$` without `m` is the very end.
        source = f"^{pattern}" + ("$" if "m" in flags else r"\Z")
    elif "y" in flags:
        source = rf"\A(?:{pattern})"
    else:
        source = pattern
    try:
        return re.compile(source, value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression /{pattern}/{flags}: {exc}") from None


class Matches(_CheckBase):
    type: Literal["matches"]
    pattern: str
    flags: str = ""
    exact: bool = False

    @model_validator(mode="after")
    def _compiles(self) -> Matches:
        compile_js_regex(self.pattern, self.flags, exact=self.exact)
        return self


class Similarity(_CheckBase):
    type: Literal["similarity"]
    expected: str
    threshold: float | None = None
    ignore_case: bool = True


class CalledTool(_CheckBase):
    type: Literal["calledTool"]
    tool_name: str
    times: int = 1


class DidNotCall(_CheckBase):
    type: Literal["didNotCall"]
    tool_name: str


class ToolOrder(_CheckBase):
    type: Literal["toolOrder"]
    expected_order: tuple[str, ...]


class MaxToolCalls(_CheckBase):
    type: Literal["maxToolCalls"]
    max: int


class UsedNoTools(_CheckBase):
    type: Literal["usedNoTools"]


class NoToolErrors(_CheckBase):
    type: Literal["noToolErrors"]


Check = Annotated[
    Includes
    | Excludes
    | Equals
    | Matches
    | Similarity
    | CalledTool
    | DidNotCall
    | ToolOrder
    | MaxToolCalls
    | UsedNoTools
    | NoToolErrors,
    Field(discriminator="type"),
]

# Mastra's scorer id of each check (a check's default name in the results).
DEFAULT_IDS: dict[str, str] = {
    "includes": "check-includes",
    "excludes": "check-excludes",
    "equals": "check-equals",
    "matches": "check-matches",
    "similarity": "check-similarity",
    "calledTool": "check-called-tool",
    "didNotCall": "check-did-not-call",
    "toolOrder": "check-tool-order",
    "maxToolCalls": "check-max-tool-calls",
    "usedNoTools": "check-used-no-tools",
    "noToolErrors": "check-no-tool-errors",
}
_BY_LOWER = {name.lower().replace("-", "").replace("_", ""): name for name in DEFAULT_IDS}


class ChecksOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    checks: tuple[Check, ...] = Field(min_length=1)
    # Not in Mastra: score × scale, for every kind alike. Falsy → 1.
    scale: float | None = None

    @field_validator("checks", mode="before")
    @classmethod
    def _type_spellings(cls, value: Any) -> Any:
        # Users may write a check's type as Mastra names it (calledTool) or as called_tool / called-tool.
        if not isinstance(value, list | tuple):
            return value
        out = []
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("type"), str):
                key = item["type"].lower().replace("-", "").replace("_", "")
                item = {**item, "type": _BY_LOWER.get(key, item["type"])}
            out.append(item)
        return out


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    id: str
    type: str
    score: float
    passed: bool
    # What the check saw (Mastra's preprocess result of that check), for the record.
    details: dict[str, Any]


class ChecksPreprocess(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    results: tuple[CheckResult, ...]


def _assistant_text(run_output: Any, separator: str) -> str:
    texts = []
    for message in as_messages(run_output):
        role = message.role if isinstance(message, AgentMessage) else to_json_value(message).get("role")
        if role == "assistant":
            texts.append(get_text_content_from_message(message))
    return separator.join(texts)


def _text(ctx: StepContext, separator: str, ignore_case: bool, target: str) -> tuple[str, str]:
    output = _assistant_text(ctx.run.output, separator)
    return (output.lower(), target.lower()) if ignore_case else (output, target)


def _verdict(passed: bool, details: dict[str, Any]) -> tuple[float, bool, dict[str, Any]]:
    return (1.0 if passed else 0.0), passed, details


def _run_check(check: Any, ctx: StepContext) -> tuple[float, bool, dict[str, Any]]:
    if isinstance(check, Includes):
        output, target = _text(ctx, " ", check.ignore_case, check.expected)
        return _verdict(target in output, {"output": output, "target": target, "found": target in output})
    if isinstance(check, Excludes):
        output, target = _text(ctx, " ", check.ignore_case, check.unwanted)
        return _verdict(target not in output, {"output": output, "target": target, "excluded": target not in output})
    if isinstance(check, Equals):
        output, target = _text(ctx, "", check.ignore_case, check.expected)
        return _verdict(output == target, {"output": output, "target": target, "isEqual": output == target})
    if isinstance(check, Matches):
        output = _assistant_text(ctx.run.output, "")
        regex = compile_js_regex(check.pattern, check.flags, exact=check.exact)
        matched = regex.search(output) is not None
        return _verdict(matched, {"output": output, "pattern": f"/{check.pattern}/{check.flags}", "matched": matched})
    if isinstance(check, Similarity):
        output, target = _text(ctx, " ", check.ignore_case, check.expected)
        similarity = compare_two_strings(output, target)
        details = {"output": output, "target": target, "score": similarity, "threshold": check.threshold}
        if check.threshold is not None:
            return _verdict(similarity >= check.threshold, details)
        return similarity, similarity == 1.0, details
    return _run_tool_check(check, ctx)


def _run_tool_check(check: Any, ctx: StepContext) -> tuple[float, bool, dict[str, Any]]:
    if isinstance(check, NoToolErrors):
        invocations = tool_invocations(ctx.run.input, ctx.run.output)
        errors = sum(1 for c in invocations if c.failed)
        return _verdict(errors == 0, {"errorCount": errors, "totalCalls": len(invocations), "passed": errors == 0})
    tools = extract_tool_calls(ctx.run.input, ctx.run.output).tools
    if isinstance(check, CalledTool):
        count = tools.count(check.tool_name)
        passed = count >= check.times
        details = {"toolName": check.tool_name, "expectedTimes": check.times, "actualCount": count, "passed": passed}
        return _verdict(passed, details)
    if isinstance(check, DidNotCall):
        count = tools.count(check.tool_name)
        return _verdict(count == 0, {"toolName": check.tool_name, "count": count, "passed": count == 0})
    if isinstance(check, ToolOrder):
        # The expected order must appear as a subsequence of the calls (other calls may come between).
        position = 0
        for tool in tools:
            if position < len(check.expected_order) and tool == check.expected_order[position]:
                position += 1
        passed = position == len(check.expected_order)
        details = {"actualTools": tools, "expectedOrder": list(check.expected_order), "passed": passed}
        return _verdict(passed, details)
    if isinstance(check, MaxToolCalls):
        passed = len(tools) <= check.max
        return _verdict(passed, {"count": len(tools), "max": check.max, "passed": passed})
    if isinstance(check, UsedNoTools):
        return _verdict(not tools, {"count": len(tools), "passed": not tools})
    raise TypeError(f"unknown check {type(check).__name__}")


def create_checks_scorer(options: ChecksOptions | dict[str, Any] | None = None, **kwargs: Any) -> Scorer:
    """``checks``: a list of ``{type: includes|excludes|equals|matches|similarity|calledTool|didNotCall|
    toolOrder|maxToolCalls|usedNoTools|noToolErrors, …}``, and ``scale``."""
    opts = (
        options if isinstance(options, ChecksOptions) else ChecksOptions.model_validate({**(options or {}), **kwargs})
    )
    scale = scale_of(opts.scale)

    def preprocess(ctx: StepContext) -> ChecksPreprocess:
        results = []
        for check in opts.checks:
            score, passed, details = _run_check(check, ctx)
            results.append(
                CheckResult(
                    id=check.id or check.name or DEFAULT_IDS[check.type],
                    type=check.type,
                    score=score,
                    passed=passed,
                    details=details,
                )
            )
        return ChecksPreprocess(results=tuple(results))

    def generate_score(ctx: StepContext) -> float:
        result: ChecksPreprocess = ctx.results.preprocess_step_result
        mean = sum(r.score for r in result.results) / len(result.results)
        return apply_scale(mean, scale)

    names = ", ".join(check.id or check.name or DEFAULT_IDS[check.type] for check in opts.checks)
    return (
        create_scorer(id="checks", name="Quick Checks", description=f"Quick checks: {names}")
        .preprocess(preprocess)
        .generate_score(generate_score)
        .with_version(options_version(opts))
    )


@scorer_kind(
    "checks",
    options=ChecksOptions,
    needs_judge=False,
    description="share of quick checks passed (text includes/excludes/equals/matches/similarity; tool calls)",
    needs=("output", "tool_calls"),
)
def _checks_kind(judge: JudgeModel | None, options: ChecksOptions) -> Scorer:
    return create_checks_scorer(options)
