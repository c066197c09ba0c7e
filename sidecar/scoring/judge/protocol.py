"""What a judge transport takes and gives back, whichever way it reaches the provider."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sidecar.scoring.types import JudgeCost, JudgeUsage

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "Transport",
    "parse_provider_cost",
    "parse_usage",
    "redact",
]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: tuple[Mapping[str, str], ...]
    response_format: Mapping[str, Any] | None = None
    timeout_s: float = 60.0
    # Who asks (scorer id and step): labels the call's metrics; never sent to the provider.
    scorer: str = ""
    step: str = ""
    # A structured-output shape the server may refuse (``structured_output: auto`` trying it): the client ends
    # the call at the first answer that may be such a refusal, and the gate does not count it against the judge.
    shape_probe: bool = False


@dataclass(frozen=True, slots=True)
class ChatResponse:
    text: str | None
    finish_reason: str | None
    usage: JudgeUsage | None
    provider_cost: JudgeCost | None
    status_code: int = 200


class Transport(Protocol):
    async def complete(self, request: ChatRequest) -> ChatResponse:
        """One model call. Raises ``ProviderError`` subclasses; never retries by itself."""
        ...

    async def aclose(self) -> None: ...


def _number(value: Any) -> int | None:
    # Providers put strings, nulls and nested objects where numbers belong; keep numbers only.
    if type(value) is int:  # nearly always: skip the checks below (bool is not int's exact type)
        return value
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return int(value)


def _nested(raw: Mapping[str, Any], outer: str, inner: str) -> int | None:
    details = raw.get(outer)
    if details is not None and isinstance(details, Mapping):
        return _number(details.get(inner))
    return None


def parse_usage(raw: Any) -> JudgeUsage | None:
    """OpenAI-style usage (as litellm also normalises it) → our usage; ``None`` when absent."""
    if type(raw) is not dict and not isinstance(raw, Mapping):  # a dict skips the ABC check
        return None
    input_tokens = _number(raw.get("prompt_tokens"))
    output_tokens = _number(raw.get("completion_tokens"))
    total = _number(raw.get("total_tokens"))
    # litellm reports a missing total as 0; a total below its parts is a missing total either way.
    if (input_tokens is not None or output_tokens is not None) and (
        total is None or total < (input_tokens or 0) + (output_tokens or 0)
    ):
        total = (input_tokens or 0) + (output_tokens or 0)
    cached = _nested(raw, "prompt_tokens_details", "cached_tokens")
    if cached is None:
        cached = _number(raw.get("cache_read_input_tokens"))
    reasoning = _nested(raw, "completion_tokens_details", "reasoning_tokens")
    if reasoning is None:
        reasoning = _number(raw.get("reasoning_tokens"))
    creation = _number(raw.get("cache_creation_input_tokens"))
    if all(v is None for v in (input_tokens, output_tokens, total, reasoning, cached, creation)):
        return None
    return JudgeUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=total,
        reasoning_tokens=reasoning,
        cached_input_tokens=cached,
        cache_creation_input_tokens=creation,
    )


def parse_provider_cost(raw_usage: Any) -> JudgeCost | None:
    """A cost the provider reported in its usage block (OpenRouter and gateways do), in USD."""
    if type(raw_usage) is not dict and not isinstance(raw_usage, Mapping):
        return None
    amount = raw_usage.get("cost")
    if amount is None:
        return None
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount != amount or amount < 0:
        return None
    return JudgeCost(amount=float(amount), unit="USD", source="provider")


def redact(text: str, secret: str | None) -> str:
    """Providers echo keys in error messages ("Incorrect API key provided: sk-…"); never pass them on."""
    if not secret or len(secret) < 4:
        return text
    redacted = text.replace(secret, "[REDACTED]")
    # Some providers echo a truncated key: hide any long prefix or suffix of it too.
    for size in (12, 8):
        if len(secret) > size:
            redacted = redacted.replace(secret[:size], "[REDACTED]").replace(secret[-size:], "[REDACTED]")
    return redacted
