"""A lean HTTP/1.1 client for POSTing JSON to one URL: asyncio's Protocol API and a keep-alive pool.

Why not aiohttp: at hundreds of judge calls per second the HTTP client's CPU bounds the throughput, and
aiohttp spends ~0.4 ms of CPU per call on things a judge call never needs (per-request header
multidicts, cookie jars, tracing hooks, stream readers, a task per timeout). Here a request is one
``bytes`` concatenation of a header block built once, one ``transport.write``, and a response parsed
with ``bytes.find`` when its bytes arrive (usually in one ``data_received``).

What it speaks (enough for OpenAI-compatible providers, their gateways and proxies):

* ``http`` and ``https`` (TLS through ``ssl.create_default_context()``, SNI and certificate checks against
  the URL's host, ALPN ``http/1.1``); an ``ssl_context`` may be passed instead (tests trust a local CA);
* responses framed by ``Content-Length``, ``Transfer-Encoding: chunked`` (OpenAI and Cloudflare send
  chunked) or the end of the connection; ``1xx`` interim responses are skipped; header names are
  case-insensitive (kept lower-cased); ``Content-Encoding: gzip``/``deflate`` is decoded (we advertise
  both, as aiohttp did);
* keep-alive: a connection goes back to the pool after a complete response unless the server said
  ``Connection: close`` (or spoke HTTP/1.0 without keep-alive), the framing was the end of the stream,
  or anything about the exchange was irregular. Idle connections are reused last-in first-out and are
  dropped when the server closes them or after ``keepalive_s`` of idleness;
* at most ``limit`` connections (idle, busy or connecting) at once; further requests queue in order;
* one overall ``timeout_s`` per request (waiting for a connection, connecting, sending, receiving):
  ``TimeoutError``. Anything else that goes wrong with the connection or the response's framing:
  ``HTTPConnectionError``. A timed-out, cancelled or failed request's connection is closed, never reused.

Stale connections. A server may close an idle keep-alive connection just as we pick it up (its FIN is
still in flight): the request then fails without a single byte of response. Such a request is sent
again, once, on a *new* connection — only when the connection had been reused and not one byte of the
response had arrived. RFC 9112 §9.3.1 lets a client retry a non-idempotent request when it knows the
request's semantics are idempotent: a chat completion changes nothing on the server (at worst a second
call is billed), and the judge client would retry that same ``APIConnectionError`` anyway, only later
and with a failed call on the record. Browsers apply the same rule to POSTs on reused connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

__all__ = ["HTTPConnectionError", "HTTPResponse", "LeanHTTPClient"]

USER_AGENT: Final = "scoring-sidecar/0.1"
MAX_HEAD: Final = 64 * 1024
MAX_BODY: Final = 64 * 1024 * 1024

# Parser states.
_IDLE: Final = 0
_HEAD: Final = 1
_LENGTH: Final = 2
_CHUNK_SIZE: Final = 3
_CHUNK_DATA: Final = 4
_TRAILER: Final = 5
_UNTIL_EOF: Final = 6

_HEX_DIGITS: Final = b"0123456789abcdefABCDEF"


class HTTPConnectionError(ConnectionError):
    """Connecting failed, the connection broke, or the response was malformed or cut short."""


class _StaleConnection(HTTPConnectionError):
    """A reused connection ended before any byte of the response: the request may be sent again."""


class HTTPResponse:
    """A complete response: status, headers (names lower-cased, repeats joined by ``, ``), decoded body."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"HTTPResponse({self.status} {self.reason!r}, {len(self.body)} bytes)"


def _decode_body(body: bytes, encoding: str) -> bytes:
    """Undo ``Content-Encoding`` (codings applied in order, so undone in reverse); size-bounded."""
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            body = _inflate(body, 16 + zlib.MAX_WBITS, members=True)
        elif coding == "deflate":
            # "deflate" means zlib-wrapped; some servers send a raw deflate stream all the same.
            try:
                body = _inflate(body, zlib.MAX_WBITS)
            except HTTPConnectionError:
                body = _inflate(body, -zlib.MAX_WBITS)
        else:
            raise HTTPConnectionError(f"unsupported Content-Encoding {coding!r}")
    return body


def _inflate(data: bytes, wbits: int, *, members: bool = False) -> bytes:
    out: list[bytes] = []
    size = 0
    while True:
        decompressor = zlib.decompressobj(wbits)
        try:
            part = decompressor.decompress(data, MAX_BODY - size + 1)
        except zlib.error as exc:
            raise HTTPConnectionError(f"response body does not decode: {exc}") from exc
        size += len(part)
        out.append(part)
        if size > MAX_BODY:
            raise HTTPConnectionError("decoded response body too large")
        if not decompressor.eof:
            raise HTTPConnectionError("compressed response body is truncated")
        data = decompressor.unused_data
        if not (members and data):
            return b"".join(out)


def _closed_by_server(detail: Exception | None) -> str:
    return f"the server closed the connection ({detail})" if detail else "the server closed the connection"


class _Connection(asyncio.Protocol):
    """One keep-alive connection: sends one request at a time and parses its response."""

    __slots__ = (
        "body_size",
        "buf",
        "chunks",
        "closed",
        "counted",
        "eof",
        "got_bytes",
        "headers",
        "idle_since",
        "keep_alive",
        "pool",
        "reason",
        "remaining",
        "reused",
        "state",
        "status",
        "transport",
        "waiter",
    )

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[HTTPResponse] | None = None
        self.buf = bytearray()
        self.state = _IDLE
        self.remaining = 0
        self.body_size = 0
        self.chunks: list[bytes] = []
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.got_bytes = False
        self.eof = False
        self.reused = False
        self.counted = True  # holds one of the pool's slots until forgotten
        self.idle_since = 0.0
        self.closed: asyncio.Future[None] = pool.loop.create_future()

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            # Bytes nobody asked for (an idle connection, or after a timeout): the framing is lost.
            self.abort()
            return
        self.got_bytes = True
        self.buf += data
        try:
            self._parse()
        except HTTPConnectionError as exc:
            self._fail(exc)
        except (ValueError, UnicodeError) as exc:
            self._fail(HTTPConnectionError(f"malformed HTTP response: {exc}"))

    def eof_received(self) -> bool | None:
        self.eof = True
        return None  # let the transport close; connection_lost settles a pending response

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.pool.forget(self)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if self.state == _UNTIL_EOF and exc is None:
                self.keep_alive = False
                try:
                    self._finish()
                except HTTPConnectionError as error:
                    self._fail(error)
            elif self.reused and not self.got_bytes:
                self._fail(_StaleConnection(_closed_by_server(exc) + " before any response"))
            elif not self.got_bytes:
                self._fail(HTTPConnectionError(_closed_by_server(exc) + " without a response"))
            else:
                self._fail(HTTPConnectionError(_closed_by_server(exc) + " before the response was complete"))
        if not self.closed.done():
            self.closed.set_result(None)

    # -- used by the pool --------------------------------------------------------------------------

    def usable(self) -> bool:
        transport = self.transport
        return transport is not None and not self.eof and not transport.is_closing()

    async def send(self, data: bytes, deadline: float) -> HTTPResponse:
        transport = self.transport
        assert transport is not None
        loop = self.pool.loop
        waiter: asyncio.Future[HTTPResponse] = loop.create_future()
        self.waiter = waiter
        self.state = _HEAD
        self.got_bytes = False
        self.keep_alive = True
        self.body_size = 0
        self.chunks = []
        transport.write(data)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self.waiter = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.pool.forget(self)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.pool.forget(self)

    # -- the response parser -----------------------------------------------------------------------

    def _fail(self, exc: HTTPConnectionError) -> None:
        self.state = _IDLE
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.abort()

    def _parse(self) -> None:
        buf = self.buf
        while True:
            state = self.state
            if state == _HEAD:
                while buf[:2] == b"\r\n":
                    del buf[:2]  # stray blank lines before a status line (RFC 9112 §2.2 tolerance)
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        raise HTTPConnectionError("response headers too large")
                    return
                head = bytes(buf[:end])
                del buf[: end + 4]
                self._head(head)
            elif state == _LENGTH:
                size = self.remaining
                if len(buf) < size:
                    return
                self.chunks.append(bytes(buf[:size]))
                del buf[:size]
                self._finish()
                return
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 4096:
                        raise HTTPConnectionError("chunk size line too long")
                    return
                text = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                if not text or text.strip(_HEX_DIGITS):
                    raise HTTPConnectionError(f"bad chunk size {text[:20]!r}")
                size = int(text, 16)
                if size == 0:
                    self.state = _TRAILER
                else:
                    self.body_size += size
                    if self.body_size > MAX_BODY:
                        raise HTTPConnectionError("response body too large")
                    self.remaining = size
                    self.state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                size = self.remaining
                if len(buf) < size + 2:
                    return
                if buf[size : size + 2] != b"\r\n":
                    raise HTTPConnectionError("chunk not terminated by CRLF")
                self.chunks.append(bytes(buf[:size]))
                del buf[: size + 2]
                self.state = _CHUNK_SIZE
            elif state == _TRAILER:
                if len(buf) < 2:
                    return
                if buf[:2] == b"\r\n":
                    del buf[:2]
                else:
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        if len(buf) > MAX_HEAD:
                            raise HTTPConnectionError("response trailers too large")
                        return
                    del buf[: end + 4]
                self._finish()
                return
            elif state == _UNTIL_EOF:
                if buf:
                    self.body_size += len(buf)
                    if self.body_size > MAX_BODY:
                        raise HTTPConnectionError("response body too large")
                    self.chunks.append(bytes(buf))
                    buf.clear()
                return
            else:
                raise HTTPConnectionError("response bytes in an unexpected state")

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
            raise HTTPConnectionError(f"malformed HTTP status line {lines[0][:80]!r}")
        status = int(parts[1])
        if status < 200:
            if status == 101:
                raise HTTPConnectionError("unexpected 101 Switching Protocols")
            return  # 100 Continue, 103 Early Hints…: an interim response, the real one follows
        headers: dict[str, str] = {}
        key = ""
        for line in lines[1:]:
            if line[0] in " \t":
                if not key:
                    raise HTTPConnectionError(f"malformed response header line {line[:80]!r}")
                headers[key] += " " + line.strip()  # obsolete line folding
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name[-1] in " \t":
                raise HTTPConnectionError(f"malformed response header line {line[:80]!r}")
            key = name.lower()
            if key in headers:
                headers[key] = f"{headers[key]}, {value.strip()}"
            else:
                headers[key] = value.strip()
        self.status = status
        self.reason = parts[2] if len(parts) > 2 else ""
        self.headers = headers
        connection = headers.get("connection", "").lower()
        if parts[0] == "HTTP/1.0":
            self.keep_alive = "keep-alive" in connection
        else:
            self.keep_alive = "close" not in connection
        transfer_encoding = headers.get("transfer-encoding")
        if status in (204, 304):
            self.remaining = 0
            self.state = _LENGTH
        elif transfer_encoding is not None:
            if "content-length" in headers:
                self.keep_alive = False  # both framings at once: answer this one, trust nothing after
            if transfer_encoding.rsplit(",", 1)[-1].strip().lower() == "chunked":
                self.state = _CHUNK_SIZE
            else:
                self.keep_alive = False
                self.state = _UNTIL_EOF
        elif "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            length = values.pop()
            if values or not (length.isascii() and length.isdigit()):
                raise HTTPConnectionError(f"bad Content-Length {headers['content-length'][:40]!r}")
            size = int(length)
            if size > MAX_BODY:
                raise HTTPConnectionError("response body too large")
            self.remaining = size
            self.state = _LENGTH
        else:
            self.keep_alive = False
            self.state = _UNTIL_EOF

    def _finish(self) -> None:
        chunks = self.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.chunks = []
        self.state = _IDLE
        transport = self.transport
        if self.buf or (transport is not None and transport.get_write_buffer_size()):
            # Bytes beyond the response, or a request the server answered before reading it all.
            self.keep_alive = False
            self.buf.clear()
        encoding = self.headers.get("content-encoding")
        if encoding is not None:
            body = _decode_body(body, encoding)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(HTTPResponse(self.status, self.reason, self.headers, body))


def _expire(waiter: asyncio.Future[HTTPResponse]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Pool:
    """The connections to one origin on one event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        limit: int,
        keepalive_s: float,
    ) -> None:
        self.loop = loop
        self.host = host
        self.port = port
        self.ssl = ssl_context
        self.limit = limit
        self.keepalive_s = keepalive_s
        self.open = 0  # connections holding a slot: connecting, busy or idle
        self.idle: dict[_Connection, None] = {}  # insertion-ordered: the last one is the warmest
        self.connections: set[_Connection] = set()
        # Requests waiting for a connection, in order: handed an idle connection, or None for a free slot.
        self.waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self.closed = False

    def take_idle(self) -> _Connection | None:
        idle = self.idle
        now = -1.0
        while idle:
            conn, _ = idle.popitem()
            if now < 0:
                now = self.loop.time()
            if conn.usable() and now - conn.idle_since <= self.keepalive_s:
                conn.reused = True
                return conn
            conn.close()
        return None

    async def acquire(self, deadline: float, *, fresh: bool = False) -> _Connection:
        while True:
            if not fresh:
                conn = self.take_idle()
                if conn is not None:
                    return conn
            elif self.open >= self.limit and self.idle:
                next(iter(self.idle)).close()  # make room for the new connection: drop the coldest idle one
            if self.open < self.limit:
                return await self._connect(deadline)
            waiter: asyncio.Future[_Connection | None] = self.loop.create_future()
            self.waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    handed = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    # Woken, but leaving: pass the connection (or the free slot) on to the next in line.
                    handed = waiter.result()
                    if handed is not None:
                        self.release(handed)
                    else:
                        self.wake_one()
                else:
                    waiter.cancel()
                raise
            if handed is not None:
                if not fresh and handed.usable():
                    handed.reused = True
                    return handed
                handed.close()

    async def _connect(self, deadline: float) -> _Connection:
        self.open += 1
        made: list[_Connection] = []

        def factory() -> _Connection:
            conn = _Connection(self)
            made.append(conn)
            return conn

        try:
            async with asyncio.timeout_at(deadline):
                await self.loop.create_connection(
                    factory,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None,
                )
        except BaseException as exc:
            if made:
                made[0].abort()
            else:
                self.open -= 1
                self.wake_one()
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
                raise HTTPConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
            raise
        conn = made[0]
        self.connections.add(conn)
        return conn

    def release(self, conn: _Connection) -> None:
        if not conn.keep_alive or self.closed or not conn.usable() or not conn.counted:
            conn.close()
            return
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)  # straight to the first in line: newcomers cannot overtake it
                return
        conn.idle_since = self.loop.time()
        self.idle[conn] = None

    def forget(self, conn: _Connection) -> None:
        """The connection is gone (or going): free its slot. Idempotent."""
        if conn.counted:
            conn.counted = False
            self.open -= 1
            self.idle.pop(conn, None)
            self.connections.discard(conn)
            if self.waiters:
                self.wake_one()

    def wake_one(self) -> None:
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        self.closed = True
        closing = [conn.closed for conn in list(self.connections)]
        for conn in list(self.connections):
            if conn.waiter is not None:
                conn.reused = False  # no stale-connection retry for a request we cut off ourselves
                conn.abort()
            else:
                conn.close()
        if closing:
            await asyncio.wait(closing, timeout=2.0)


class LeanHTTPClient:
    """POSTs to one URL over a pool of keep-alive connections (one pool per event loop it runs on)."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        limit: int = 512,
        keepalive_s: float = 15.0,
        ssl_context: ssl.SSLContext | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        if limit < 1:
            raise ValueError("the connection limit must be at least 1")
        self.host = parts.hostname
        self.port = parts.port or (443 if scheme == "https" else 80)
        self.tls = scheme == "https"
        if self.tls and ssl_context is None:
            ssl_context = ssl.create_default_context()
            ssl_context.set_alpn_protocols(["http/1.1"])
        self._ssl = ssl_context if self.tls else None
        self._limit = limit
        self._keepalive_s = keepalive_s
        host = f"[{self.host}]" if ":" in self.host else self.host
        if parts.port is not None and parts.port != (443 if self.tls else 80):
            host = f"{host}:{self.port}"
        path = parts.path or "/"
        if parts.query:
            path = f"{path}?{parts.query}"
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"User-Agent: {user_agent}"]
        fixed = {"accept-encoding", "connection", "content-length", "host", "transfer-encoding", "user-agent"}
        for name, value in (headers or {}).items():
            if name.lower() in fixed:
                raise ValueError(f"header {name!r} is set by the client itself")
            lines.append(f"{name}: {value}")
        lines += ["Accept-Encoding: gzip, deflate", "Connection: keep-alive", "Content-Length: "]
        if any(c in line for line in lines for c in "\r\n\x00"):
            raise ValueError("a header name or value contains a line break or NUL")
        head = "\r\n".join(lines)
        self._head = head.encode("latin-1")
        self._pool: _Pool | None = None

    def _pool_for(self, loop: asyncio.AbstractEventLoop) -> _Pool:
        # Connections belong to the loop that made them; a client used on a new loop starts afresh.
        if self._pool is not None:
            for conn in list(self._pool.connections):
                with contextlib.suppress(RuntimeError):  # that loop may be closed already
                    conn.abort()
        pool = _Pool(loop, self.host, self.port, self._ssl, self._limit, self._keepalive_s)
        self._pool = pool
        return pool

    async def post(self, body: bytes, timeout_s: float) -> HTTPResponse:
        """POST ``body`` (already encoded); ``timeout_s`` bounds the whole exchange."""
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is None or pool.loop is not loop:
            pool = self._pool_for(loop)
        deadline = loop.time() + timeout_s
        data = b"%s%d\r\n\r\n%s" % (self._head, len(body), body)
        conn = pool.take_idle() or await pool.acquire(deadline)
        try:
            response = await conn.send(data, deadline)
        except _StaleConnection:
            conn.abort()
            conn = await pool.acquire(deadline, fresh=True)
            try:
                response = await conn.send(data, deadline)
            except BaseException:
                conn.abort()
                raise
        except BaseException:
            conn.abort()
            raise
        pool.release(conn)
        return response

    async def aclose(self) -> None:
        """Close every connection (a request in flight fails); the client may be used again after."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
