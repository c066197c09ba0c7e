"""Every attribute, event and header name the sidecar reads or writes, in one place.

Other modules import these constants instead of spelling names inline, so a renamed convention is a
one-line change and a grep for a name finds every use.
"""

from __future__ import annotations

from typing import Final

# --- Loop guard: the sidecar's own telemetry -------------------------------------------------------
SIDECAR_SERVICE_NAME: Final = "scoring-sidecar"
# Set to true on every span the sidecar creates (judge calls, scorer runs) so it never scores itself.
SIDECAR_INTERNAL: Final = "scoring_sidecar.internal"

# --- Resource ----------------------------------------------------------------------------------------
SERVICE_NAME: Final = "service.name"
SERVICE_VERSION: Final = "service.version"  # where a run's version is read by default, after the agent span's

# --- OTel GenAI semantic conventions (current) --------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_AGENT_VERSION: Final = "gen_ai.agent.version"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_SYSTEM: Final = "gen_ai.system"  # deprecated predecessor of gen_ai.provider.name
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_USAGE_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"  # deprecated
GEN_AI_USAGE_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"  # deprecated

OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CREATE_AGENT: Final = "create_agent"
OP_CHAT: Final = "chat"
OP_GENERATE_CONTENT: Final = "generate_content"
OP_TEXT_COMPLETION: Final = "text_completion"
INFERENCE_OPERATIONS: Final = frozenset({OP_CHAT, OP_GENERATE_CONTENT, OP_TEXT_COMPLETION})
# Operations the conventions define that are not runs: a span naming one of these is recognised and not scored.
OTHER_OPERATIONS: Final = frozenset(
    {OP_CREATE_AGENT, "execute_tool", "embeddings", "retrieval", "invoke_workflow", "create_workflow"}
)
# The instrumentations' OTLP log event that holds one inference call's content (gen_ai.input.messages,
# gen_ai.output.messages, gen_ai.system_instructions as attributes): openai-v2 with event_only / span_and_event.
EVENT_INFERENCE_DETAILS: Final = "gen_ai.client.inference.operation.details"
# A log record's event name when the SDK writes it as an attribute (before LogRecord.event_name existed).
LOG_EVENT_NAME: Final = "event.name"

# --- Legacy GenAI ------------------------------------------------------------------------------------
GEN_AI_PROMPT: Final = "gen_ai.prompt"  # JSON string, or the prefix of gen_ai.prompt.<i>.role|content
GEN_AI_COMPLETION: Final = "gen_ai.completion"
EVENT_SYSTEM_MESSAGE: Final = "gen_ai.system.message"
EVENT_USER_MESSAGE: Final = "gen_ai.user.message"
EVENT_ASSISTANT_MESSAGE: Final = "gen_ai.assistant.message"
EVENT_TOOL_MESSAGE: Final = "gen_ai.tool.message"
EVENT_CHOICE: Final = "gen_ai.choice"
MESSAGE_EVENTS: Final = {
    EVENT_SYSTEM_MESSAGE: "system",
    EVENT_USER_MESSAGE: "user",
    EVENT_ASSISTANT_MESSAGE: "assistant",
    EVENT_TOOL_MESSAGE: "tool",
    EVENT_CHOICE: "assistant",
}
# Azure AI Inference / Azure AI Agents and Semantic Kernel write the whole message as one JSON attribute.
EVENT_ATTR_EVENT_CONTENT: Final = "gen_ai.event.content"
# Semantic conventions 1.26–1.27: two events holding the whole prompt and completion as JSON.
EVENT_CONTENT_PROMPT: Final = "gen_ai.content.prompt"
EVENT_CONTENT_COMPLETION: Final = "gen_ai.content.completion"
CONTENT_EVENTS: Final = {EVENT_CONTENT_PROMPT: GEN_AI_PROMPT, EVENT_CONTENT_COMPLETION: GEN_AI_COMPLETION}
# Every span event whose attributes may carry message content.
CONTENT_EVENT_NAMES: Final = frozenset(MESSAGE_EVENTS) | frozenset(CONTENT_EVENTS)
EVENT_ATTR_CONTENT: Final = "content"
EVENT_ATTR_MESSAGE: Final = "message"
EVENT_ATTR_TOOL_CALLS: Final = "tool_calls"
EVENT_ATTR_ROLE: Final = "role"
EVENT_ATTR_ID: Final = "id"

# --- OpenLLMetry (Traceloop) ---------------------------------------------------------------------------------
LLM_REQUEST_TYPE: Final = "llm.request.type"  # chat | completion | embedding | rerank: before gen_ai.operation.name
TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"  # workflow | task | agent | tool | unknown
TRACELOOP_ENTITY_INPUT: Final = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
LLM_REQUEST_TYPES_INFERENCE: Final = frozenset({"chat", "completion"})
LLM_REQUEST_TYPES_OTHER: Final = frozenset({"embedding", "rerank"})
TRACELOOP_KINDS_AGENT: Final = frozenset({"agent", "workflow"})
TRACELOOP_KINDS_OTHER: Final = frozenset({"task", "tool"})

# --- OpenInference -------------------------------------------------------------------------------------
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
OI_KIND_AGENT: Final = "AGENT"
OI_KIND_LLM: Final = "LLM"
OI_KIND_EVALUATOR: Final = "EVALUATOR"  # what the sidecar's scorer-run spans are
OI_KINDS_OTHER: Final = frozenset(
    {"TOOL", "CHAIN", "RETRIEVER", "EMBEDDING", "RERANKER", "GUARDRAIL", "PROMPT", OI_KIND_EVALUATOR}
)
OI_PROJECT_NAME: Final = "openinference.project.name"  # resource: the Phoenix project of a trace
INPUT_VALUE: Final = "input.value"
INPUT_MIME_TYPE: Final = "input.mime_type"
OUTPUT_VALUE: Final = "output.value"
OUTPUT_MIME_TYPE: Final = "output.mime_type"
LLM_INPUT_MESSAGES: Final = "llm.input_messages"
LLM_OUTPUT_MESSAGES: Final = "llm.output_messages"
LLM_MODEL_NAME: Final = "llm.model_name"
LLM_PROVIDER: Final = "llm.provider"
LLM_SYSTEM: Final = "llm.system"
OI_AGENT_NAME: Final = "agent.name"
MIME_JSON: Final = "application/json"

# --- Mastra's OTel exporter ------------------------------------------------------------------------------
MASTRA_SPAN_TYPE: Final = "mastra.span.type"
MASTRA_AGENT_RUN: Final = "agent_run"
MASTRA_PREFIX: Final = "mastra."
MASTRA_INPUT_SUFFIX: Final = ".input"
MASTRA_OUTPUT_SUFFIX: Final = ".output"
# Older @mastra/otel-exporter releases wrote these instead of gen_ai.* on agent runs.
MASTRA_LEGACY_AGENT_ID: Final = "agent.id"
MASTRA_LEGACY_OPERATION_AGENT_RUN: Final = "agent.run"
MASTRA_LEGACY_INPUT: Final = "input"
MASTRA_LEGACY_OUTPUT: Final = "output"

# --- Dead-letter record headers ---------------------------------------------------------------------------
DL_REASON: Final = "x-dead-letter-reason"
DL_DETAIL: Final = "x-dead-letter-detail"
DL_SOURCE_TOPIC: Final = "x-dead-letter-source-topic"
DL_SOURCE_PARTITION: Final = "x-dead-letter-source-partition"
DL_SOURCE_OFFSET: Final = "x-dead-letter-source-offset"
DL_SPAN_ID: Final = "x-dead-letter-span-id"
DL_TRACE_ID: Final = "x-dead-letter-trace-id"
DL_ENCODING: Final = "x-dead-letter-encoding"
# One letter stands for every span of a record (or a ready trace) set aside for one reason: how many, the first named.
DL_SPAN_COUNT: Final = "x-dead-letter-span-count"
# A record's bytes travel in one of its letters: the others name the reason of the letter that carries them.
DL_VALUE_WITH: Final = "x-dead-letter-value-with"
# The record's own headers or key, left out of a letter they would not fit in: how many headers, how many bytes.
DL_HEADERS_DROPPED: Final = "x-dead-letter-headers-dropped"
DL_KEY_DROPPED: Final = "x-dead-letter-key-dropped"
# Score dead letters (exporters.dead_letters): the exporter that refused it.
DL_EXPORTER: Final = "x-dead-letter-exporter"
# The size in bytes of a value cut (a record's dead letter keeps its first bytes) or left out (a score's).
DL_TRUNCATED: Final = "x-dead-letter-truncated"

# --- OpenInference token counts (kept apart: read only as a fallback for GenAI usage) ---------------
LLM_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
