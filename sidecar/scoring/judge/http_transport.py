"""The fast path: OpenAI-compatible chat completions over a lean HTTP/1.1 client (or aiohttp).

litellm's client costs ~10 ms of CPU per call here, aiohttp ~0.4 ms and our lean client
(``sidecar.scoring.judge.lean_http``) ~0.15 ms, most of it the event loop's own work: at hundreds of
judge calls per second the client, not the judge, would otherwise be the bottleneck. This transport
speaks only the OpenAI wire format and reports usage, errors and cost exactly as the litellm transport
does (a test runs both against the same server and compares the records).

``JudgeModel.http_client`` picks the HTTP client: ``"lean"`` (the default) or ``"aiohttp"``, kept as a
fallback for servers the lean client might not get along with. Both report failures the same way:
``TimeoutError`` → ``Timeout``, any connection or framing failure → ``APIConnectionError``.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import TYPE_CHECKING, Any, Protocol

import pydantic_core

from sidecar.scoring.judge.errors import APIConnectionError, InternalServerError, Timeout, error_for_status
from sidecar.scoring.judge.lean_http import HTTPConnectionError, LeanHTTPClient
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import (
    ChatRequest,
    ChatResponse,
    parse_provider_cost,
    parse_retry_after,
    parse_usage,
    redact,
)

if TYPE_CHECKING:
    import aiohttp

__all__ = ["AiohttpClient", "HTTPClient", "OpenAICompatibleTransport"]


class _Reply(Protocol):
    status: int
    headers: dict[str, str]
    body: bytes


class HTTPClient(Protocol):
    """POSTs to one URL. Raises ``TimeoutError`` past ``timeout_s`` and ``HTTPConnectionError`` otherwise."""

    async def post(self, body: bytes, timeout_s: float) -> _Reply: ...

    async def aclose(self) -> None: ...


class _AiohttpReply:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class AiohttpClient:
    """The same POST over one shared aiohttp session (the fast path before the lean client)."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        *,
        limit: int = 512,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._url = url
        self._headers = headers
        self._limit = limit
        self._ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limit, ttl_dns_cache=300, ssl=self._ssl_context if self._ssl_context else True
            )
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers)
        return self._session

    async def post(self, body: bytes, timeout_s: float) -> _Reply:
        import aiohttp

        session = self._client()
        try:
            async with session.post(self._url, data=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                payload = await response.read()
                return _AiohttpReply(response.status, dict(response.headers), payload)
        except aiohttp.ClientError as exc:
            raise HTTPConnectionError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
            # aiohttp closes transports on the next loop turn; give it one so nothing warns later.
            await asyncio.sleep(0)


class OpenAICompatibleTransport:
    def __init__(
        self,
        model: JudgeModel,
        *,
        connection_limit: int = 512,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        base = model.resolved_api_base()
        if base is None:
            raise ValueError(f"judge {model.model!r}: the HTTP transport needs an api_base")
        url = f"{base}/chat/completions"
        self._model = model
        self._api_key = model.resolved_api_key()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._http: HTTPClient
        if model.http_client == "aiohttp":
            self._http = AiohttpClient(url, headers, limit=connection_limit, ssl_context=ssl_context)
        else:
            self._http = LeanHTTPClient(url, headers, limit=connection_limit, ssl_context=ssl_context)
        # The parts of the body that never change, serialised once.
        self._fixed: dict[str, Any] = {}
        if model.temperature is not None:
            self._fixed["temperature"] = model.temperature
        if model.max_tokens is not None:
            self._fixed["max_tokens"] = model.max_tokens

    def _body(self, request: ChatRequest) -> bytes:
        body: dict[str, Any] = {"model": self._model.model_name, "messages": list(request.messages)}
        if request.response_format is not None:
            body["response_format"] = request.response_format
        if self._fixed:
            body.update(self._fixed)
        return pydantic_core.to_json(body)  # compact UTF-8 JSON, encoded in Rust

    async def complete(self, request: ChatRequest) -> ChatResponse:
        try:
            reply = await self._http.post(self._body(request), request.timeout_s)
        except TimeoutError as exc:
            raise Timeout(f"judge call timed out after {request.timeout_s:g}s", code="408") from exc
        except HTTPConnectionError as exc:
            raise APIConnectionError(redact(f"connection to the judge failed: {exc}", self._api_key)) from exc
        status, payload = reply.status, reply.body
        if status != 200:
            raise self._error(status, payload, reply.headers)
        try:
            data = pydantic_core.from_json(payload)  # a third of json.loads' CPU on a completion
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            # litellm (through the OpenAI SDK) calls this an InternalServerError, retryable: so do we.
            raise InternalServerError(
                "the judge answered HTTP 200 with a body that is not a chat completion", status_code=500
            ) from exc
        content = message.get("content")
        raw_usage = data.get("usage")
        finish_reason = choice.get("finish_reason")
        return ChatResponse(
            text=content if isinstance(content, str) else None,
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
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
        await self._http.aclose()
