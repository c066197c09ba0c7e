"""``judges``: a judge model, its connection, and the limits the runtime enforces on it."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    FilePath,
    SecretStr,
    field_validator,
)

from sidecar.scoring.judge.model import DEFAULT_MAX_PROMPT_CHARS, JudgeModel
from sidecar.scoring.judge.negotiation import StructuredOutputMode
from sidecar.settings.base import _empty_is_unset, _Frozen
from sidecar.settings.redaction import RedactSettings, switched

__all__ = ["CircuitBreakerSettings", "JudgeSettings"]


class CircuitBreakerSettings(_Frozen):
    """Open after ``failure_threshold`` consecutive failed calls; try again after ``reset_after_s``."""

    failure_threshold: int = Field(default=5, gt=0)  # consecutive failed calls (5xx, timeouts, refused) that open it
    reset_after_s: float = Field(default=30.0, gt=0)  # open this long, then one probe call; its runs are held meanwhile


class JudgeSettings(_Frozen):
    """A judge model, its connection, and the limits the runtime enforces on it."""

    model: str = Field(min_length=1)  # a litellm model id, provider/name
    api_base: str | None = None  # an OpenAI-compatible server's URL (vLLM, Ollama, a gateway); unset: the provider's
    api_key: SecretStr | None = None  # use ${ENV}; unset → the provider's usual variable (OPENAI_API_KEY)
    timeout_s: float = Field(default=60.0, gt=0)  # one HTTP call
    max_retries: int = Field(default=3, ge=0, le=20)  # retries of a 429 (honouring Retry-After), 5xx or timeout
    deadline_s: float | None = Field(default=None, gt=0)  # bound on one step's call and its retries; unset: none
    # auto: OpenAI-compatible judges over aiohttp, others through litellm (docs/judge-transport.md); or force one.
    transport: Literal["auto", "http", "litellm"] = "auto"
    # auto: json_schema, then json_object with the schema, then JSON asked in the prompt, as the server takes them
    # (docs/structured-output.md); or one of those from the start.
    structured_output: StructuredOutputMode = "auto"
    temperature: float | None = Field(default=None, ge=0)  # sent to the model when set; unset: the provider's default
    max_tokens: int | None = Field(default=None, gt=0)  # the most tokens one answer may hold; unset: the provider's
    # The most characters one call's messages may hold: a longer prompt is refused before it is sent (the run
    # fails, counted), and a judge written in YAML stops rendering past it (docs/limits.md).
    max_prompt_chars: int = Field(default=DEFAULT_MAX_PROMPT_CHARS, gt=0)
    ca_bundle: FilePath | None = None  # PEM CA certificates trusted instead of the defaults (SSL_CERT_FILE)
    max_concurrency: int = Field(default=16, gt=0)  # calls in flight to this judge (shared out among workers)
    rpm: int | None = Field(default=None, gt=0)  # requests per minute
    tpm: int | None = Field(default=None, gt=0)  # tokens per minute
    spend_cap_usd_per_hour: float | None = Field(default=None, gt=0)  # estimated cost per rolling hour
    # At the spend cap: "shed" skips the run and counts it (scores stay current, the bill capped); "hold"
    # waits for the window to free budget (every trace scored, late; the backlog waits in Kafka).
    on_spend_cap: Literal["shed", "hold"] = "shed"
    circuit_breaker: CircuitBreakerSettings = CircuitBreakerSettings()
    # Personal data out of every run before this judge reads it (docs/redaction.md): a block of its own laid over
    # the top-level redact block (false: none for this judge), unset for the top-level block as it is.
    redact: RedactSettings | None = None

    _redact_switch = field_validator("redact", mode="before")(switched)

    _unset = field_validator("api_base", "api_key", "deadline_s", "ca_bundle", mode="before")(_empty_is_unset)

    def to_judge_model(self) -> JudgeModel:
        return JudgeModel(
            model=self.model,
            api_base=self.api_base,
            api_key=self.api_key,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            deadline_s=self.deadline_s,
            transport=self.transport,
            structured_output=self.structured_output,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            max_prompt_chars=self.max_prompt_chars,
            ca_bundle=self.ca_bundle,
        )
