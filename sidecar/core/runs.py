"""The unit of work between ingest and scoring: one selected span, mapped to a scorer run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from sidecar.scoring.agent import AgentMessage, AgentRunInput

__all__ = ["ResourceValue", "ScorerRunRequest", "SpanTarget"]

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


class ScorerRunRequest(BaseModel):
    """A span mapped to Mastra's agent run shape, ready for ``scorer.run(input=..., output=...)``."""

    model_config = ConfigDict(frozen=True)

    target: SpanTarget
    input: AgentRunInput
    output: tuple[AgentMessage, ...]
