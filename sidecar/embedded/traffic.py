"""Synthetic agent traffic as an OTel Collector would write it to Kafka: real SDK spans, OTLP-encoded.

Several agents, good / partial / poor answers, two conventions (OTel GenAI and OpenInference), with
HTTP and database spans around each agent run, so that selection has something to skip. Each agent has a version
(``gen_ai.agent.version`` on a GenAI agent span, ``service.version`` on an OpenInference agent's resource), and a
:class:`Rollout` releases a second version of one agent beside the first (docs/versions.md). Used by the
embedded demo and by the service's tests and benchmarks.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

__all__ = [
    "AGENTS",
    "DEMO_ROLLOUT",
    "AgentProfile",
    "Conversation",
    "GeneratedTrace",
    "Rollout",
    "TrafficGenerator",
    "agent_trace",
]


@dataclass(frozen=True)
class Conversation:
    """One exchange: the user's message and the agent's answer (a turn of a multi-turn conversation, in
    ``sidecar.embedded.conversations``)."""

    quality: str  # excellent | partial | poor
    user: str
    answer: str
    tool: str | None = None  # a tool the agent called before answering (GenAI agents: a tool call and result)


@dataclass(frozen=True)
class AgentProfile:
    name: str
    service: str
    system: str
    convention: str  # genai | openinference
    conversations: tuple[Conversation, ...]
    version: str | None = None  # on the agent span (GenAI) or its resource's service.version (OpenInference)


AGENTS: tuple[AgentProfile, ...] = (
    AgentProfile(
        "coding-assistant",
        "dev-portal",
        "You are a helpful coding assistant. Always provide working code examples.",
        "genai",
        (
            Conversation(
                "excellent",
                "Write a Python function to calculate factorial with error handling for negative numbers",
                'def factorial(n):\n    """Calculate the factorial of n; raise ValueError for negative numbers."""\n'
                '    if n < 0:\n        raise ValueError("factorial is not defined for negative numbers")\n'
                "    return 1 if n in (0, 1) else n * factorial(n - 1)",
            ),
            Conversation(
                "partial",
                "List the benefits of TypeScript in bullet points",
                "The benefits of TypeScript are static typing, better IDE support and more reliable code.",
            ),
            Conversation(
                "poor",
                "Write a Python class with initialization, validation, error handling, and documentation",
                "class Example:\n    # the rest is obviously up to you\n"
                "    def __init__(self, value):\n        self.value = value",
            ),
        ),
        version="1.4.0",
    ),
    AgentProfile(
        "travel-agent",
        "travel-api",
        "You are a concise travel agent. Answer with concrete suggestions.",
        "openinference",
        (
            Conversation(
                "excellent",
                "Suggest three museums to visit in Paris with their opening hours",
                "Three museums in Paris: the Louvre (9:00-18:00), the Musee d'Orsay (9:30-18:00) and the "
                "Centre Pompidou (11:00-21:00). Check opening hours before you visit museums in Paris.",
            ),
            Conversation(
                "partial",
                "Plan a two day itinerary for Rome with restaurants and museums",
                "Day one: visit the Colosseum. Day two: the Vatican. Restaurants? Obviously you can find those.",
            ),
            Conversation(
                "poor",
                "What documents do I need to travel from Canada to Japan",
                "Have a nice trip! What a silly question.",
            ),
        ),
        version="2025.06.1",
    ),
    AgentProfile(
        "support-bot",
        "helpdesk",
        "You are a polite support agent. Always give numbered steps.",
        "genai",
        (
            Conversation(
                "excellent",
                "How do I reset my password on the account settings page",
                "To reset your password:\n1. Open the account settings page.\n2. Choose 'Reset password'.\n"
                "3. Follow the link we email you to set a new password.",
                tool="lookup_account",
            ),
            Conversation(
                "poor",
                "How do I export my invoices as PDF",
                "Please contact support for any billing questions, that is not my job.",
                tool="send_email",
            ),
        ),
        version="3.1.0",
    ),
)


@dataclass(frozen=True)
class Rollout:
    """A second version of one agent, beside the first: from the ``after``-th trace of the traffic on, a ``share`` of
    that agent's runs are ``version``, answering with its own ``conversations``."""

    agent: str
    version: str
    conversations: tuple[Conversation, ...]
    after: int = 0
    share: float = 0.5

    def profile_of(self, agent: AgentProfile) -> AgentProfile:
        return dataclasses.replace(agent, version=self.version, conversations=self.conversations)


# The demo's release: support-bot 3.2.0 answers as 3.1.0 does, but looks the account up with the wrong tool
# (search_docs instead of lookup_account): worse on tool-call accuracy, the same on every scorer that reads the answer
# (docs/versions.md).
DEMO_ROLLOUT = Rollout(
    agent="support-bot",
    version="3.2.0",
    conversations=(
        Conversation(
            "excellent",
            "How do I reset my password on the account settings page",
            "To reset your password:\n1. Open the account settings page.\n2. Choose 'Reset password'.\n"
            "3. Follow the link we email you to set a new password.",
            tool="search_docs",
        ),
        Conversation(
            "poor",
            "How do I export my invoices as PDF",
            "Please contact support for any billing questions, that is not my job.",
            tool="send_email",
        ),
    ),
    after=30,
    share=0.5,
)


class _Collect(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@dataclass(frozen=True)
class GeneratedTrace:
    trace_id: str
    agent_span_id: str
    agent: str
    quality: str
    request: ExportTraceServiceRequest
    # A turn of a multi-turn conversation: its id (on the trace's spans as gen_ai.conversation.id or
    # session.id), the turn's number (1-based) and how the conversation goes (calm, recovered, frustrated).
    conversation_id: str | None = None
    turn: int = 0
    mood: str | None = None
    version: str | None = None  # the agent's version

    @property
    def key(self) -> bytes:
        return self.trace_id.encode()  # what the Collector's partition_traces_by_id writes


def _genai_output(conversation: Conversation) -> list[dict[str, Any]]:
    answer: dict[str, Any] = {
        "role": "assistant",
        "parts": [{"type": "text", "content": conversation.answer}],
        "finish_reason": "stop",
    }
    if conversation.tool is None:
        return [answer]
    call = {"type": "tool_call", "id": "call_1", "name": conversation.tool, "arguments": {"user": "current"}}
    result = {"type": "tool_call_response", "id": "call_1", "response": {"status": "ok"}}
    return [{"role": "assistant", "parts": [call]}, {"role": "tool", "parts": [result]}, answer]


def _genai_attributes(agent: AgentProfile, conversation: Conversation) -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent.name,
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": agent.system}]),
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": conversation.user}]}]
        ),
        "gen_ai.output.messages": json.dumps(_genai_output(conversation)),
        "gen_ai.usage.input_tokens": 40 + len(conversation.user) // 4,
        "gen_ai.usage.output_tokens": 10 + len(conversation.answer) // 4,
    }


def _openinference_attributes(agent: AgentProfile, conversation: Conversation) -> dict[str, AttributeValue]:
    return {
        "openinference.span.kind": "AGENT",
        "agent.name": agent.name,
        "llm.model_name": "gpt-4o",
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": agent.system,
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": conversation.user,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": conversation.answer,
    }


def agent_trace(
    agent: AgentProfile, conversation: Conversation, *, noise_spans: int = 2, conversation_id: str | None = None
) -> tuple[str, str, ExportTraceServiceRequest]:
    """One agent run as a trace, OTLP-encoded: an HTTP server span, the agent span, ``noise_spans`` database
    spans. With ``conversation_id`` the trace is a turn of that conversation, as each convention marks it:
    GenAI puts ``gen_ai.conversation.id`` on the agent span, OpenInference's ``using_session`` puts
    ``session.id`` on every span. Returns (trace id, agent span id, the export request)."""
    collector = _Collect()
    resource: dict[str, AttributeValue] = {"service.name": agent.service}
    genai = agent.convention == "genai"
    if agent.version is not None and not genai:
        resource["service.version"] = agent.version
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(collector))
    tracer = provider.get_tracer("agent-app")
    attributes = _genai_attributes(agent, conversation) if genai else _openinference_attributes(agent, conversation)
    if agent.version is not None and genai:
        attributes["gen_ai.agent.version"] = agent.version
    every: dict[str, AttributeValue] = {}
    if conversation_id is not None:
        if genai:
            attributes["gen_ai.conversation.id"] = conversation_id
        else:
            every["session.id"] = conversation_id
    with (
        tracer.start_as_current_span(
            "POST /chat",
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "url.path": "/chat", **every},
        ),
        tracer.start_as_current_span(f"invoke_agent {agent.name}", attributes={**attributes, **every}) as span,
    ):
        context = span.get_span_context()
        for i in range(noise_spans):
            with tracer.start_as_current_span(
                f"SELECT table_{i}", kind=SpanKind.CLIENT, attributes={"db.system.name": "postgresql", **every}
            ):
                pass
    provider.shutdown()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}", encode_spans(collector.spans)


class TrafficGenerator:
    """Builds traces one at a time; deterministic for a given seed (and rollout)."""

    def __init__(
        self,
        *,
        seed: int = 7,
        agents: Sequence[AgentProfile] = AGENTS,
        noise_spans: int = 2,
        rollout: Rollout | None = None,
    ) -> None:
        self._random = random.Random(seed)
        self._agents = tuple(agents)
        self._noise = noise_spans
        self._rollout = rollout
        self._made = 0

    def trace(self) -> GeneratedTrace:
        agent = self._random.choice(self._agents)
        rollout = self._rollout
        if (
            rollout is not None
            and agent.name == rollout.agent
            and self._made >= rollout.after
            and self._random.random() < rollout.share
        ):
            agent = rollout.profile_of(agent)
        self._made += 1
        conversation = self._random.choice(agent.conversations)
        trace_id, span_id, request = agent_trace(agent, conversation, noise_spans=self._noise)
        return GeneratedTrace(trace_id, span_id, agent.name, conversation.quality, request, version=agent.version)

    def traces(self, count: int) -> Iterator[GeneratedTrace]:
        for _ in range(count):
            yield self.trace()
