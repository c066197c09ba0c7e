"""One prompt step's judge execution: attempts, the structured-output shapes and fallback, the record.

The step asks for its schema in the shape the judge's server takes (``sidecar.scoring.judge.negotiation``):
``json_schema`` (native structured outputs), ``json_object`` with the schema (JSON mode, the schema also in the
prompt), or ``prompt`` (JSON asked in the prompt alone). While ``structured_output: auto`` is still learning,
the shapes are tried in that order, each richer one as a *probe* the server may refuse (then the next one goes
at once). If what comes back fails *format* validation (unparseable, schema violation, no object), a single
fallback attempt asks for JSON in the prompt instead. Provider errors never trigger the fallback: a 503 is not
the model misunderstanding the format. ``generate_reason`` is free text and has exactly one attempt.

An answer to the ``prompt`` shape (no grammar held the model to JSON) is *repaired* when it is not JSON as it
stands: the object is found in prose or a code fence and mended (quotes, trailing commas, an unclosed brace)
with ``json_repair``; what comes out is validated as strictly as any answer.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import json_repair
import pydantic_core
from pydantic import BaseModel, ValidationError

from sidecar.scoring.judge.client import CallResult, JudgeClient
from sidecar.scoring.judge.errors import (
    JSONParseError,
    JudgeError,
    NoObjectGeneratedError,
    ProviderError,
    StructuredOutputError,
    TypeValidationError,
)
from sidecar.scoring.judge.model import Judge
from sidecar.scoring.judge.negotiation import Shape
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

__all__ = [
    "StepOutcome",
    "execute_prompt_step",
    "fallback_prompt",
    "json_object_response_format",
    "native_response_format",
    "parse_structured",
]

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
# Longest answer the repair reads (json_repair is pure Python: a rambling answer up to max_tokens stays cheap).
MAX_REPAIR_CHARS = 32_768


@dataclass(frozen=True, slots=True)
class StepOutcome:
    execution: JudgeExecution
    value: Any  # validated output (model instance or text); None when the execution failed
    error: JudgeError | None


def _repaired(text: str) -> Any:
    """The JSON object ``json_repair`` finds in ``text`` (prose around it, a fence, broken quotes or commas), or
    ``None`` when it finds none."""
    if len(text) > MAX_REPAIR_CHARS:
        return None
    # The object as the model framed it first (from its first brace to its last, or to the end when it never
    # closed it), then the whole text: the library reads prose before an object as JSON of its own (a "#" as a
    # comment to the end of the line).
    start, end = text.find("{"), text.rfind("}")
    candidates = [text[start : end + 1]] if 0 <= start < end else []
    if start >= 0:
        candidates.append(text[start:])
    candidates.append(text)
    for candidate in candidates:
        try:
            data = json_repair.loads(candidate)
        except Exception:  # a repair that fails is an answer without JSON, whatever the library raised
            continue
        if isinstance(data, dict) and data:
            return data
    return None


def parse_structured(
    text: str | None, schema: type[BaseModel], finish_reason: str | None, *, repair: bool = False
) -> BaseModel:
    """Strictly validate judge text against the schema; every failure is a format error. ``repair``: an answer
    that is not JSON as it stands is mended first (see the module doc), then validated as strictly."""
    if text is None or not text.strip():
        raise NoObjectGeneratedError("the judge returned no content", raw_output=text, finish_reason=finish_reason)
    candidate = text.strip()
    fenced = _FENCE.match(candidate)
    if fenced:
        candidate = fenced.group(1).strip()
    try:
        data = pydantic_core.from_json(candidate)
    except ValueError as exc:
        data = _repaired(candidate) if repair else None
        if data is None:
            raise JSONParseError(
                f"the judge's output is not valid JSON: {exc}", raw_output=text, finish_reason=finish_reason
            ) from exc
    if not isinstance(data, dict) and repair:
        data = _repaired(candidate) or data
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


def json_object_response_format(schema: type[BaseModel]) -> Mapping[str, Any]:
    """JSON mode with the schema: ``schema`` is what llama.cpp's servers constrain the grammar by, ``value`` what
    TGI does; OpenAI-style servers take ``json_object`` and ignore both (the prompt carries the schema too)."""
    schema_json = json.loads(_schema_text(schema))
    return {"type": "json_object", "schema": schema_json, "value": schema_json}


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


def _accept_schema(schema: type[BaseModel], *, repair: bool = False) -> Callable[[ChatResponse], BaseModel]:
    def accept(response: ChatResponse) -> BaseModel:
        return parse_structured(response.text, schema, response.finish_reason, repair=repair)

    return accept


def _request_for(shape: Shape, prompt: str, schema: type[BaseModel], step: StepName) -> tuple[str, Any]:
    """The user message and ``response_format`` of ``shape``."""
    if shape == "json_schema":
        return prompt, native_response_format(schema, step)
    if shape == "json_object":  # JSON mode needs the word JSON in the messages (OpenAI refuses it otherwise)
        return fallback_prompt(prompt, schema), json_object_response_format(schema)
    return fallback_prompt(prompt, schema), None


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
        text: str,
        response_format: Mapping[str, Any] | None,
        accept: Callable[[ChatResponse], Any],
        *,
        shape_probe: bool = False,
    ) -> CallResult:
        nonlocal attempts
        attempts += 1
        request = ChatRequest(
            _messages(judge, text), response_format, model.timeout_s, scorer_id, step, shape_probe=shape_probe
        )
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

    # The shapes the judge's server takes (one once known), richest first; all but the last tried as probes.
    negotiation = client.shapes
    shapes = negotiation.shapes()
    refused: list[tuple[Shape, ProviderError]] = []
    for i, shape in enumerate(shapes):
        text, response_format = _request_for(shape, prompt, output_schema, step)
        accept = _accept_schema(output_schema, repair=shape == "prompt")
        result = await attempt(text, response_format, accept, shape_probe=i < len(shapes) - 1)
        if result.shape_refused and isinstance(result.error, ProviderError):
            refused.append((shape, result.error))
            continue
        if result.response is not None:  # answered: the server takes this shape
            negotiation.answered(shape, refused)
        break
    if result.error is None:
        return finish(value=result.value)
    if shape == "prompt" or not isinstance(result.error, StructuredOutputError):
        return failed(result.error)
    first_raw = result.error.raw_output

    # The single fallback attempt: JSON requested in the prompt, no response_format, the answer repaired.
    result = await attempt(fallback_prompt(prompt, output_schema), None, _accept_schema(output_schema, repair=True))
    return finish(value=result.value) if result.error is None else failed(result.error, first_raw)
