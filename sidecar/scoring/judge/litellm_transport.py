"""The universal path: ``litellm.acompletion`` for every provider litellm knows.

litellm is imported here and nowhere else, on first use: its import takes seconds and, unless told
otherwise, fetches a price map from the network.

Egress is litellm's own (see docs/judge-transport.md): it reads ``HTTPS_PROXY``/``HTTP_PROXY``/
``NO_PROXY`` itself, and the judge's ``ca_bundle`` goes along as litellm's per-call ``ssl_verify``, which
the providers on litellm's own HTTP handler honour; those it reaches through the OpenAI SDK (openai,
azure) trust only the process-wide setting (``SSL_CERT_FILE``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from sidecar.scoring.judge import errors as judge_errors
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import (
    ChatRequest,
    ChatResponse,
    parse_provider_cost,
    parse_usage,
    redact,
)
from sidecar.scoring.retry_after import parse_retry_after

__all__ = ["LiteLLMTransport", "import_litellm"]

_litellm: ModuleType | None = None


def import_litellm() -> ModuleType:
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        import litellm

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        _litellm = litellm
    return _litellm


class LiteLLMTransport:
    def __init__(self, model: JudgeModel) -> None:
        self._model = model
        self._api_key = model.resolved_api_key()
        self._api_base = model.api_base

    async def complete(self, request: ChatRequest) -> ChatResponse:
        litellm = import_litellm()
        kwargs: dict[str, Any] = {
            "model": self._model.litellm_model,
            "messages": [dict(m) for m in request.messages],
            "timeout": request.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
        }
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        if request.response_format is not None:
            kwargs["response_format"] = copy.deepcopy(dict(request.response_format))
        if self._model.temperature is not None:
            kwargs["temperature"] = self._model.temperature
        if self._model.max_tokens is not None:
            kwargs["max_tokens"] = self._model.max_tokens
        if self._model.ca_bundle is not None:
            kwargs["ssl_verify"] = str(self._model.ca_bundle)
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise self._translate(exc) from exc
        choice = response.choices[0]
        content = getattr(choice.message, "content", None)
        raw_usage = _usage_dict(getattr(response, "usage", None))
        return ChatResponse(
            text=content if isinstance(content, str) else None,
            finish_reason=choice.finish_reason if isinstance(choice.finish_reason, str) else None,
            usage=parse_usage(raw_usage),
            provider_cost=parse_provider_cost(raw_usage),
        )

    def _translate(self, exc: Exception) -> judge_errors.ProviderError:
        # litellm's exception names are ours (see judge.errors); fall back to the status code.
        message = redact(_strip_litellm_prefix(str(getattr(exc, "message", None) or exc)), self._api_key)
        status = getattr(exc, "status_code", None)
        status = status if isinstance(status, int) else None
        code = getattr(exc, "code", None)
        code_text = str(code) if code is not None else None
        headers = _headers_of(exc)
        cls = getattr(judge_errors, type(exc).__name__, None)
        if isinstance(cls, type) and issubclass(cls, judge_errors.ProviderError):
            if status == 429 and code_text == "insufficient_quota":
                cls = judge_errors.PaymentRequiredError
            return cls(message, code=code_text, status_code=status, retry_after_s=parse_retry_after(headers))
        if status is not None:
            return judge_errors.error_for_status(
                status, message, code=code_text, retry_after_s=parse_retry_after(headers)
            )
        return judge_errors.APIError(message, code=code_text)

    async def aclose(self) -> None:
        return None


def _usage_dict(usage: Any) -> Mapping[str, Any] | None:
    if usage is None:
        return None
    if isinstance(usage, Mapping):
        return usage
    dump = getattr(usage, "model_dump", None)
    return dump() if callable(dump) else None


def _headers_of(exc: Exception) -> Mapping[str, str] | None:
    headers = getattr(exc, "headers", None)
    if isinstance(headers, Mapping) and headers:
        return headers
    response = getattr(exc, "response", None)
    response_headers = getattr(response, "headers", None)
    return dict(response_headers) if response_headers is not None else None


def _strip_litellm_prefix(message: str) -> str:
    # "litellm.RateLimitError: OpenAIException - <provider message>" → "<provider message>"
    for marker in ("Exception - ", "Error - "):
        head, sep, tail = message.partition(marker)
        if sep and head.startswith("litellm."):
            return tail
    return message
