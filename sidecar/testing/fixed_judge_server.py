"""An OpenAI-compatible judge stand-in for load tests: every request gets the same reply after a fixed delay.

``JudgeServer`` (aiohttp, scripted replies) spends CPU on every request. On a machine the sidecar shares
with it, that is CPU taken from the sidecar under test, which a remote provider would not take. This
server answers from one pre-encoded response with a timer per request (no task, no JSON parsing of the
request), at a fraction of that CPU (docs/benchmarks.md), so a load test measures the client, not its
stand-in.

It speaks HTTP/1.1 with keep-alive and Content-Length bodies, which is what judge clients send; chunked
request bodies and ``Expect: 100-continue`` are answered 400 (no judge client sends them).

    python -m sidecar.testing.judge_server --fixed --port 0 --latency-ms 200 [--reply '{"score": 0.5}']
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from sidecar.testing.completions import chat_completion

__all__ = ["FixedJudgeServer", "chat_completion_body"]

_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024


def chat_completion_body(content: str, *, prompt_tokens: int = 10, completion_tokens: int = 5) -> bytes:
    """A chat.completion response body with ``content`` as the assistant's message and OpenAI-style usage."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return json.dumps(chat_completion(content, usage=usage, completion_id="chatcmpl-fixed")).encode()


def _response(status: str, body: bytes, *, close: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    return head.encode() + body


class _Connection(asyncio.Protocol):
    def __init__(self, server: FixedJudgeServer) -> None:
        self._server = server
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._transport is not None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEAD:
                    self._fail()
                return
            head = bytes(self._buffer[:end]).decode("latin-1").lower()
            length = _content_length(head)
            if length is None or length > _MAX_BODY or "transfer-encoding:" in head or "expect:" in head:
                self._fail()
                return
            if len(self._buffer) < end + 4 + length:
                return
            del self._buffer[: end + 4 + length]
            close = "connection: close" in head
            self._server.calls += 1
            self._server.reply_later(self._send, close)

    def _send(self, close: bool) -> None:
        if self._transport is None:
            return
        self._transport.write(self._server.response_close if close else self._server.response)
        if close:
            self._transport.close()

    def _fail(self) -> None:
        if self._transport is not None:
            self._transport.write(_response("400 Bad Request", b'{"error": {"message": "bad request"}}', close=True))
            self._transport.close()


def _content_length(head: str) -> int | None:
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip() == "content-length":
            value = value.strip()
            return int(value) if value.isdigit() else None
    return 0


class FixedJudgeServer:
    """Answers every POST with ``body`` after ``delay_s``; ``calls`` counts the requests."""

    def __init__(self, body: bytes | None = None, *, delay_s: float = 0.0) -> None:
        body = body if body is not None else chat_completion_body('{"score": 0.5}')
        self.response = _response("200 OK", body, close=False)
        self.response_close = _response("200 OK", body, close=True)
        self.delay_s = delay_s
        self.calls = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reply_later(self, send: Callable[[bool], None], close: bool) -> None:
        loop = asyncio.get_running_loop()
        if self.delay_s > 0:
            loop.call_later(self.delay_s, send, close)
        else:
            loop.call_soon(send, close)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> FixedJudgeServer:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FixedJudgeServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
