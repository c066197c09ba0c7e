"""A forward HTTP proxy on loopback that really relays bytes, and records what went through it.

It serves ``CONNECT host:port`` (a tunnel, as clients use for ``https://`` URLs) and absolute-URI requests
(``POST http://host:port/path``, as clients send plain-HTTP requests to a proxy). Either way, once the
upstream connection is open the proxy relays bytes both ways until one side closes: later requests on a
plain-HTTP connection go to the same upstream as they are (servers must accept the absolute form).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest_asyncio

__all__ = ["ForwardProxy", "ProxiedRequest", "forward_proxy"]


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    target: str  # host:port for CONNECT, the absolute URI otherwise
    headers: dict[str, str]  # names lower-cased


@dataclass
class ForwardProxy:
    requests: list[ProxiedRequest] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def start(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    @property
    def connects(self) -> list[str]:
        return [r.target for r in self.requests if r.method == "CONNECT"]

    @property
    def forwarded(self) -> list[str]:
        return [r.target for r in self.requests if r.method != "CONNECT"]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in self._writers:
                writer.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        request_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.requests.append(ProxiedRequest(method, target, headers))
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            first = b""
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                await self._refuse(writer, b"400 Bad Request")
                return
            host, port = url.hostname, str(url.port or 80)
            origin_form = (url.path or "/") + (f"?{url.query}" if url.query else "")
            first = f"{method} {origin_form} {version}\r\n".encode("latin-1") + head.split(b"\r\n", 1)[1]
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except (OSError, ValueError):
            await self._refuse(writer, b"502 Bad Gateway")
            return
        self._writers.append(upstream_writer)
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream_writer.write(first)
        await asyncio.gather(_relay(reader, upstream_writer), _relay(upstream_reader, writer))
        writer.close()
        upstream_writer.close()

    @staticmethod
    async def _refuse(writer: asyncio.StreamWriter, status: bytes) -> None:
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then pass the end on (or close if the other side cannot take a half-close)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


@pytest_asyncio.fixture
async def forward_proxy() -> AsyncIterator[ForwardProxy]:
    proxy = await ForwardProxy().start()
    yield proxy
    await proxy.stop()
