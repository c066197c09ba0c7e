"""Every instrumentation, version and content mode the sidecar is tested against with the real package: where the
content lives, and what the sidecar reads. One list for the tests (``test_instrumented_e2e.py`` runs each) and for
the table in docs/ingest.md (a test keeps the two equal): the table says what the tests show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["SETUPS", "Setup", "ingest_table"]


@dataclass(frozen=True, slots=True)
class Setup:
    id: str
    instrumentation: str  # produce.py's name for it
    environment: str  # its venv (environments.py)
    package: str
    version: str
    mode: str  # produce.py's mode
    configured: str  # how the app sets the mode, in the table's words
    content_in: str  # where the instrumentation writes the content
    reads: str  # what the sidecar reads, and what it needs for it
    scope: Literal["span", "trace"]  # what the test scores: each LLM call (span) or each agent run (trace)
    logs: bool  # the content is in log records: kafka.log_topics must carry them

    @property
    def scenario(self) -> Literal["chat", "agents"]:
        return "agents" if self.scope == "trace" else "chat"


_GENAI_ATTRIBUTES = "span attributes `gen_ai.input.messages`, `gen_ai.output.messages` (JSON)"
_GENAI_DETAILS = (
    "log record `gen_ai.client.inference.operation.details` (`gen_ai.input.messages`, `gen_ai.output.messages` "
    "as structured attributes)"
)

SETUPS: tuple[Setup, ...] = (
    Setup(
        "openai-v2-span_only", "openai-v2", "openai-v2", "opentelemetry-instrumentation-openai-v2", "2.4b0",
        "span_only", "`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only`", _GENAI_ATTRIBUTES,
        "the span's attributes", "span", logs=False,
    ),
    Setup(
        "openai-v2-span_and_event", "openai-v2", "openai-v2", "opentelemetry-instrumentation-openai-v2", "2.4b0",
        "span_and_event", "`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_and_event`",
        f"{_GENAI_ATTRIBUTES}, and the same as a log record",
        "the span's attributes (with `kafka.log_topics`, the log record is counted `expired`: the span had its own)",
        "span", logs=False,
    ),
    Setup(
        "openai-v2-event_only", "openai-v2", "openai-v2", "opentelemetry-instrumentation-openai-v2", "2.4b0",
        "event_only", "`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=event_only`", _GENAI_DETAILS,
        "the log record, joined to its span (`kafka.log_topics`)", "span", logs=True,
    ),
    Setup(
        "openllmetry-0.62-attributes", "traceloop", "openllmetry-0.62", "opentelemetry-instrumentation-openai",
        "0.62.4", "attributes", "default", _GENAI_ATTRIBUTES, "the span's attributes", "span", logs=False,
    ),
    Setup(
        "openllmetry-0.62-events", "traceloop", "openllmetry-0.62", "opentelemetry-instrumentation-openai", "0.62.4",
        "events", "`OpenAIInstrumentor(use_attributes=False)`",
        "log records `gen_ai.system/user/assistant/tool.message`, `gen_ai.choice` (the message in the body)",
        "the log records, joined to their span (`kafka.log_topics`); a tool message without an id answers the "
        "oldest open call", "span", logs=True,
    ),
    Setup(
        "openllmetry-0.52-legacy", "traceloop-legacy", "openllmetry-0.52", "opentelemetry-instrumentation-openai",
        "0.52.6", "default", "default",
        "span attributes `gen_ai.prompt.<i>.*`, `gen_ai.completion.<i>.*`; the span marked `llm.request.type=chat`",
        "the flattened attributes; `llm.request.type` selects the span", "span", logs=False,
    ),
    Setup(
        "openinference-openai", "openinference", "openinference", "openinference-instrumentation-openai", "0.1.66",
        "default", "default", "span attributes `llm.input_messages.<i>.*`, `llm.output_messages.<i>.*`",
        "the flattened attributes", "span", logs=False,
    ),
    Setup(
        "openinference-agents", "openinference-agents", "openinference", "openinference-instrumentation-openai-agents",
        "2.6.0 (openai-agents 0.24.0)", "default", "default",
        "`LLM` spans (`llm.*_messages`), `TOOL` spans (`input.value`, `output.value`); `AGENT` spans without content, "
        "under an `Agent workflow` `AGENT` span",
        "scope trace: each `AGENT` span with its subtree; the workflow around one agent is not a run; tool calls once "
        "(matched to the LLM's requested calls by name and arguments); a sub-agent called as a tool is that tool call",
        "trace", logs=False,
    ),
    Setup(
        "otel-agents", "otel-agents", "otel-agents", "opentelemetry-instrumentation-openai-agents-v2",
        "0.1.0 (openai-agents 0.24.0)", "default", "default",
        "`invoke_agent` spans with the whole turn (`gen_ai.input.messages`, `gen_ai.system_instructions`), "
        "`execute_tool` spans, `chat` spans; turn spans named `unknown`",
        "scope trace: each `invoke_agent` span with its subtree; the workflow around one agent is not a run; the tool "
        "calls of the agent's own messages once; the `unknown` turn spans are counted `unrecognised`",
        "trace", logs=False,
    ),
)  # fmt: skip


def ingest_table() -> str:
    """The table docs/ingest.md holds (between its ``instrumentations:begin`` and ``:end`` markers)."""
    rows = [
        "| instrumentation | version | mode | where the content lives | what the sidecar reads "
        "| needs `kafka.log_topics` |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETUPS:
        logs = "yes" if s.logs else "no"
        rows.append(f"| `{s.package}` | {s.version} | {s.configured} | {s.content_in} | {s.reads} | {logs} |")
    return "\n".join(rows)
