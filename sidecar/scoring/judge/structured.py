"""One prompt step's judge execution: attempts, the structured-output fallback, the record.

Attempt 1 asks for the step's schema natively (``response_format`` json_schema). If what comes back
fails *format* validation (unparseable, schema violation, no object), a single fallback attempt asks
for JSON in the prompt instead. Provider errors never trigger the fallback: a 503 is not the model
misunderstanding the format. ``generate_reason`` is free text and has exactly one attempt.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic import BaseModel, ValidationError

from sidecar.scoring.judge.client import CallResult, JudgeClient
from sidecar.scoring.judge.errors import (
    JSONParseError,
    JudgeError,
    NoObjectGeneratedError,
    StructuredOutputError,
    TypeValidationError,
)
from sidecar.scoring.judge.model import Judge
from sidecar.scoring.judge.pricing import estimate_cost_usd
from sidecar.scoring.judge.protocol import ChatRequest, ChatResponse
from sidecar.scoring.types import (
    JudgeCall,
    JudgeCost,
    JudgeErrorInfo,
    JudgeExecution,
    JudgeExecutionFailure,
    JudgeExecutionSuccess,
    JudgeUsage,
    StepName,
)

__all__ = ["StepOutcome", "execute_prompt_step", "fallback_prompt", "parse_structured"]

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class StepOutcome:
    execution: JudgeExecution
    value: Any  # validated output (model instance or text); None when the execution failed
    error: JudgeError | None


def parse_structured(text: str | None, schema: type[BaseModel], finish_reason: str | None) -> BaseModel:
    """Strictly validate judge text against the schema; every failure is a format error."""
    if text is None or not text.strip():
        raise NoObjectGeneratedError("the judge returned no content", raw_output=text, finish_reason=finish_reason)
    candidate = text.strip()
    fenced = _FENCE.match(candidate)
    if fenced:
        candidate = fenced.group(1).strip()
    try:
        data = pydantic_core.from_json(candidate)
    except ValueError as exc:
        raise JSONParseError(
            f"the judge's output is not valid JSON: {exc}", raw_output=text, finish_reason=finish_reason
        ) from exc
    if not isinstance(data, dict):
        raise NoObjectGeneratedError(
            f"the judge returned JSON {type(data).__name__}, not an object",
            raw_output=text,
            finish_reason=finish_reason,
        )
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()[:5])
        raise TypeValidationError(
            f"the judge's output does not match the schema: {problems}",
            raw_output=text,
            finish_reason=finish_reason,
        ) from exc


# Generating a JSON schema is costly (docs/benchmarks.md): once per schema class, not once per judge call. The
# cache keeps the JSON text (a fresh dict per call, so no caller can alter another's schema) and does
# not keep dynamically created schema classes alive.
_schema_texts: weakref.WeakKeyDictionary[type[BaseModel], str] = weakref.WeakKeyDictionary()


def _schema_text(schema: type[BaseModel]) -> str:
    text = _schema_texts.get(schema)
    if text is None:
        text = _schema_texts[schema] = json.dumps(schema.model_json_schema(by_alias=True))
    return text


_response_formats: weakref.WeakKeyDictionary[type[BaseModel], dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


def native_response_format(schema: type[BaseModel], step: StepName) -> Mapping[str, Any]:
    """The ``response_format`` for native schema mode, built once per schema and step.

    Shared between calls: transports must treat it as read-only (the litellm transport copies it deeply,
    since providers' adapters may rewrite schemas in place).
    """
    per_step = _response_formats.get(schema)  # not setdefault: that makes a weak reference on every call
    if per_step is None:
        per_step = _response_formats[schema] = {}
    response_format = per_step.get(step)
    if response_format is None:
        schema_json = json.loads(_schema_text(schema))
        response_format = per_step[step] = {
            "type": "json_schema",
            "json_schema": {"name": f"{step}_output", "schema": schema_json},
        }
    return response_format


def fallback_prompt(prompt: str, schema: type[BaseModel]) -> str:
    return (
        f"{prompt}\n\nRespond with a single JSON object and nothing else (no prose, no code fence). "
        f"It must match this JSON Schema:\n{_schema_text(schema)}"
    )


def _messages(judge: Judge, prompt: str) -> tuple[dict[str, str], ...]:
    if judge.instructions:
        return ({"role": "system", "content": judge.instructions}, {"role": "user", "content": prompt})
    return ({"role": "user", "content": prompt},)


def _sum_usage(responses: list[ChatResponse]) -> JudgeUsage | None:
    if len(responses) == 1:  # the usual step: one answer
        return responses[0].usage
    usages = [r.usage for r in responses if r.usage is not None]
    if not usages:
        return None
    total = usages[0]
    for usage in usages[1:]:
        total = total + usage
    return total


def _sum_cost(responses: list[ChatResponse]) -> JudgeCost | None:
    if len(responses) == 1:
        return responses[0].provider_cost
    costs = [r.provider_cost for r in responses if r.provider_cost is not None]
    if not costs:
        return None
    return JudgeCost(amount=sum(c.amount for c in costs), unit=costs[0].unit, source=costs[0].source)


def _accept_text(response: ChatResponse) -> str:
    text = response.text
    if text is None or not text.strip():
        raise NoObjectGeneratedError(
            "the judge returned no text", raw_output=text, finish_reason=response.finish_reason
        )
    return text.strip()


def _accept_schema(schema: type[BaseModel]) -> Callable[[ChatResponse], BaseModel]:
    def accept(response: ChatResponse) -> BaseModel:
        return parse_structured(response.text, schema, response.finish_reason)

    return accept


async def execute_prompt_step(
    *,
    client: JudgeClient,
    judge: Judge,
    step: StepName,
    prompt: str,
    output_schema: type[BaseModel] | None,
    started: float,
    scorer_id: str = "",
) -> StepOutcome:
    """Run the step's judge call(s); ``started`` is ``perf_counter()`` from before create_prompt."""
    model = judge.model
    responses: list[ChatResponse] = []
    calls: list[JudgeCall] = []
    attempts = 0

    async def attempt(
        text: str, response_format: Mapping[str, Any] | None, accept: Callable[[ChatResponse], Any]
    ) -> CallResult:
        nonlocal attempts
        attempts += 1
        request = ChatRequest(_messages(judge, text), response_format, model.timeout_s, scorer_id, step)
        result = await client.call(request, accept)
        calls.extend(result.calls)
        if result.response is not None:
            responses.append(result.response)
        return result

    def finish(
        *,
        value: Any = None,
        error: JudgeError | None = None,
        raw: str | None = None,
        finish_reason: str | None = None,
    ) -> StepOutcome:
        usage = _sum_usage(responses)
        answered = [call for call in calls if call.answered]
        if len(answered) == 1 and len(responses) == 1 and client.model.litellm_model == model.litellm_model:
            # One answer: the step's usage is that call's, already priced by the client.
            estimated_cost = answered[0].estimated_cost_usd
        else:
            estimated_cost = estimate_cost_usd(model.litellm_model, usage)
        common: dict[str, Any] = {
            "prompt": prompt,
            "judge_model_id": model.model_name,
            "judge_provider": model.provider,
            "attempt_count": attempts,
            "model_call_count": len(responses),
            "duration_ms": int((time.perf_counter() - started) * 1000),
            "step": step,
            "calls": tuple(calls),
            "estimated_cost_usd": estimated_cost,
        }
        if error is None:
            execution: JudgeExecution = JudgeExecutionSuccess(
                output=value, usage=usage or JudgeUsage(), cost=_sum_cost(responses), **common
            )
            return StepOutcome(execution, value, None)
        failure = JudgeExecutionFailure(
            raw_output=raw,
            usage=usage,
            finish_reason=finish_reason,
            error=JudgeErrorInfo(name=error.name, message=error.message, code=error.code),
            **common,
        )
        return StepOutcome(failure, None, error)

    def failed(error: JudgeError, raw_before: str | None = None) -> StepOutcome:
        if isinstance(error, StructuredOutputError):
            return finish(error=error, raw=error.raw_output, finish_reason=error.finish_reason)
        return finish(error=error, raw=raw_before)

    if output_schema is None:  # free text (generate_reason): one attempt, no schema
        result = await attempt(prompt, None, _accept_text)
        return finish(value=result.value) if result.error is None else failed(result.error)

    accept = _accept_schema(output_schema)
    native = model.structured_output == "json_schema"
    first_text = prompt if native else fallback_prompt(prompt, output_schema)
    result = await attempt(first_text, native_response_format(output_schema, step) if native else None, accept)
    if result.error is None:
        return finish(value=result.value)
    if not native or not isinstance(result.error, StructuredOutputError):
        return failed(result.error)
    first_raw = result.error.raw_output

    # The single fallback attempt: JSON requested in the prompt, no native schema mode.
    result = await attempt(fallback_prompt(prompt, output_schema), None, accept)
    return finish(value=result.value) if result.error is None else failed(result.error, first_raw)
