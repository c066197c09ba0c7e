"""The fast path: OpenAI-compatible chat completions over one shared aiohttp session.

litellm's client costs ~10 ms of CPU per call here, a raw aiohttp POST ~0.6 ms: at hundreds of judge
calls per second the client, not the judge, would be the bottleneck. This transport speaks only the
OpenAI wire format and reports usage, errors and cost exactly as the litellm transport does (a test
runs both against the same server and compares the records).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from sidecar.scoring.judge.errors import APIConnectionError, InternalServerError, Timeout, error_for_status
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import (
    ChatRequest,
    ChatResponse,
    parse_provider_cost,
    parse_retry_after,
    parse_usage,
    redact,
)

__all__ = ["OpenAICompatibleTransport"]


class OpenAICompatibleTransport:
    def __init__(self, model: JudgeModel, *, connection_limit: int = 512) -> None:
        base = model.resolved_api_base()
        if base is None:
            raise ValueError(f"judge {model.model!r}: the HTTP transport needs an api_base")
        self._url = f"{base}/chat/completions"
        self._model = model
        self._api_key = model.resolved_api_key()
        self._headers = {"Content-Type": "application/json"}
        if self._api_key:
            self._headers["Authorization"] = f"Bearer {self._api_key}"
        self._connection_limit = connection_limit
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._connection_limit, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers)
        return self._session

    def _body(self, request: ChatRequest) -> bytes:
        body: dict[str, Any] = {"model": self._model.model_name, "messages": list(request.messages)}
        if request.response_format is not None:
            body["response_format"] = request.response_format
        if self._model.temperature is not None:
            body["temperature"] = self._model.temperature
        if self._model.max_tokens is not None:
            body["max_tokens"] = self._model.max_tokens
        return json.dumps(body).encode()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        session = self._client()
        try:
            async with session.post(
                self._url, data=self._body(request), timeout=aiohttp.ClientTimeout(total=request.timeout_s)
            ) as response:
                payload = await response.read()
                status = response.status
                headers = dict(response.headers)
        except TimeoutError as exc:
            raise Timeout(f"judge call timed out after {request.timeout_s:g}s", code="408") from exc
        except aiohttp.ClientError as exc:
            raise APIConnectionError(redact(f"connection to the judge failed: {exc}", self._api_key)) from exc
        if status != 200:
            raise self._error(status, payload, headers)
        try:
            data = json.loads(payload)
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            # litellm (through the OpenAI SDK) calls this an InternalServerError, retryable: so do we.
            raise InternalServerError(
                "the judge answered HTTP 200 with a body that is not a chat completion", status_code=500
            ) from exc
        content = message.get("content")
        raw_usage = data.get("usage")
        return ChatResponse(
            text=content if isinstance(content, str) else None,
            finish_reason=choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None,
            usage=parse_usage(raw_usage),
            provider_cost=parse_provider_cost(raw_usage),
        )

    def _error(self, status: int, payload: bytes, headers: dict[str, str]) -> Exception:
        message = payload.decode("utf-8", "replace")[:2000]
        code: str | None = None
        try:
            error = json.loads(payload).get("error")
            if isinstance(error, dict):
                message = str(error.get("message") or message)
                code = str(error["code"]) if error.get("code") is not None else None
            elif isinstance(error, str):
                message = error
        except (ValueError, AttributeError):
            pass
        return error_for_status(
            status, redact(message, self._api_key), code=code, retry_after_s=parse_retry_after(headers)
        )

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
            # aiohttp closes transports on the next loop turn; give it one so nothing warns later.
            await asyncio.sleep(0)
