"""The unit of work between ingest and scoring: one selected span, mapped to a scorer run."""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from sidecar.scoring.agent import AgentMessage, AgentRunInput

__all__ = [
    "SCOPES",
    "ReadyReason",
    "ResourceValue",
    "RunAssembly",
    "RunPart",
    "Scope",
    "ScorerRunRequest",
    "SpanTarget",
    "missing_parts",
]

# What one scorer run scores: one span from its own attributes (``span``), or an agent span with its
# descendants once its trace is done (``trace``). Declared once: the settings, the kinds and the runtime read it.
Scope = Literal["span", "trace"]
SCOPES: tuple[Scope, ...] = typing.get_args(Scope)

# Why a buffered trace was scored: its root span arrived and no span came for `idle_s`; `max_wait_s` passed
# since its first span; it outgrew the per-trace bound (scored from what arrived); a bounded source (a backfill's
# window) was read to its end, so no span of it will come (complete only when its root had arrived).
ReadyReason = Literal["root_idle", "max_wait", "evicted", "window_end"]
# The parts of a run a scorer may read: the request, the answer, the system instructions. A scorer that needs
# one the run lacks still scores what it has (prompt alignment in `both` mode judges the user part alone);
# the score then says which parts were missing. Tool calls and context are not parts here: a run without tool
# calls is what tool-call accuracy measures, and a context scorer without context is not scorable.
RunPart = Literal["input", "output", "system"]
_RUN_PARTS: tuple[RunPart, ...] = ("input", "output", "system")
# A resource attribute kept with a run: OTLP scalars only (arrays and maps are not kept).
ResourceValue = str | bool | int | float


class SpanTarget(BaseModel):
    """Where a score attaches: the scored span and what identifies its agent."""

    model_config = ConfigDict(frozen=True)

    trace_id: str  # 32 lowercase hex chars
    span_id: str  # 16 lowercase hex chars
    parent_span_id: str | None = None
    span_name: str = ""
    kind: Literal["agent", "inference"] = "agent"
    convention: str = ""  # which mapping produced the run: genai, genai_legacy, openinference, mastra
    agent_name: str | None = None
    agent_id: str | None = None
    service_name: str | None = None
    model: str | None = None
    provider: str | None = None  # gen_ai.provider.name (or the older gen_ai.system, llm.provider)
    input_tokens: int | None = None  # the scored span's own usage, when it reports it
    output_tokens: int | None = None
    end_time_unix_nano: int = 0
    sampled: bool = True
    # The scored span's resource attributes that ingest was told to keep (IngestConfig.resource_attributes),
    # in the resource's order: the OTLP exporter copies them onto the resource of the run's spans.
    resource_attributes: tuple[tuple[str, ResourceValue], ...] = ()
    # The scored span's own attributes that ingest was told to keep (IngestConfig.span_attributes: the keys
    # judges written in YAML read), by key: none unless a configured scorer asks.
    span_attributes: tuple[tuple[str, Any], ...] = ()


class RunAssembly(BaseModel):
    """How a whole-trace run (``scope: trace``) was put together from an agent span and its descendants
    (camelCase in the score record, as the rest of it)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    complete: bool  # the trace was ready (its root ended, then quiet): not cut short by a bound
    ready_reason: ReadyReason
    spans: int  # spans of the agent's subtree that went into the run
    llm_calls: int
    tool_calls: int
    retrieved_documents: int
    input_tokens: int | None = None  # summed over the LLM calls that report usage
    output_tokens: int | None = None
    system_from: Literal["agent", "llm_call", "none"] = "none"  # where the system instructions came from


class ScorerRunRequest(BaseModel):
    """A span mapped to Mastra's agent run shape, ready for ``scorer.run(input=..., output=...)``."""

    model_config = ConfigDict(frozen=True)

    target: SpanTarget
    input: AgentRunInput
    output: tuple[AgentMessage, ...]
    # Retrieved documents (whole-trace runs): scorers read them as request_context["context"].
    context: tuple[str, ...] = ()
    assembly: RunAssembly | None = None  # None: one span's own attributes (scope: span)

    @property
    def subject(self) -> str:
        """What a score of this run is about, as its id reads it: the scored span (``trace id:span id``,
        lowercase hex). A scope whose unit is not one span (a conversation) names its own."""
        target = self.target
        return f"{target.trace_id.lower()}:{target.span_id.lower()}"

    @property
    def record_key(self) -> bytes:
        """The key of this run's score record: its trace id, so that a trace's scores share a partition (as the
        Collector keys the traces themselves)."""
        return self.target.trace_id.encode()

    @property
    def scope(self) -> Scope:
        return "span" if self.assembly is None else "trace"


def missing_parts(request: ScorerRunRequest, needs: Iterable[str]) -> tuple[RunPart, ...]:
    """The parts of ``request`` among ``needs`` that it lacks (empty text counts as lacking), in a fixed order."""
    wanted = set(needs)
    missing: list[RunPart] = []
    for part in _RUN_PARTS:
        if part in wanted and not _has(request, part):
            missing.append(part)
    return tuple(missing)


def _has(request: ScorerRunRequest, part: RunPart) -> bool:
    # eval datasets may carry any JSON as input and output (model_construct): only the agent run shape has
    # parts to miss; anything else counts as present when it is not empty.
    run_input: object = request.input
    if part == "output":
        output: object = request.output
        if not isinstance(output, tuple | list):
            return bool(output)
        return any(m.role == "assistant" and m.text.strip() if isinstance(m, AgentMessage) else bool(m) for m in output)
    if not isinstance(run_input, AgentRunInput):
        return bool(run_input) or part == "system"
    if part == "input":
        return any(m.text.strip() for m in run_input.input_messages)
    return any(m.content.strip() for m in run_input.system_messages)
