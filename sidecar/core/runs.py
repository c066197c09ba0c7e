"""The unit of work between ingest and scoring: one selected span, mapped to a scorer run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from sidecar.scoring.agent import AgentMessage, AgentRunInput

__all__ = ["ReadyReason", "ResourceValue", "RunAssembly", "ScorerRunRequest", "SpanTarget"]

# Why a buffered trace was scored: its root span arrived and no span came for `idle_s`; `max_wait_s` passed
# since its first span; it outgrew the per-trace bound (scored from what arrived).
ReadyReason = Literal["root_idle", "max_wait", "evicted"]
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


class RunAssembly(BaseModel):
    """How a whole-trace run (``scope: trace``) was put together from an agent span and its descendants."""

    model_config = ConfigDict(frozen=True)

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
    def scope(self) -> Literal["span", "trace"]:
        return "span" if self.assembly is None else "trace"
