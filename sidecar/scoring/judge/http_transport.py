"""The fast path: OpenAI-compatible chat completions over one shared aiohttp session per transport.

litellm spends many times a bare POST's CPU per call (docs/judge-transport.md); at hundreds of judge calls
per second that, not the judge, would bound the sidecar. This transport speaks only the OpenAI wire format
and reports usage, errors and cost exactly as the litellm transport does (a test runs both against the same
server and compares the records). Failures: ``TimeoutError`` → ``Timeout``; anything wrong with the
connection, TLS, the proxy or the response's framing → ``APIConnectionError``; an HTTP error status →
``error_for_status``.

TLS trusts the judge's ``ca_bundle`` or the default paths (``SSL_CERT_FILE``); the proxy comes from
``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY``. Both are settled when the transport is made
(``sidecar.scoring.judge.egress``). The session itself is made on the first call, inside the event loop
it belongs to.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from typing import Any

import aiohttp
import pydantic_core
from multidict import CIMultiDictProxy
from yarl import URL

from sidecar.scoring.judge.egress import env_proxy, tls_context
from sidecar.scoring.judge.errors import APIConnectionError, InternalServerError, Timeout, error_for_status
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import (
    ChatRequest,
    ChatResponse,
    parse_provider_cost,
    parse_usage,
    redact,
)
from sidecar.scoring.retry_after import parse_retry_after

__all__ = ["OpenAICompatibleTransport"]

# Below the idle timeout of the servers judges usually sit behind (uvicorn, as vLLM runs it, closes after
# 5 s): closing first avoids most sends on a connection the server is closing at that moment.
_KEEPALIVE_S = 4.0
_DNS_TTL_S = 60


class OpenAICompatibleTransport:
    def __init__(self, model: JudgeModel, *, connection_limit: int = 512) -> None:
        base = model.resolved_api_base()
        if base is None:
            raise ValueError(f"judge {model.model!r}: the HTTP transport needs an api_base")
        self._url = URL(f"{base}/chat/completions")
        if self._url.scheme not in ("http", "https") or not self._url.host:
            raise ValueError(f"judge {model.model!r}: api_base {base!r} is not an http(s) URL")
        self._model = model
        self._api_key = model.resolved_api_key()
        self._headers = {"Content-Type": "application/json"}
        if self._api_key:
            self._headers["Authorization"] = f"Bearer {self._api_key}"
        self._limit = connection_limit
        self._tls: ssl.SSLContext | None = None
        if self._url.scheme == "https" or model.ca_bundle is not None:
            try:
                self._tls = tls_context(model.ca_bundle)
            except ValueError as exc:
                raise ValueError(f"judge {model.model!r}: {exc}") from exc
        self._proxy, self._proxy_auth = env_proxy(self._url)
        self._session: aiohttp.ClientSession | None = None
        # Reused while the timeout asked for stays the same, which is the usual case (the model's timeout_s).
        self._timeout = aiohttp.ClientTimeout(total=model.timeout_s)
        # The parts of the body that never change, serialised once.
        self._fixed: dict[str, Any] = {}
        if model.temperature is not None:
            self._fixed["temperature"] = model.temperature
        if model.max_tokens is not None:
            self._fixed["max_tokens"] = model.max_tokens

    @property
    def proxy(self) -> URL | None:
        """The proxy calls go through (from the environment when the transport was made), if any."""
        return self._proxy

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limit,
                ttl_dns_cache=_DNS_TTL_S,
                keepalive_timeout=_KEEPALIVE_S,
                ssl=self._tls if self._tls is not None else True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                # Judges set no cookies worth keeping; the proxy was resolved once in __init__.
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return self._session

    def _body(self, request: ChatRequest) -> bytes:
        body: dict[str, Any] = {"model": self._model.model_name, "messages": list(request.messages)}
        if request.response_format is not None:
            body["response_format"] = request.response_format
        if self._fixed:
            body.update(self._fixed)
        return pydantic_core.to_json(body)  # compact UTF-8 JSON, encoded in Rust

    async def complete(self, request: ChatRequest) -> ChatResponse:
        timeout = self._timeout
        if timeout.total != request.timeout_s:
            timeout = aiohttp.ClientTimeout(total=request.timeout_s)
        try:
            async with self._client().post(
                self._url,
                data=self._body(request),
                timeout=timeout,
                proxy=self._proxy,
                proxy_auth=self._proxy_auth,
                allow_redirects=False,
            ) as response:
                payload = await response.read()
                status = response.status
                headers = response.headers
        except TimeoutError as exc:
            # Before ClientError: aiohttp's socket timeouts are both.
            raise Timeout(f"judge call timed out after {request.timeout_s:g}s", code="408") from exc
        except aiohttp.ClientError as exc:
            detail = _connection_failure(exc)
            raise APIConnectionError(redact(f"connection to the judge failed: {detail}", self._api_key)) from exc
        if status != 200:
            raise self._error(status, payload, headers)
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

    def _error(self, status: int, payload: bytes, headers: CIMultiDictProxy[str]) -> Exception:
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


def _connection_failure(exc: aiohttp.ClientError) -> str:
    """The root cause in a line an operator can act on: ``cannot connect to 127.0.0.1:9: Connection refused``
    (aiohttp's own text says ``Connect call failed ('127.0.0.1', 9)`` and hides the errno's meaning)."""
    tls = isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError)
    if isinstance(exc, aiohttp.ClientConnectorError) and not tls and not isinstance(exc.os_error, ssl.SSLError):
        os_error = exc.os_error
        if os_error.errno is not None and os_error.errno > 0:
            cause = os.strerror(os_error.errno)  # ECONNREFUSED: "Connection refused"
        else:
            cause = os_error.strerror or str(os_error) or type(os_error).__name__  # DNS: "Name or service not known"
        via = "the proxy " if isinstance(exc, aiohttp.ClientProxyConnectionError) else ""
        return f"cannot connect to {via}{exc.host}:{exc.port}: {cause}"
    return str(exc) or type(exc).__name__  # TLS failures keep aiohttp's text: CERTIFICATE_VERIFY_FAILED and why
