"""Mastra's comparisons of a trajectory (``sidecar.scorers.tool_use.trajectory``), from its scorer utils: against the
expected steps (``compareTrajectories``), its efficiency (``checkTrajectoryEfficiency``), a blacklist
(``checkTrajectoryBlacklist``) and its tool failures (``analyzeToolFailures``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scorers.tool_use.trajectory import ExpectedStep, Ordering, Trajectory, TrajectoryStep, js_json
from sidecar.scoring.prompting import round_to_two_decimals

__all__ = [
    "BlacklistResult",
    "EfficiencyResult",
    "ToolFailureAnalysis",
    "ToolFailurePattern",
    "TrajectoryComparison",
    "analyze_tool_failures",
    "check_trajectory_blacklist",
    "check_trajectory_efficiency",
    "compare_trajectories",
]

# The fields of each step type that an expected step may pin (Mastra's COMPARABLE_FIELDS_BY_TYPE).
COMPARABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "tool_call": ("toolArgs", "toolResult", "success"),
    "mcp_tool_call": ("toolArgs", "toolResult", "mcpServer", "success"),
    "model_generation": ("modelId", "promptTokens", "completionTokens", "finishReason"),
    "agent_run": ("agentId",),
    "workflow_step": ("stepId", "status", "output"),
    "workflow_run": ("workflowId", "status"),
    "workflow_conditional": ("conditionCount", "selectedSteps"),
    "workflow_parallel": ("branchCount", "parallelSteps"),
    "workflow_loop": ("loopType", "totalIterations"),
    "workflow_sleep": ("sleepDurationMs", "sleepType"),
    "workflow_wait_event": ("eventName", "eventReceived"),
    "processor_run": ("processorId",),
}

# Results carry Mastra's camelCase names, as its utils return them.
_CAMEL = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


# -- comparison --------------------------------------------------------------------------------------


class TrajectoryComparison(BaseModel):
    model_config = _CAMEL

    score: float
    matched_steps: int
    total_expected_steps: int
    total_actual_steps: int
    missing_steps: tuple[str, ...]
    extra_steps: tuple[str, ...]
    out_of_order_steps: tuple[str, ...]
    repeated_steps: tuple[str, ...]


def _step_matches(actual: TrajectoryStep, expected: ExpectedStep) -> bool:
    """Name, then the step type when expected, then every comparable field the expectation pins."""
    if actual.name != expected.name:
        return False
    if expected.step_type is None:
        return True
    if actual.step_type != expected.step_type:
        return False
    for name in COMPARABLE_FIELDS.get(expected.step_type, ()):
        wanted = expected.field(name)
        if wanted is None:
            continue
        got = actual.field(name)
        if got is None or js_json(got) != js_json(wanted):
            return False
    return True


def _clamped(score: float) -> float:
    return round_to_two_decimals(max(0.0, min(1.0, score)))


def _repeated(names: Sequence[str]) -> tuple[str, ...]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return tuple(name for name, count in counts.items() if count > 1)


def _result(
    score: float,
    matched: int,
    expected_names: list[str],
    actual_names: list[str],
    matched_indices: set[int],
    out_of_order: list[str],
    repeated: tuple[str, ...],
) -> TrajectoryComparison:
    wanted = set(expected_names)
    return TrajectoryComparison(
        score=_clamped(score),
        matched_steps=matched,
        total_expected_steps=len(expected_names),
        total_actual_steps=len(actual_names),
        missing_steps=tuple(n for i, n in enumerate(expected_names) if i not in matched_indices),
        extra_steps=tuple(n for n in actual_names if n not in wanted),
        out_of_order_steps=tuple(out_of_order),
        repeated_steps=repeated,
    )


def compare_trajectories(
    actual: Trajectory,
    expected: Sequence[ExpectedStep],
    *,
    ordering: Ordering = "relaxed",
    allow_repeated_steps: bool = True,
) -> TrajectoryComparison:
    """Mastra's ``compareTrajectories``: matched expected steps / expected steps, with its penalties
    (strict: half the share of extra steps; repeats when not allowed: 0.1 per repeated name), clamped to
    [0, 1] and rounded to two decimals."""
    actual_names = actual.names
    expected_names = [s.name for s in expected]
    if not expected:
        return TrajectoryComparison(
            score=1.0 if not actual.steps else 0.0,
            matched_steps=0,
            total_expected_steps=0,
            total_actual_steps=len(actual.steps),
            missing_steps=(),
            extra_steps=tuple(actual_names),
            out_of_order_steps=(),
            repeated_steps=(),
        )
    repeated = _repeated(actual_names)
    matched_indices: set[int] = set()
    out_of_order: list[str] = []
    if ordering == "strict":
        for i in range(max(len(actual_names), len(expected_names))):
            actual_name = actual_names[i] if i < len(actual_names) else None
            expected_name = expected_names[i] if i < len(expected_names) else None
            if actual_name is not None and actual_name == expected_name:
                if _step_matches(actual.steps[i], expected[i]):
                    matched_indices.add(i)
            elif actual_name and actual_name in expected_names:
                out_of_order.append(actual_name)
    elif ordering == "unordered":
        used: set[int] = set()
        for i, step in enumerate(expected):
            for j, candidate in enumerate(actual.steps):
                if j not in used and _step_matches(candidate, step):
                    matched_indices.add(i)
                    used.add(j)
                    break
    else:
        last = -1
        for i, step in enumerate(expected):
            for j in range(last + 1, len(actual.steps)):
                if actual_names[j] == step.name and _step_matches(actual.steps[j], step):
                    matched_indices.add(i)
                    last = j
                    break
            else:
                if step.name in actual_names:
                    out_of_order.append(step.name)
    matched = len(matched_indices)
    score = matched / len(expected)
    if ordering == "strict" and len(actual_names) > len(expected_names):
        extra_share = (len(actual_names) - len(expected_names)) / len(expected_names)
        score = max(0.0, score - extra_share * 0.5)
    if not allow_repeated_steps and repeated:
        score = max(0.0, score - len(repeated) * 0.1)
    return _result(score, matched, expected_names, actual_names, matched_indices, out_of_order, repeated)


# -- efficiency, blacklist, tool failures ------------------------------------------------------------


class RedundantCall(BaseModel):
    model_config = _CAMEL

    name: str
    index: int


class EfficiencyResult(BaseModel):
    model_config = _CAMEL

    score: float
    total_steps: int
    over_step_budget: bool
    total_tokens: int
    over_token_budget: bool
    total_duration_ms: float
    over_duration_budget: bool
    redundant_calls: tuple[RedundantCall, ...]


def _over(total: float, budget: float) -> float:
    if total <= budget:
        return 1.0
    # A zero budget overrun is infinitely over in JavaScript (1 − x/0 = −Infinity), clamped to 0.
    return max(0.0, 1 - (total - budget) / budget) if budget > 0 else 0.0


def check_trajectory_efficiency(
    trajectory: Trajectory,
    *,
    max_steps: int | None = None,
    max_total_tokens: int | None = None,
    max_total_duration_ms: float | None = None,
    no_redundant_calls: bool = True,
) -> EfficiencyResult:
    """Mastra's ``checkTrajectoryEfficiency``: the mean of the budgets given (1 within budget, else 1 minus
    the overrun's share) and, when asked, 1 − 0.2 per redundant call (same tool, same arguments, in a row)."""
    steps = trajectory.steps
    total_tokens = sum(
        int(s.field("promptTokens") or 0) + int(s.field("completionTokens") or 0)
        for s in steps
        if s.step_type == "model_generation"
    )
    total_duration = (
        trajectory.total_duration_ms
        if trajectory.total_duration_ms is not None
        else sum(s.duration_ms or 0 for s in steps)
    )
    redundant: list[RedundantCall] = []
    if no_redundant_calls:
        for i in range(1, len(steps)):
            prev, curr = steps[i - 1], steps[i]
            if (
                prev.name == curr.name
                and prev.step_type == curr.step_type
                and prev.step_type in ("tool_call", "mcp_tool_call")
                and js_json(prev.tool_args) == js_json(curr.tool_args)
            ):
                redundant.append(RedundantCall(name=curr.name, index=i))
    dimensions: list[float] = []
    if max_steps is not None:
        dimensions.append(_over(len(steps), max_steps))
    if max_total_tokens is not None:
        dimensions.append(_over(total_tokens, max_total_tokens))
    if max_total_duration_ms is not None:
        dimensions.append(_over(total_duration, max_total_duration_ms))
    if no_redundant_calls:
        dimensions.append(1.0 if not redundant else max(0.0, 1 - len(redundant) * 0.2))
    score = sum(dimensions) / len(dimensions) if dimensions else 1.0
    return EfficiencyResult(
        score=_clamped(score),
        total_steps=len(steps),
        over_step_budget=max_steps is not None and len(steps) > max_steps,
        total_tokens=total_tokens,
        over_token_budget=max_total_tokens is not None and total_tokens > max_total_tokens,
        total_duration_ms=total_duration,
        over_duration_budget=max_total_duration_ms is not None and total_duration > max_total_duration_ms,
        redundant_calls=tuple(redundant),
    )


class BlacklistResult(BaseModel):
    model_config = _CAMEL

    score: float
    violated_tools: tuple[str, ...]
    violated_sequences: tuple[tuple[str, ...], ...]


def check_trajectory_blacklist(
    trajectory: Trajectory,
    *,
    blacklisted_tools: Sequence[str] = (),
    blacklisted_sequences: Sequence[Sequence[str]] = (),
) -> BlacklistResult:
    """Mastra's ``checkTrajectoryBlacklist``: 0 when a forbidden tool, or a forbidden run of consecutive
    steps, appears; else 1."""
    names = trajectory.names
    tools = tuple(t for t in blacklisted_tools if t in names)
    sequences: list[tuple[str, ...]] = []
    for sequence in blacklisted_sequences:
        seq = list(sequence)
        if seq and any(names[i : i + len(seq)] == seq for i in range(len(names) - len(seq) + 1)):
            sequences.append(tuple(seq))
    return BlacklistResult(
        score=0.0 if tools or sequences else 1.0, violated_tools=tools, violated_sequences=tuple(sequences)
    )


class ToolFailurePattern(BaseModel):
    model_config = _CAMEL

    tool_name: str
    retry_count: int
    fell_back_to_alternative: bool
    alternative_tool: str | None = None
    eventually_succeeded: bool


class ToolFailureAnalysis(BaseModel):
    model_config = _CAMEL

    score: float
    patterns: tuple[ToolFailurePattern, ...]
    total_retries: int
    excessive_retry_tools: tuple[str, ...]


def analyze_tool_failures(trajectory: Trajectory, *, max_retries_per_tool: int = 2) -> ToolFailureAnalysis:
    """Mastra's ``analyzeToolFailures``: runs of calls to one tool after a failed call are retries; each
    retry beyond ``max_retries_per_tool`` costs 0.2."""
    calls = [s for s in trajectory.steps if s.step_type in ("tool_call", "mcp_tool_call")]
    patterns: list[ToolFailurePattern] = []
    total = 0
    i = 0
    while i < len(calls):
        retries = 0
        j = i + 1
        while j < len(calls) and calls[j].name == calls[i].name:
            if calls[j - 1].success is False:
                retries += 1
            j += 1
        if retries > 0:
            last_ok = calls[j - 1].success is not False
            following = calls[j] if j < len(calls) else None
            fell_back = following is not None and not last_ok
            patterns.append(
                ToolFailurePattern(
                    tool_name=calls[i].name,
                    retry_count=retries,
                    fell_back_to_alternative=fell_back,
                    alternative_tool=following.name if fell_back and following is not None else None,
                    eventually_succeeded=last_ok,
                )
            )
            total += retries
        i = j
    excess = sum(max(0, p.retry_count - max_retries_per_tool) for p in patterns)
    return ToolFailureAnalysis(
        score=_clamped(max(0.0, 1 - excess * 0.2)) if calls else 1.0,
        patterns=tuple(patterns),
        total_retries=total,
        excessive_retry_tools=tuple(p.tool_name for p in patterns if p.retry_count > max_retries_per_tool),
    )
