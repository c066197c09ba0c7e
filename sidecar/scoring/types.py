"""Immutable result types of a scorer run, with Mastra's camelCase JSON names.

``ScorerRunResult.model_dump_json()`` is the wire form (Kafka score records, ``eval --output``);
``ScorerRunResult.model_validate_json()`` reads it back. Fields marked ``exclude=True`` are
telemetry for metrics and spans (per-call outcomes, the *estimated* cost): they never enter a record,
because the reference keeps the judge record to what the provider itself reported.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

__all__ = [
    "STEP_NAMES",
    "JudgeCall",
    "JudgeCallOutcome",
    "JudgeCost",
    "JudgeErrorInfo",
    "JudgeExecution",
    "JudgeExecutionFailure",
    "JudgeExecutionSuccess",
    "JudgeStepRecord",
    "JudgeUsage",
    "NotScorableInfo",
    "ScorerJudgeResults",
    "ScorerRunResult",
    "StepName",
    "to_json_value",
]

StepName = Literal["preprocess", "analyze", "generate_score", "generate_reason"]
STEP_NAMES: tuple[StepName, ...] = ("preprocess", "analyze", "generate_score", "generate_reason")


_SCALARS = frozenset({str, int, float, bool, type(None)})


def to_json_value(value: Any) -> Any:
    """Step outputs may be pydantic models (typed scorers); the record holds their camelCase JSON."""
    if type(value) in _SCALARS:  # most leaves: skip the isinstance chain
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    return value


JsonValue = Annotated[Any, PlainSerializer(to_json_value, when_used="always")]


class _Record(BaseModel):
    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore", ser_json_inf_nan="null"
    )


class JudgeUsage(_Record):
    """Token usage normalised across providers; summed across attempts of one step."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def __add__(self, other: JudgeUsage) -> JudgeUsage:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return JudgeUsage(**{name: add(getattr(self, name), getattr(other, name)) for name in _USAGE_FIELDS})

    @property
    def is_empty(self) -> bool:
        # Spelled out: every judge call asks (pricing), and a generator over getattr costs several times more.
        return (
            self.input_tokens is None
            and self.output_tokens is None
            and self.total_tokens is None
            and self.reasoning_tokens is None
            and self.cached_input_tokens is None
            and self.cache_creation_input_tokens is None
        )


_USAGE_FIELDS: tuple[str, ...] = tuple(JudgeUsage.model_fields)


class JudgeCost(_Record):
    """A cost the provider itself reported (never an estimate)."""

    amount: float
    unit: str
    source: str


class JudgeErrorInfo(_Record):
    name: str
    message: str
    code: str | None = None


# ok: answered and used; invalid_output: answered with what the step could not use; rate_limited: 429;
# timeout; connection_error: no HTTP answer (refused, DNS, reset); error: any other HTTP error;
# cancelled: abandoned by the sidecar mid-call (shutdown, rebalance): the provider may still bill it.
JudgeCallOutcome = Literal["ok", "rate_limited", "timeout", "connection_error", "error", "invalid_output", "cancelled"]


class JudgeCall(_Record):
    """One HTTP model call inside an attempt (telemetry only: never serialised into records)."""

    outcome: JudgeCallOutcome
    duration_s: float
    status_code: int | None = None
    error_name: str | None = None
    # The provider's or the transport's message (keys redacted by the transports): for logs, never records.
    error_message: str | None = None
    usage: JudgeUsage | None = None
    estimated_cost_usd: float | None = None
    provider_cost: JudgeCost | None = None
    # The call tried a structured-output shape the server may refuse (``ChatRequest.shape_probe``) and got an
    # HTTP error that may be that refusal: it says nothing of the judge's health (the gate does not count it).
    shape_probe: bool = False

    @property
    def answered(self) -> bool:
        """The judge answered this call with a completion (usable or not): it was up."""
        return self.outcome in ("ok", "invalid_output")


class _ExecutionBase(_Record):
    prompt: str
    judge_model_id: str
    judge_provider: str | None = None
    attempt_count: int
    model_call_count: int
    duration_ms: int
    # Telemetry for metrics and spans; excluded from the record on purpose.
    step: StepName | None = Field(default=None, exclude=True)
    calls: tuple[JudgeCall, ...] = Field(default=(), exclude=True)
    estimated_cost_usd: float | None = Field(default=None, exclude=True)


class JudgeExecutionSuccess(_ExecutionBase):
    status: Literal["success"] = "success"
    output: JsonValue
    usage: JudgeUsage
    cost: JudgeCost | None = None


class JudgeExecutionFailure(_ExecutionBase):
    status: Literal["failed"] = "failed"
    output: JsonValue = None
    raw_output: str | None = None
    usage: JudgeUsage | None = None
    finish_reason: str | None = None
    error: JudgeErrorInfo


JudgeExecution = Annotated[JudgeExecutionSuccess | JudgeExecutionFailure, Field(discriminator="status")]


class JudgeStepRecord(_Record):
    executions: tuple[JudgeExecution, ...] = ()


class ScorerJudgeResults(_Record):
    preprocess: JudgeStepRecord | None = None
    analyze: JudgeStepRecord | None = None
    generate_score: JudgeStepRecord | None = None
    generate_reason: JudgeStepRecord | None = None

    def executions(self) -> tuple[JudgeExecution, ...]:
        """All executions in step order (success and failed): what usage aggregation needs."""
        out: list[JudgeExecution] = []
        for name in STEP_NAMES:
            record: JudgeStepRecord | None = getattr(self, name)
            if record is not None:
                out.extend(record.executions)
        return tuple(out)

    def with_execution(self, step: StepName, execution: JudgeExecution) -> ScorerJudgeResults:
        current: JudgeStepRecord | None = getattr(self, step)
        executions = (*(current.executions if current else ()), execution)
        # A new record rather than model_copy(update=...): about half the CPU, once per judged step.
        records = {name: getattr(self, name) for name in STEP_NAMES}
        records[step] = JudgeStepRecord(executions=executions)
        return ScorerJudgeResults(**records)


class NotScorableInfo(_Record):
    step: StepName
    reason: str


class ScorerRunResult(_Record):
    """What ``Scorer.run`` returns (and, partially filled, what ``ScorerRunError.result`` holds)."""

    run_id: str
    score: float | None = None
    # A name for the score (a category, "pass"/"fail") when the scorer gives one (``LabelledScore``):
    # destinations with a label field carry it; most scorers return a bare number.
    label: str | None = None
    reason: str | None = None
    preprocess_step_result: JsonValue = None
    analyze_step_result: JsonValue = None
    preprocess_prompt: str | None = None
    analyze_prompt: str | None = None
    generate_score_prompt: str | None = None
    generate_reason_prompt: str | None = None
    judge: ScorerJudgeResults | None = None
    # Values of personal data replaced before any step read the run, by entity (docs/redaction.md): None when
    # the scorer redacts nothing, empty when it looked and found none.
    redactions: dict[str, int] | None = None
    not_scorable: NotScorableInfo | None = None
    input: JsonValue = None
    output: JsonValue = None
    ground_truth: JsonValue = None
    request_context: JsonValue = None

    @property
    def is_scored(self) -> bool:
        return self.not_scorable is None and self.score is not None and math.isfinite(self.score)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @classmethod
    def from_json(cls, data: str | bytes) -> ScorerRunResult:
        return cls.model_validate_json(data)
