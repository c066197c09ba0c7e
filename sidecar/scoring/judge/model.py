"""How to reach a judge model: immutable configuration, secrets kept out of reprs and records."""

from __future__ import annotations

import functools
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, FilePath, SecretStr

from sidecar.scoring.judge.negotiation import StructuredOutputMode

__all__ = ["DEFAULT_MAX_PROMPT_CHARS", "FAST_PATH_PROVIDERS", "Judge", "JudgeModel"]

# About 100k tokens of English: below the context window of the models judges run on, far above a run's prompt.
DEFAULT_MAX_PROMPT_CHARS = 400_000

# Providers whose chat API is OpenAI's wire format; the fast HTTP transport serves them directly.
# Everything else goes through litellm, which knows every provider's quirks.
FAST_PATH_PROVIDERS: frozenset[str] = frozenset({"openai", "hosted_vllm", "lm_studio", "openai_compatible"})

_DEFAULT_API_BASES: dict[str, str] = {"openai": "https://api.openai.com/v1"}
_KEY_ENV: dict[str, str] = {"openai": "OPENAI_API_KEY"}


class JudgeModel(BaseModel):
    """A judge model and its connection. ``model`` is a litellm model id (``provider/name``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=20)
    # Bound on one attempt including its transport retries; None means timeout_s × (max_retries + 1).
    deadline_s: float | None = Field(default=None, gt=0)
    transport: Literal["auto", "http", "litellm"] = "auto"
    # auto: learn what the server takes (json_schema, then json_object with the schema, then the prompt alone:
    # sidecar.scoring.judge.negotiation); or one shape from the start.
    structured_output: StructuredOutputMode = "auto"
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    # The most characters one call's messages may hold: a longer prompt is refused before it is sent (the run
    # fails with PromptTooLargeError), and a judge written in YAML stops rendering past it (docs/limits.md).
    max_prompt_chars: int = Field(default=DEFAULT_MAX_PROMPT_CHARS, gt=0)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8.0, ge=0)
    # PEM file of the CA certificates to trust instead of the default ones (a private CA, a TLS-inspecting
    # proxy); None: the default verify paths, which honour SSL_CERT_FILE.
    ca_bundle: FilePath | None = None

    @property
    def provider(self) -> str:
        prefix, sep, _ = self.model.partition("/")
        return prefix if sep else "openai"

    @property
    def model_name(self) -> str:
        """The id the provider knows the model by (without litellm's provider prefix)."""
        _, sep, rest = self.model.partition("/")
        return rest if sep else self.model

    @property
    def litellm_model(self) -> str:
        return self.model if "/" in self.model else f"openai/{self.model}"

    @property
    def attempt_deadline_s(self) -> float:
        return self.deadline_s if self.deadline_s is not None else self.timeout_s * (self.max_retries + 1)

    @property
    def uses_fast_path(self) -> bool:
        if self.transport != "auto":
            return self.transport == "http"
        return self.provider in FAST_PATH_PROVIDERS and self.resolved_api_base() is not None

    def resolved_api_base(self) -> str | None:
        base = self.api_base or _DEFAULT_API_BASES.get(self.provider)
        return base.rstrip("/") if base else None

    def resolved_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        env = _KEY_ENV.get(self.provider)
        return os.environ.get(env) if env else None

    @functools.cached_property
    def _cache_key(self) -> str:
        return self.model_dump_json() + "\x00" + (self.resolved_api_key() or "")

    def cache_key(self) -> str:
        """Identity of the connection, secret included (clients are shared per key, never logged)."""
        return self._cache_key


class Judge(BaseModel):
    """A scorer's judge: which model, and the instructions sent as its system message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: JudgeModel
    instructions: str | None = None

    @classmethod
    def of(cls, model: str | JudgeModel, instructions: str | None = None) -> Judge:
        return cls(
            model=model if isinstance(model, JudgeModel) else JudgeModel(model=model),
            instructions=instructions,
        )

    def merged(self, override: Judge | None) -> Judge:
        """Step-level judges override the scorer's judge field by field."""
        if override is None:
            return self
        return Judge(
            model=override.model,
            instructions=override.instructions if override.instructions is not None else self.instructions,
        )
