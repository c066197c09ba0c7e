"""What a scorer run becomes in OTLP: its spans, its evaluation event and log record.

For every finished run, in the scored trace:

* one span ``scorer run: '<scorer id>'`` (OTel kind INTERNAL, OpenInference kind ``EVALUATOR``: Phoenix
  labels it an evaluator instead of ``UNKNOWN``) whose parent is the scored span (a conversation's: its last
  turn's agent span, with the conversation id and the turn count), rebuilt from the
  hex ids as a remote ``SpanContext`` marked SAMPLED (a span that reached us through OTLP was sampled, and
  Python's OTLP encoder leaves ``Span.flags`` empty, so the flag cannot be read from the wire). Its times
  are the run's; it carries the loop-guard marker ``scoring_sidecar.internal=true``, the scorer, score
  and run ids, the outcome, the scored agent, the evaluation name and score and the run's total
  *estimated* judge cost.
* one child span ``chat <judge model>`` (kind CLIENT) per judge execution, in step order, with the GenAI
  client attributes (operation ``chat``, provider, request model, token usage, ``error.type`` and status
  ERROR on a failed execution) and the cost attributes of the open proposal (``gen_ai.usage.cost.*``:
  source ``provider`` when the provider reported the cost, else ``local`` from the price-table estimate).
  The record keeps no start time per execution, only ``duration_ms``: children are laid out one after the
  other from the run's start.
* the ``gen_ai.evaluation.result`` event (the GenAI conventions, ``model/gen-ai/events.yaml`` of
  open-telemetry/semantic-conventions-genai). They define it as a log-based event that SHOULD be parented to
  the evaluated span, which is not ours: a span event can only belong to a span we emit. ``events`` says how
  it goes out: as a **span event** on the ``scorer run`` span (``span``, the default: every trace backend
  shows span events, and most take no OTLP logs, docs/otlp-backends.md); as an OTLP **log record**
  (``log``: ``event_name = gen_ai.evaluation.result``, its trace and span ids the scored span's, as
  OpenTelemetry now emits events, OTEP 4430 deprecating the span events API) sent to the same endpoint
  (``/v1/logs``, or the gRPC logs service); or ``both``. A receiver that answers it has no logs signal turns
  the log records off by itself, and the events go out as span events from then on (``sink``).

Event attributes: ``gen_ai.evaluation.name`` (the scorer name), ``gen_ai.evaluation.score.value`` (scored
runs only), ``gen_ai.evaluation.score.label`` (scored runs whose scorer names its score: a custom judge's
category, ``pass``/``fail``; Mastra's scorers give a bare number, so theirs carry none),
``gen_ai.evaluation.explanation`` (the reason; for a not-scorable run, why), ``error.type`` (failed runs: the
cause's name).

Outcomes: *failed* → status ERROR, ``error.type`` = the cause's name, no score (not even one computed
before the step that failed: a failed run has no score anywhere); *not_scorable* → status UNSET,
``scoring_sidecar.not_scorable.reason``, no score.

Nothing from the conversation or the judge prompts is exported: no prompts, no raw judge output, no
messages (they can be large and are sensitive), and never an API key.

Span ids of a run derive from its (deterministic) score id, so a redelivered run re-exports the same spans
with the same ids.
"""

from __future__ import annotations

import hashlib
import math
from typing import Final

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

from exporters.score_facts import clip
from sidecar.core import ScoredRun, names
from sidecar.scoring.types import STEP_NAMES, JudgeExecution, JudgeStepRecord, StepName

__all__ = [
    "AGENT_NAME",
    "AGENT_VERSION",
    "COST_SOURCE_LOCAL",
    "COST_SOURCE_PROVIDER",
    "ERROR_TYPE",
    "EVENT_EVALUATION_RESULT",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_EVALUATION_EXPLANATION",
    "GEN_AI_EVALUATION_NAME",
    "GEN_AI_EVALUATION_SCORE_LABEL",
    "GEN_AI_EVALUATION_SCORE_VALUE",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_COST_AMOUNT",
    "GEN_AI_USAGE_COST_CURRENCY",
    "GEN_AI_USAGE_COST_SOURCE",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "GEN_AI_USAGE_REASONING_OUTPUT_TOKENS",
    "INSTRUMENTATION_SCOPE",
    "JUDGE_ATTEMPT_COUNT",
    "JUDGE_ESTIMATED_COST_USD",
    "JUDGE_EXECUTION_COUNT",
    "JUDGE_MODEL_CALL_COUNT",
    "JUDGE_SPAN_NAME",
    "JUDGE_STEP",
    "MAX_EXPLANATION_CHARS",
    "NOT_SCORABLE_REASON",
    "NOT_SCORABLE_STEP",
    "OI_KIND_EVALUATOR",
    "OPENINFERENCE_SPAN_KIND",
    "OP_CHAT",
    "RUN_FAILED_STEP",
    "RUN_ID",
    "RUN_OUTCOME",
    "RUN_SPAN_NAME",
    "SCORER_ID",
    "SCORER_NAME",
    "SCORE_ID",
    "SERVICE_NAME",
    "SERVICE_VERSION",
    "SESSION_CLOSE_REASON",
    "SESSION_COMPLETE",
    "SESSION_TURNS",
    "SIDECAR_INTERNAL",
    "evaluation_attributes",
    "judge_span_attributes",
    "run_span_attributes",
    "scored_span_context",
]

# --- Attribute, event and span names (every name this module writes) -----------------------------------
SERVICE_NAME: Final = names.SERVICE_NAME
SERVICE_VERSION: Final = "service.version"
# Loop guard (on every span and log record we emit): the ingest side never scores these.
SIDECAR_INTERNAL: Final = names.SIDECAR_INTERNAL
# Ours, on the run span (and the evaluation event).
SCORER_ID: Final = "scoring_sidecar.scorer.id"
SCORER_NAME: Final = "scoring_sidecar.scorer.name"
SCORE_ID: Final = "scoring_sidecar.score.id"  # deterministic: same as the Kafka score record's scoreId
RUN_ID: Final = "scoring_sidecar.run.id"
RUN_OUTCOME: Final = "scoring_sidecar.run.outcome"  # scored | failed | not_scorable
RUN_FAILED_STEP: Final = "scoring_sidecar.run.failed_step"
NOT_SCORABLE_STEP: Final = "scoring_sidecar.not_scorable.step"
NOT_SCORABLE_REASON: Final = "scoring_sidecar.not_scorable.reason"
# What was judged: span (one span's attributes) or trace (the agent span with its descendants); for trace
# scope, whether the trace was done (root ended, then quiet) and why it was taken; the parts the scorer reads
# that the run lacked (the score judged the rest).
RUN_SCOPE: Final = "scoring_sidecar.run.scope"
RUN_TRACE_COMPLETE: Final = "scoring_sidecar.run.trace_complete"
RUN_READY_REASON: Final = "scoring_sidecar.run.ready_reason"
RUN_MISSING: Final = "scoring_sidecar.run.missing"
# A conversation's run (scope session): the conversation (its OTel GenAI attribute), how many turns its window held,
# why the window closed (idle: complete; any other reason, or a turn's trace incomplete: not).
GEN_AI_CONVERSATION_ID: Final = names.GEN_AI_CONVERSATION_ID
SESSION_TURNS: Final = "scoring_sidecar.session.turns"
SESSION_CLOSE_REASON: Final = "scoring_sidecar.session.close_reason"
SESSION_COMPLETE: Final = "scoring_sidecar.session.complete"
AGENT_NAME: Final = "scoring_sidecar.agent.name"  # the scored agent (not gen_ai.agent.name: we are not it)
AGENT_VERSION: Final = "scoring_sidecar.agent.version"  # the scored agent's version, when traced (docs/versions.md)
JUDGE_EXECUTION_COUNT: Final = "scoring_sidecar.judge.execution_count"
JUDGE_ESTIMATED_COST_USD: Final = "scoring_sidecar.judge.estimated_cost_usd"  # sum over executions
# Ours, on the judge execution spans.
JUDGE_STEP: Final = "scoring_sidecar.judge.step"  # preprocess | analyze | generate_score | generate_reason
JUDGE_ATTEMPT_COUNT: Final = "scoring_sidecar.judge.attempt_count"
JUDGE_MODEL_CALL_COUNT: Final = "scoring_sidecar.judge.model_call_count"
# OTel GenAI semantic conventions (client spans).
GEN_AI_OPERATION_NAME: Final = names.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: Final = names.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: Final = names.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = names.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS: Final = names.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = names.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = names.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
ERROR_TYPE: Final = "error.type"
OP_CHAT: Final = names.OP_CHAT
# Cost attributes of the open GenAI proposal.
GEN_AI_USAGE_COST_AMOUNT: Final = "gen_ai.usage.cost.amount"
GEN_AI_USAGE_COST_CURRENCY: Final = "gen_ai.usage.cost.currency"
GEN_AI_USAGE_COST_SOURCE: Final = "gen_ai.usage.cost.source"
COST_SOURCE_PROVIDER: Final = "provider"
COST_SOURCE_LOCAL: Final = "local"
# OTel GenAI evaluation event.
EVENT_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
# OpenInference span kind of the run span (Phoenix shows it; OTel's kind stays INTERNAL).
OPENINFERENCE_SPAN_KIND: Final = names.OPENINFERENCE_SPAN_KIND
OI_KIND_EVALUATOR: Final = names.OI_KIND_EVALUATOR
# Span names.
RUN_SPAN_NAME: Final = "scorer run: '{scorer_id}'"
JUDGE_SPAN_NAME: Final = "chat {model}"

INSTRUMENTATION_SCOPE: Final = "scoring_sidecar.exporters.otlp"
MAX_EXPLANATION_CHARS: Final = 4096
_USD: Final = "USD"

# --- What a run becomes ----------------------------------------------------------------------------------


def evaluation_attributes(run: ScoredRun) -> dict[str, AttributeValue]:
    """Attributes of the ``gen_ai.evaluation.result`` event (span event and log record)."""
    attrs: dict[str, AttributeValue] = {GEN_AI_EVALUATION_NAME: run.scorer_name}
    result = run.result
    if run.outcome == "scored" and result is not None and result.score is not None and math.isfinite(result.score):
        attrs[GEN_AI_EVALUATION_SCORE_VALUE] = float(result.score)
        if result.label:
            attrs[GEN_AI_EVALUATION_SCORE_LABEL] = result.label
        if result.reason:
            attrs[GEN_AI_EVALUATION_EXPLANATION] = clip(result.reason, MAX_EXPLANATION_CHARS)
    elif run.outcome == "not_scorable" and result is not None and result.not_scorable is not None:
        attrs[GEN_AI_EVALUATION_EXPLANATION] = clip(result.not_scorable.reason, MAX_EXPLANATION_CHARS)
    elif run.outcome == "failed":
        attrs[ERROR_TYPE] = _error_type(run)
    attrs[SCORE_ID] = run.score_id
    return attrs


def _error_type(run: ScoredRun) -> str:
    return run.error.cause_name if run.error is not None else "ScorerRunError"


def _executions(run: ScoredRun) -> list[tuple[StepName | None, JudgeExecution]]:
    """The run's judge executions in step order, with the step each belongs to."""
    judge = run.result.judge if run.result is not None else None
    if judge is None:
        return []
    out: list[tuple[StepName | None, JudgeExecution]] = []
    for step in STEP_NAMES:
        record: JudgeStepRecord | None = getattr(judge, step)
        if record is not None:
            out.extend((execution.step or step, execution) for execution in record.executions)
    return out


def run_span_attributes(run: ScoredRun) -> dict[str, AttributeValue]:
    """Attributes of the ``scorer run`` span."""
    target = run.request.target
    attrs: dict[str, AttributeValue] = {
        SIDECAR_INTERNAL: True,
        OPENINFERENCE_SPAN_KIND: OI_KIND_EVALUATOR,
        SCORER_ID: run.scorer_id,
        SCORER_NAME: run.scorer_name,
        SCORE_ID: run.score_id,
        RUN_OUTCOME: run.outcome,
        AGENT_NAME: target.agent_name or run.agent_label,
        GEN_AI_EVALUATION_NAME: run.scorer_name,
        RUN_SCOPE: run.request.scope,
    }
    if target.version is not None:
        attrs[AGENT_VERSION] = target.version
    assembly = run.request.assembly
    if assembly is not None:
        attrs[RUN_TRACE_COMPLETE] = assembly.complete
        attrs[RUN_READY_REASON] = assembly.ready_reason
    session = run.request.session
    if session is not None:
        attrs[GEN_AI_CONVERSATION_ID] = session.conversation_id
        attrs[SESSION_TURNS] = len(session.turns)
        attrs[SESSION_CLOSE_REASON] = session.close_reason
        attrs[SESSION_COMPLETE] = session.complete
    if run.missing:
        attrs[RUN_MISSING] = list(run.missing)
    result = run.result
    if result is not None:
        attrs[RUN_ID] = result.run_id
    if run.outcome == "scored" and result is not None and result.score is not None and math.isfinite(result.score):
        attrs[GEN_AI_EVALUATION_SCORE_VALUE] = float(result.score)
        if result.label:
            attrs[GEN_AI_EVALUATION_SCORE_LABEL] = result.label
    elif run.outcome == "not_scorable" and result is not None and result.not_scorable is not None:
        attrs[NOT_SCORABLE_STEP] = result.not_scorable.step
        attrs[NOT_SCORABLE_REASON] = clip(result.not_scorable.reason, MAX_EXPLANATION_CHARS)
    elif run.outcome == "failed":
        attrs[ERROR_TYPE] = _error_type(run)
        if run.error is not None:
            attrs[RUN_FAILED_STEP] = run.error.failed_step
    executions = _executions(run)
    attrs[JUDGE_EXECUTION_COUNT] = len(executions)
    estimates = [e.estimated_cost_usd for _, e in executions if e.estimated_cost_usd is not None]
    if estimates:
        attrs[JUDGE_ESTIMATED_COST_USD] = float(sum(estimates))
    return attrs


def judge_span_attributes(step: StepName | None, execution: JudgeExecution) -> dict[str, AttributeValue]:
    """GenAI client attributes of one judge execution (never its prompt or output)."""
    attrs: dict[str, AttributeValue] = {
        SIDECAR_INTERNAL: True,
        GEN_AI_OPERATION_NAME: OP_CHAT,
        GEN_AI_REQUEST_MODEL: execution.judge_model_id,
        JUDGE_ATTEMPT_COUNT: execution.attempt_count,
        JUDGE_MODEL_CALL_COUNT: execution.model_call_count,
    }
    if execution.judge_provider:
        attrs[GEN_AI_PROVIDER_NAME] = execution.judge_provider
    if step is not None:
        attrs[JUDGE_STEP] = step
    usage = execution.usage
    if usage is not None:
        for name, value in (
            (GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens),
            (GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens),
            (GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cached_input_tokens),
            (GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, usage.cache_creation_input_tokens),
            (GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, usage.reasoning_tokens),
        ):
            if value is not None:
                attrs[name] = int(value)
    provider_cost = execution.cost if execution.status == "success" else None
    if provider_cost is not None:
        attrs[GEN_AI_USAGE_COST_AMOUNT] = float(provider_cost.amount)
        attrs[GEN_AI_USAGE_COST_CURRENCY] = provider_cost.unit.upper()
        attrs[GEN_AI_USAGE_COST_SOURCE] = COST_SOURCE_PROVIDER
    elif execution.estimated_cost_usd is not None:
        attrs[GEN_AI_USAGE_COST_AMOUNT] = float(execution.estimated_cost_usd)
        attrs[GEN_AI_USAGE_COST_CURRENCY] = _USD
        attrs[GEN_AI_USAGE_COST_SOURCE] = COST_SOURCE_LOCAL
    if execution.status == "failed":
        attrs[ERROR_TYPE] = execution.error.name
        if execution.finish_reason:
            attrs[GEN_AI_RESPONSE_FINISH_REASONS] = (execution.finish_reason,)
    return attrs


def scored_span_context(run: ScoredRun) -> SpanContext | None:
    """The scored span as a remote, sampled parent; ``None`` when its ids are not valid."""
    target = run.request.target
    try:
        trace_id, span_id = int(target.trace_id, 16), int(target.span_id, 16)
    except ValueError:
        return None
    context = SpanContext(
        trace_id=trace_id, span_id=span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return context if context.is_valid else None


class _ScoreSpanIds(IdGenerator):
    """Span ids derived from the score id while a run's spans are emitted (random otherwise).

    A redelivered run re-exports the same spans with the same ids, so backends that key spans by
    (trace id, span id) keep one copy, as the score topic keeps one score per ``scoreId``.
    """

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._seed: bytes | None = None
        self._n = 0

    def seed(self, score_id: str | None) -> None:
        self._seed = score_id.encode() if score_id is not None else None
        self._n = 0

    def generate_span_id(self) -> int:
        if self._seed is None:
            return self._random.generate_span_id()
        self._n += 1
        digest = hashlib.blake2b(self._seed + b":%d" % self._n, digest_size=8).digest()
        return int.from_bytes(digest, "big") or 1  # 0 is the invalid span id

    def generate_trace_id(self) -> int:  # score spans join the scored trace; never used for them
        return self._random.generate_trace_id()
