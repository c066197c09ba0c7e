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
    "SINGLE_RUN_SCOPES",
    "ReadyReason",
    "ResourceValue",
    "RunAssembly",
    "RunPart",
    "Scope",
    "ScorerRunRequest",
    "SessionCloseReason",
    "SessionTurn",
    "SessionWindow",
    "SpanTarget",
    "missing_parts",
]

# What one scorer run scores: one span from its own attributes (``span``), an agent span with its descendants
# once its trace is done (``trace``), or the turns of one conversation once its window closes (``session``,
# docs/sessions.md). Declared once: the settings, the kinds and the runtime read it.
Scope = Literal["span", "trace", "session"]
SCOPES: tuple[Scope, ...] = typing.get_args(Scope)
# The scopes of one agent run: what a kind that reads one request and its answer can score.
SINGLE_RUN_SCOPES: tuple[Scope, ...] = ("span", "trace")

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
    # The agent's version (docs/versions.md), as ingest read it from the configured attributes; None: not traced.
    version: str | None = None
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


# Why a conversation's window was scored: no turn for ``idle_s`` (the usual end), or a bound cut it (the run is
# then incomplete): its duration, its turns, its bytes, the buffer full (evicted), the end of a bounded source.
SessionCloseReason = Literal["idle", "max_duration", "max_turns", "too_large", "evicted", "window_end"]


class SessionTurn(BaseModel):
    """One turn of a conversation: a whole-trace run of a top-level agent span (camelCase in records)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    trace_id: str
    span_id: str  # the turn's agent span
    start_time_unix_nano: int
    end_time_unix_nano: int
    agent_name: str | None = None
    complete: bool = True  # its trace was whole when the turn was built
    truncated: bool = False  # a field was cut to its size cap


class SessionWindow(BaseModel):
    """The turns of one conversation scored together, in order (agent span start, then trace id).

    The contract with scorers: turn ``i`` is ``run.input.input_messages[i]`` (the user's message of that turn)
    and ``run.output[i]`` (the agent's answer, its tool calls and their results inside), so a reason can name
    "turn i+1"; system instructions come from the first turn, a different one from a later turn once more."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    conversation_id: str
    turns: tuple[SessionTurn, ...]
    close_reason: SessionCloseReason

    @property
    def complete(self) -> bool:
        """Closed by a quiet period, every turn whole."""
        return self.close_reason == "idle" and all(turn.complete for turn in self.turns)

    @property
    def start_unix_nano(self) -> int:
        return self.turns[0].start_time_unix_nano if self.turns else 0


class ScorerRunRequest(BaseModel):
    """A span mapped to Mastra's agent run shape, ready for ``scorer.run(input=..., output=...)``."""

    model_config = ConfigDict(frozen=True)

    target: SpanTarget
    input: AgentRunInput
    output: tuple[AgentMessage, ...]
    # Retrieved documents (whole-trace runs): scorers read them as request_context["context"].
    context: tuple[str, ...] = ()
    assembly: RunAssembly | None = None  # None: one span's own attributes (scope: span)
    # scope: session — the conversation's window; ``target`` is then its last turn's agent span, where the
    # score's span is parented.
    session: SessionWindow | None = None

    @property
    def subject(self) -> str:
        """What a score of this run is about, as its id reads it: the scored span (``trace id:span id``,
        lowercase hex), or a conversation's window, named by its first turn (``session:`` keeps it apart from
        any span's subject): the same in every replica, restore and redelivery."""
        session = self.session
        if session is not None and session.turns:
            first = session.turns[0]
            return f"session:{session.conversation_id}:{first.trace_id.lower()}:{first.span_id.lower()}"
        target = self.target
        return f"{target.trace_id.lower()}:{target.span_id.lower()}"

    @property
    def record_key(self) -> bytes:
        """The key of this run's score record: its trace id, so that a trace's scores share a partition (as the
        Collector keys the traces themselves); a conversation's id for a session run."""
        if self.session is not None:
            return self.session.conversation_id.encode()
        return self.target.trace_id.encode()

    @property
    def scope(self) -> Scope:
        if self.session is not None:
            return "session"
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
