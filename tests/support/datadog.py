"""A Datadog stand-in on loopback: the LLM Observability evaluation-metric intake
(``POST /api/intake/llm-obs/v2/eval-metric``) as Datadog answers it.

Every request is validated against the shape ``ddtrace`` sends (``ddtrace/llmobs/_writer.py``:
``{"data": {"type": "evaluation_metric", "attributes": {"metrics": [LLMObsEvaluationMetricEvent...]}}}``)
with the documented rules on top: a label of ASCII letters, digits and ``_`` starting with a letter (at most
200), the value field of the metric type, ``pass``/``fail`` assessments, ``key:value`` tags, and, for spans
that reached Datadog over OTLP, the ``source:otel`` tag with decimal ids. The model forbids fields ddtrace
does not send. Answers: 202 when stored, 400 ``{"errors": [...]}`` for a payload it refuses, 403 for an API
key it does not know, 413 over ``max_body_bytes`` (the real intake's limit is 5 MB; tests lower it), and
whatever faults a test scripts (``faults``, ``always``: a 429 with ``Retry-After``). ``refuse_labels`` makes
labels it refuses for good (a permanent 400). ``stop``/``start`` take it down and up on its port.

Tests read back ``metrics`` (every evaluation stored, in order: Datadog has no idempotency key, a second
submission is a second evaluation) and ``requests``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from tests.support.loopback import serve_on_loopback

__all__ = ["API_KEY", "DatadogStandIn", "EvalMetric"]

API_KEY = "dd-stand-in-api-key-0123456789abcdef"
Decimal = Annotated[str, StringConstraints(pattern=r"^[0-9]+$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SpanJoin(_Strict):
    span_id: Decimal
    trace_id: Decimal


class JoinOn(_Strict):
    span: SpanJoin


class EvalMetric(_Strict):
    """One ``LLMObsEvaluationMetricEvent`` (ddtrace), as the intake takes it."""

    join_on: JoinOn
    metric_type: Literal["score", "categorical", "boolean"]
    label: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,199}$")]
    categorical_value: str | None = None
    score_value: float | int | None = None
    boolean_value: bool | None = None
    ml_app: Annotated[str, StringConstraints(min_length=1)]
    timestamp_ms: int = Field(gt=0)
    tags: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_:./-]*:.*$", max_length=200)]] = []
    assessment: Literal["pass", "fail"] | None = None
    reasoning: str | None = None

    @model_validator(mode="after")
    def _value_of_its_type(self) -> EvalMetric:
        values = {
            "score": self.score_value,
            "categorical": self.categorical_value,
            "boolean": self.boolean_value,
        }
        if values[self.metric_type] is None or sum(v is not None for v in values.values()) != 1:
            raise ValueError(f"a {self.metric_type} metric carries {self.metric_type}_value and no other value")
        return self


class Attributes(_Strict):
    metrics: list[EvalMetric] = Field(min_length=1)


class Data(_Strict):
    type: Literal["evaluation_metric"]
    attributes: Attributes


class EvalMetricRequest(_Strict):
    data: Data


@dataclass(frozen=True)
class ReceivedRequest:
    at: float
    bytes: int
    api_key: str | None
    status: int
    body: Any


@dataclass
class DatadogStandIn:
    api_key: str = API_KEY
    max_body_bytes: int = 5 * 1024 * 1024
    port: int = 0
    faults: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    always: int | None = None
    refuse_labels: set[str] = field(default_factory=set)
    requests: list[ReceivedRequest] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # what the validation found: a test asserts it stays empty
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> DatadogStandIn:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/api/intake/llm-obs/v2/eval-metric", self._eval_metric)
        self._runner, self.port = await serve_on_loopback(app, self.port)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def score_ids(self) -> list[str]:
        """The ``score_id`` tag of every stored evaluation, in order (a score written twice shows twice)."""
        return [tag.split(":", 1)[1] for m in self.metrics for tag in m.get("tags", []) if tag.startswith("score_id:")]

    async def _eval_metric(self, request: web.Request) -> web.Response:
        raw = await request.read()
        api_key = request.headers.get("DD-API-KEY")
        response, body = self._answer(raw, api_key)
        self.requests.append(ReceivedRequest(time.monotonic(), len(raw), api_key, response.status, body))
        return response

    def _answer(self, raw: bytes, api_key: str | None) -> tuple[web.Response, Any]:
        if self.faults or self.always is not None:
            body = json.loads(raw)
            try:  # a faulted request is checked all the same
                EvalMetricRequest.model_validate(body)
            except ValidationError as exc:
                self.invalid.append(str(exc))
            status, headers = (self.always, {}) if self.always is not None else self.faults.pop(0)
            return web.json_response({"errors": [f"scripted {status}"]}, status=status, headers=headers), body
        if api_key != self.api_key:
            return web.json_response({"errors": ["Forbidden"]}, status=403), None
        if len(raw) > self.max_body_bytes:
            return web.json_response({"errors": ["Request Entity Too Large"]}, status=413), None
        body = json.loads(raw)
        try:
            parsed = EvalMetricRequest.model_validate(body)
        except ValidationError as exc:
            self.invalid.append(str(exc))
            return web.json_response({"errors": [str(e["msg"]) for e in exc.errors()]}, status=400), body
        refused = [m.label for m in parsed.data.attributes.metrics if m.label in self.refuse_labels]
        if refused:
            detail = f"label {refused[0]!r} is already used by another evaluation type for this ml_app"
            return web.json_response(
                {"errors": [{"status": "400", "title": "Bad Request", "detail": detail}]}, status=400
            ), body
        for metric in body["data"]["attributes"]["metrics"]:
            if "source:otel" not in metric.get("tags", []):
                self.invalid.append("an evaluation of an OTLP span without the source:otel tag")
        self.metrics.extend(body["data"]["attributes"]["metrics"])
        return web.json_response(
            {"data": {"type": "evaluation_metric", "id": str(len(self.requests))}}, status=202
        ), body
