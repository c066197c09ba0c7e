"""Loopback HTTP servers that control every byte they send, to test an HTTP client's edge cases.

Each server is a raw asyncio socket server: a test's handler reads requests and writes whatever bytes it
likes (framing, compression, closes at awkward moments, slowness), optionally over TLS.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio

__all__ = [
    "Handler",
    "Peer",
    "RawServer",
    "Request",
    "StartServer",
    "chunked",
    "completion",
    "raw_servers",
    "response",
    "serve",
]


def completion(content: str = '{"score": 1.0}', **usage: Any) -> bytes:
    """An OpenAI chat.completion body."""
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    ).encode()


def response(body: bytes = b"", status: str = "200 OK", headers: tuple[str, ...] = (), *, length: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body: bytes, size: int = 7, *, extension: bool = False, trailers: bool = False) -> bytes:
    """``body`` in the chunked transfer coding, ``size`` bytes a chunk."""
    out = b""
    for start in range(0, len(body), size):
        piece = body[start : start + size]
        out += f"{len(piece):X}{';ext=1' if extension else ''}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n" + (b"X-Trailer: yes\r\n" if trailers else b"") + b"\r\n"


@dataclass
class Request:
    head: bytes
    body: bytes

    @property
    def lines(self) -> list[str]:
        return self.head.decode("latin-1").split("\r\n")

    def header(self, name: str) -> str | None:
        for line in self.lines[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


class Peer:
    """The server's side of one accepted connection."""

    def __init__(self, server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.index = len(server.peers)  # 0 for the first connection
        self.served = 0  # requests answered on this connection

    async def read_request(self) -> Request | None:
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        request = Request(head[:-4], b"")
        request.body = await self.reader.readexactly(int(request.header("Content-Length") or 0))
        self.server.requests.append(request)
        return request

    async def send(self, data: bytes, *, pieces: int = 1, pause_s: float = 0.0) -> None:
        step = max(1, -(-len(data) // pieces))
        for start in range(0, len(data), step):
            self.writer.write(data[start : start + step])
            await self.writer.drain()
            if pause_s:
                await asyncio.sleep(pause_s)

    def close(self) -> None:
        self.writer.close()


Handler = Callable[[Peer], Awaitable[None]]


@dataclass
class RawServer:
    handler: Handler
    tls: ssl.SSLContext | None = None
    peers: list[Peer] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> RawServer:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=self.tls)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/v1"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(self, reader, writer)
        self.peers.append(peer)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await self.handler(peer)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            self.active -= 1
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for peer in self.peers:
                peer.writer.close()
            await self.server.wait_closed()


def serve(*replies: bytes, close_after: bool = False) -> Handler:
    """Answer requests in order with ``replies`` (the last one repeats), across connections."""
    queue = list(replies)

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            reply = queue.pop(0) if len(queue) > 1 else queue[0]
            await peer.send(reply)
            peer.served += 1
            if close_after:
                peer.close()
                return

    return handler


StartServer = Callable[..., Awaitable[RawServer]]


@pytest_asyncio.fixture
async def raw_servers() -> AsyncIterator[StartServer]:
    """Start raw servers with ``await raw_servers(handler, tls=None)``; all stop after the test."""
    servers: list[RawServer] = []

    async def start_server(handler: Handler, tls: ssl.SSLContext | None = None) -> RawServer:
        server = await RawServer(handler, tls).start()
        servers.append(server)
        return server

    yield start_server
    for server in servers:
        await server.stop()
