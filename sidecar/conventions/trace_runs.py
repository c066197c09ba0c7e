"""Whole-trace agent runs: an agent span and its descendants, put together into one scorer run.

Real agent traces spread one run over many spans: the system prompt is often only on the LLM calls under
the agent span, tool calls and their results are ``execute_tool`` / OpenInference ``TOOL`` spans, retrieved
documents are on retriever spans. For each selected agent span of a trace (the same selection as span
scope), the run is built from:

- the agent span's own content, as span scope maps it (``map_span``);
- **system instructions** from the first LLM call in its subtree when the agent span carries none;
- the **request** from the agent span, else from the first LLM call; the **answer** from the agent span,
  else from the last LLM call;
- the **tool calls** in start order (name, arguments, result; a failed tool's result is
  ``{"error": message}``), from tool spans and, for calls no tool span records, from the LLM calls'
  requested tool calls; they ride inside the assistant message as Mastra's agent output carries them;
- **retrieved documents** from retriever spans, as the run's ``context``;
- how many LLM calls and tokens (``RunAssembly``).

An agent span nested under another selected agent span gets its own run over its own subtree; in the outer
run it appears as one tool call (its name, its request, its answer).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from sidecar.conventions.attributes import attributes_dict, unflatten
from sidecar.conventions.mapping import SpanView, map_span, usage_of
from sidecar.conventions.selection import Selection, classify
from sidecar.conventions.spans import (
    MappingResult,
    SkipCounts,
    SpanReject,
    admit,
    kept_attributes,
    kept_resource,
    service_name_of,
    span_view,
)
from sidecar.conventions.tool_calls import merge_requested, not_in
from sidecar.conventions.versions import DEFAULT_VERSIONS, NO_VERSIONS, VersionAttributes
from sidecar.core import names
from sidecar.core.runs import ReadyReason, ResourceValue, RunAssembly, ScorerRunRequest, SpanTarget
from sidecar.scoring.agent import (
    AgentMessage,
    AgentRunInput,
    MessageContent,
    ToolInvocation,
    ToolInvocationPart,
)

__all__ = ["TraceSpan", "group_by_trace", "trace_runs"]

_MAPPING_ERRORS = (ValueError, TypeError, KeyError, RecursionError)
_OP_EXECUTE_TOOL = "execute_tool"
_OP_RETRIEVAL = "retrieval"
_OI_TOOL = "TOOL"
_OI_RETRIEVER = "RETRIEVER"
_TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "tool_call.function.name", names.TRACELOOP_ENTITY_NAME)
_TOOL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id")
_TOOL_ARGS_KEYS = (
    "gen_ai.tool.call.arguments",
    "tool_call.function.arguments",
    names.INPUT_VALUE,
    names.TRACELOOP_ENTITY_INPUT,
)
_TOOL_RESULT_KEYS = ("gen_ai.tool.call.result", names.OUTPUT_VALUE, names.TRACELOOP_ENTITY_OUTPUT)
_RETRIEVAL_DOCUMENTS = "retrieval.documents"


@dataclass(frozen=True, slots=True)
class TraceSpan:
    """A span of a buffered trace, with its resource's ``service.name`` (and the resource attributes ingest
    keeps), and the offset of the record that brought it (for a dead letter naming its source)."""

    span: Span
    service: str | None
    resource: tuple[tuple[str, ResourceValue], ...] = ()
    offset: int = -1
    # The encoded record, when it holds spans of this trace alone (the Collector's partition_traces_by_id):
    # the trace buffer keeps it as it is rather than re-encoding each span.
    record: bytes | None = None


@dataclass(slots=True)
class _Node:
    item: TraceSpan
    kind: str | None  # agent / inference (classify), else None
    own: bool  # the sidecar's own span (loop guard)
    role: str | None  # tool / retriever
    children: list[_Node]
    unrecognised: bool = False  # looks like an LLM or agent span that no rule selects
    _attributes: dict[str, Any] | None = None

    def attributes(self) -> dict[str, Any]:
        """The span's attributes as a dict, built once: several parts of a run read an LLM call's."""
        if self._attributes is None:
            self._attributes = attributes_dict(self.item.span.attributes)
        return self._attributes


def _role(span: Span) -> str | None:
    for kv in span.attributes:
        if kv.key == names.GEN_AI_OPERATION_NAME:
            op = kv.value.string_value
            if op == _OP_EXECUTE_TOOL:
                return "tool"
            if op == _OP_RETRIEVAL:
                return "retriever"
        elif kv.key == names.OPENINFERENCE_SPAN_KIND:
            oi = kv.value.string_value.upper()
            if oi == _OI_TOOL:
                return "tool"
            if oi == _OI_RETRIEVER:
                return "retriever"
        elif kv.key == names.TRACELOOP_SPAN_KIND and kv.value.string_value == "tool":
            return "tool"
    return None


def _tree(spans: Sequence[TraceSpan]) -> list[_Node]:
    """Every span as a node with its children in start order; returns the nodes in start order."""
    nodes: dict[bytes, _Node] = {}
    for item in spans:
        span = item.span
        span_id = span.span_id
        if span_id not in nodes:  # a span twice: the first wins
            kind, own, unrecognised = classify(span.attributes)
            nodes[span_id] = _Node(item, kind, own, _role(span), [], unrecognised)
    for node in nodes.values():
        parent = nodes.get(node.item.span.parent_span_id)
        if parent is not None and parent is not node:
            parent.children.append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: n.item.span.start_time_unix_nano)
    return sorted(nodes.values(), key=lambda n: n.item.span.start_time_unix_nano)


def _subtree(root: _Node, own_runs: set[bytes]) -> Iterator[tuple[_Node, bool]]:
    """The root's descendants in depth-first start order, each with whether a tool span lies between it and the
    root, not entering nested agents that get their own run."""
    stack = [(child, False) for child in reversed(root.children)]
    seen: set[bytes] = set()
    while stack:
        node, under_tool = stack.pop()
        span_id = node.item.span.span_id
        if span_id in seen:  # a malformed trace with a cycle
            continue
        seen.add(span_id)
        yield node, under_tool
        if span_id not in own_runs:
            below = under_tool or node.role == "tool"
            stack.extend((child, below) for child in reversed(node.children))


def _first(attributes: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((attributes[k] for k in keys if attributes.get(k) not in (None, "")), None)


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError, RecursionError):
            return json.loads(value)
    return value


def _error_of(span: Span) -> str | None:
    if span.status.code != Status.STATUS_CODE_ERROR:
        return None
    for event in span.events:
        if event.name == "exception":
            message = attributes_dict(event.attributes).get("exception.message")
            if message:
                return str(message)
    return span.status.message or "the tool failed"


def _tool_call(node: _Node) -> ToolInvocation:
    span = node.item.span
    attributes = node.attributes()
    name = _first(attributes, _TOOL_NAME_KEYS) or span.name.removeprefix(f"{_OP_EXECUTE_TOOL} ")
    call_id = _first(attributes, _TOOL_ID_KEYS) or span.span_id.hex()
    error = _error_of(span)
    result = {"error": error} if error is not None else _json_or_text(_first(attributes, _TOOL_RESULT_KEYS))
    return ToolInvocation(
        state="result" if result is not None else "call",
        tool_call_id=str(call_id),
        tool_name=str(name),
        args=_json_or_text(_first(attributes, _TOOL_ARGS_KEYS)),
        result=result,
    )


def _documents(node: _Node) -> list[str]:
    attributes = node.attributes()
    documents = []
    for entry in unflatten(attributes, _RETRIEVAL_DOCUMENTS):
        content = entry.get("document", {}).get("content") if isinstance(entry, Mapping) else None
        if isinstance(content, str) and content:
            documents.append(content)
    if not documents and names.OUTPUT_VALUE in attributes:
        value = _json_or_text(attributes[names.OUTPUT_VALUE])
        items = value if isinstance(value, list) else [value]
        documents.extend(item if isinstance(item, str) else json.dumps(item) for item in items if item)
    return documents


def _texts(messages: Sequence[AgentMessage]) -> list[AgentMessage]:
    return [m for m in messages if m.role == "assistant" and m.text]


def _answer(
    messages: Sequence[AgentMessage], calls: Sequence[ToolInvocation], span_id: str, created: str
) -> tuple[AgentMessage, ...]:
    """The run's output: the answer with the tool calls inside its first assistant message, in order."""
    tool_parts = tuple(ToolInvocationPart(tool_invocation=c) for c in calls)
    if not messages:
        if not tool_parts:
            return ()
        content = MessageContent(parts=tool_parts)
        return (AgentMessage(id=f"{span_id}-out-0", role="assistant", created_at=created, content=content),)
    first, *rest = messages
    texts = tuple(p for p in first.content.parts if not isinstance(p, ToolInvocationPart))
    merged = first.model_copy(update={"content": MessageContent(parts=(*tool_parts, *texts))})
    return (merged, *rest)


def _assemble(
    node: _Node,
    base: ScorerRunRequest | None,
    own_runs: set[bytes],
    ready_reason: ReadyReason,
    complete: bool,
    keep: Collection[str] = (),
    version: str | None = None,
) -> ScorerRunRequest | None:
    llm_nodes: list[_Node] = []
    calls: list[ToolInvocation] = []
    documents: list[str] = []
    spans = 1
    for child, under_tool in _subtree(node, own_runs):
        spans += 1
        span = child.item.span
        if span.span_id in own_runs:  # a nested agent: one call in this run, its own run elsewhere
            if under_tool:
                continue  # a sub-agent called as a tool: the tool's span is the call, with its request and answer
            nested = _map(child)
            calls.append(
                ToolInvocation(
                    state="result",
                    tool_call_id=span.span_id.hex(),
                    tool_name=(nested.target.agent_name if nested else None) or span.name,
                    args=_user_text(nested),
                    result=_answer_text(nested),
                )
            )
        elif child.role == "tool":
            calls.append(_tool_call(child))
        elif child.role == "retriever":
            documents.extend(_documents(child))
        elif child.kind == "inference":
            llm_nodes.append(child)
    # The LLM calls are mapped only where the run needs them (mapping parses every message): the first for
    # the instructions and the request the agent span lacks, the last for its answer, and any that may
    # have asked for tool calls no tool span recorded.
    run_input = base.input if base is not None else AgentRunInput()
    answers = _texts(base.output) if base is not None else []
    mapped: dict[int, ScorerRunRequest | None] = {}

    def llm(index: int) -> ScorerRunRequest | None:
        if index not in mapped:
            mapped[index] = _map(llm_nodes[index])
        return mapped[index]

    # Tool calls the LLM calls asked for, merged with the tool spans that recorded them (tool_calls.merge_requested),
    # and none that the agent span's own messages hold already.
    requested: list[ToolInvocation] = []
    for index, llm_node in enumerate(llm_nodes):
        asked = llm(index) if _may_request_tools(llm_node.item.span) else None
        requested.extend(_invocations(asked.output) if asked is not None else ())
    span_ids = frozenset(child.item.span.span_id.hex() for child, _ in _subtree(node, own_runs))
    merged = merge_requested(calls, requested, span_ids=span_ids)
    calls = not_in(merged, _invocations(run_input.input_messages))
    first_llm = llm(0) if llm_nodes and not (run_input.system_messages and run_input.input_messages) else None
    system_from: Literal["agent", "llm_call", "none"] = "agent" if run_input.system_messages else "none"
    if not run_input.system_messages and first_llm is not None and first_llm.input.system_messages:
        run_input = run_input.model_copy(update={"system_messages": first_llm.input.system_messages})
        system_from = "llm_call"
    if not run_input.input_messages and first_llm is not None:
        run_input = run_input.model_copy(
            update={
                "input_messages": first_llm.input.input_messages,
                "remembered_messages": first_llm.input.remembered_messages,
            }
        )
    if not answers and llm_nodes:
        last_llm = llm(len(llm_nodes) - 1)
        answers = _texts(last_llm.output) if last_llm is not None else []
    view_id = node.item.span.span_id.hex()
    created = answers[0].created_at if answers else ""
    output = _answer(answers, calls, view_id, created)
    if not run_input.input_messages and not output and not run_input.system_messages:
        return None
    target = base.target if base is not None else _target(node, keep, version)
    usage = [usage_of(n.attributes()) for n in llm_nodes]
    usage_in = [tokens for tokens, _ in usage if tokens is not None]
    usage_out = [tokens for _, tokens in usage if tokens is not None]
    assembly = RunAssembly(
        complete=complete,
        ready_reason=ready_reason,
        spans=spans,
        llm_calls=len(llm_nodes),
        tool_calls=len(merged),
        retrieved_documents=len(documents),
        input_tokens=sum(usage_in) if usage_in else None,
        output_tokens=sum(usage_out) if usage_out else None,
        system_from=system_from,
    )
    return ScorerRunRequest(target=target, input=run_input, output=output, context=tuple(documents), assembly=assembly)


# What a span that asked for tool calls carries somewhere, in the conventions that record them (GenAI message
# parts, OpenInference flattened keys, the legacy events' tool_calls, Mastra's tool invocations).
_TOOL_MARKER = re.compile(r"tool_call|tool-call|toolCall|toolInvocation|tool-invocation|function_call|tool_use")


def _marker_in(text: str) -> bool:
    # Every marker holds "tool" but function_call: two substring tests rule most text out before the pattern.
    return ("tool" in text or "function_call" in text) and _TOOL_MARKER.search(text) is not None


def _may_request_tools(span: Span) -> bool:
    """Whether a span may hold requested tool calls: a marker in an attribute key or string value, or in its
    events' (a cheap scan before parsing its messages)."""

    def marked(attributes: Any) -> bool:
        for kv in attributes:
            if _marker_in(kv.key):
                return True
            value = kv.value
            if value.WhichOneof("value") == "string_value" and _marker_in(value.string_value):
                return True
        return False

    return marked(span.attributes) or any(marked(event.attributes) for event in span.events)


def _map(node: _Node) -> ScorerRunRequest | None:
    kind = node.kind if node.kind in ("agent", "inference") else "inference"
    item = node.item
    # A child's content only: its version is its agent's business, not read.
    view = span_view(item.span, kind, item.service, node.attributes(), item.resource, (), NO_VERSIONS)  # type: ignore[arg-type]
    try:
        return map_span(view)
    except _MAPPING_ERRORS:
        return None  # a child whose content cannot be read adds nothing; the run is built from the rest


def _invocations(messages: Sequence[AgentMessage]) -> list[ToolInvocation]:
    return [invocation for message in messages for invocation in message.tool_invocations]


def _user_text(run: ScorerRunRequest | None) -> str | None:
    """A nested agent's request: its last user message (not its last message, which may be a tool's result)."""
    users = [m for m in run.input.input_messages if m.role == "user" and m.text] if run is not None else []
    return users[-1].text if users else None


def _answer_text(run: ScorerRunRequest | None) -> str | None:
    texts = _texts(run.output) if run is not None else []
    return texts[-1].text if texts else None


def _target(node: _Node, keep: Collection[str] = (), version: str | None = None) -> SpanTarget:
    span = node.item.span
    attributes = node.attributes()
    parent = span.parent_span_id
    agent = _first(attributes, (names.GEN_AI_AGENT_NAME, names.OI_AGENT_NAME))
    return SpanTarget(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=parent.hex() if len(parent) == 8 else None,
        span_name=span.name,
        kind="agent",
        agent_name=str(agent) if agent is not None else None,
        version=version,
        service_name=node.item.service,
        end_time_unix_nano=span.end_time_unix_nano,
        resource_attributes=node.item.resource,
        span_attributes=kept_attributes(attributes, keep) if keep else (),
    )


def trace_runs(
    spans: Sequence[TraceSpan],
    selection: Selection,
    *,
    ready_reason: ReadyReason,
    complete: bool | None = None,
    span_attributes: Collection[str] = (),
    versions: VersionAttributes = DEFAULT_VERSIONS,
) -> MappingResult:
    """A run per selected agent span of one trace, each over its own subtree. Never raises on content.

    ``complete``: whether ``spans`` are the whole trace (default: ready because its root ended, then quiet).
    ``span_attributes``: the agent span's attribute names each run keeps (``SpanTarget.span_attributes``);
    ``versions``: where each run's version is read."""
    whole = ready_reason == "root_idle" if complete is None else complete
    runs: list[ScorerRunRequest] = []
    rejects: list[SpanReject] = []
    skipped = {"internal": 0, "filtered": 0, "sampled_out": 0, "no_content": 0}
    nodes = _tree(spans)
    skipped["unrecognised"] = sum(node.unrecognised for node in nodes)
    chosen: list[tuple[_Node, Mapping[str, Any]]] = []
    for node in nodes:
        if node.kind != "agent" or "agent" not in selection.kinds:
            continue
        admission = admit(node.item.span, own_span=node.own, service=node.item.service, selection=selection)
        if admission.reject is not None:
            rejects.append(admission.reject)
        elif admission.attributes is None:
            skipped[admission.verdict] += 1
        else:
            chosen.append((node, admission.attributes))
    own_runs = {node.item.span.span_id for node, _ in chosen}
    mapped: list[tuple[_Node, SpanView, ScorerRunRequest | None]] = []
    for node, attributes in chosen:
        view = span_view(
            node.item.span, "agent", node.item.service, attributes, node.item.resource, span_attributes, versions
        )
        try:
            mapped.append((node, view, map_span(view)))
        except _MAPPING_ERRORS as exc:
            detail = f"{exc.__class__.__name__}: {exc}"[:300]
            rejects.append(SpanReject(view.trace_id, view.span_id, "unmappable", detail))
            own_runs.discard(node.item.span.span_id)
    wrappers = {node.item.span.span_id for node, _, base in mapped if base is None and _wraps_one_agent(node, own_runs)}
    own_runs -= wrappers
    for node, view, base in mapped:
        if node.item.span.span_id in wrappers:
            continue  # a workflow around one agent: the agent's run is the run
        run = _assemble(node, base, own_runs, ready_reason, whole, span_attributes, view.version)
        if run is None:
            skipped["no_content"] += 1
        else:
            runs.append(run)
    return MappingResult(runs=tuple(runs), rejects=tuple(rejects), skipped=SkipCounts(**skipped), spans_seen=len(nodes))


def _wraps_one_agent(node: _Node, own_runs: set[bytes]) -> bool:
    """Whether an agent span (with no content of its own) only wraps another: exactly one agent span that gets its
    own run below it (not inside that one), and no LLM call outside it (the OpenAI Agents SDK's ``Agent workflow``
    around the agent it runs)."""
    agents = 0
    for child, _ in _subtree(node, own_runs):
        if child.item.span.span_id in own_runs:
            agents += 1
        elif child.kind == "inference":
            return False
    return agents == 1


def group_by_trace(
    traces: Any, *, resource_attributes: Collection[str] = (), offset: int = -1, record: bytes | None = None
) -> dict[bytes, list[TraceSpan]]:
    """The spans of a decoded ``TracesData`` / ``ExportTraceServiceRequest`` by trace id, with their service
    (and the ``resource_attributes`` to keep), from the record at ``offset``. ``record``: the encoded record,
    which each span carries (``TraceSpan.record``) when the record holds one trace."""
    grouped: dict[bytes, list[tuple[Span, str | None, tuple[tuple[str, ResourceValue], ...]]]] = {}
    for resource_spans in traces.resource_spans:
        attributes = resource_spans.resource.attributes
        service = service_name_of(attributes)
        resource = kept_resource(attributes, resource_attributes) if resource_attributes else ()
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                grouped.setdefault(span.trace_id, []).append((span, service, resource))
    whole = record if len(grouped) == 1 else None
    return {
        trace_id: [TraceSpan(span, service, resource, offset, whole) for span, service, resource in spans]
        for trace_id, spans in grouped.items()
    }
