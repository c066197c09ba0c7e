"""The lean HTTP/1.1 client (``sidecar.scoring.judge.lean_http``) against purpose-built loopback servers.

Each server here is a raw asyncio socket server, so a test controls every byte of the response: framing
(Content-Length, chunked, end of stream), compression, interim responses, closes at awkward moments,
slowness and TLS. Most scenarios go through ``OpenAICompatibleTransport`` to check how each failure is
reported to the judge client; a few also run through the aiohttp fallback for parity.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import subprocess
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pydantic import SecretStr

from sidecar.scoring.judge.errors import APIConnectionError, RateLimitError, ServiceUnavailableError, Timeout
from sidecar.scoring.judge.http_transport import OpenAICompatibleTransport
from sidecar.scoring.judge.lean_http import HTTPConnectionError, LeanHTTPClient
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest

KEY = "sk-lean-0123456789abcdef0123456789abcdef"
REQUEST = ChatRequest(messages=({"role": "user", "content": "score this"},), timeout_s=2.0)


def completion(content: str = '{"score": 1.0}', **usage: Any) -> bytes:
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
    closed: int = 0  # connections the client ended (EOF seen by the server)
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
        except (ConnectionError, ssl.SSLError):
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


@pytest_asyncio.fixture
async def start() -> AsyncIterator[Callable[..., Awaitable[RawServer]]]:
    servers: list[RawServer] = []

    async def start_server(handler: Handler, tls: ssl.SSLContext | None = None) -> RawServer:
        server = await RawServer(handler, tls).start()
        servers.append(server)
        return server

    yield start_server
    for server in servers:
        await server.stop()


@pytest_asyncio.fixture
async def transports() -> AsyncIterator[Callable[..., OpenAICompatibleTransport]]:
    made: list[OpenAICompatibleTransport] = []

    def make(url: str, *, http_client: str = "lean", **kwargs: Any) -> OpenAICompatibleTransport:
        model = JudgeModel(
            model="openai/gpt-4o-mini", api_base=url, api_key=SecretStr(KEY), transport="http", http_client=http_client
        )
        transport = OpenAICompatibleTransport(model, **kwargs)
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.aclose()


Start = Callable[..., Awaitable[RawServer]]
Make = Callable[..., OpenAICompatibleTransport]


# -- the request -----------------------------------------------------------------------------------------


async def test_request_bytes(start: Start, transports: Make) -> None:
    server = await start(serve(response(completion())))
    reply = await transports(server.url).complete(REQUEST)
    assert reply.text == '{"score": 1.0}'
    assert reply.usage is not None and reply.usage.total_tokens == 15
    sent = server.requests[0]
    assert sent.lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert sent.header("Host") == f"127.0.0.1:{server.port}"
    assert sent.header("Content-Type") == "application/json"
    assert sent.header("Authorization") == f"Bearer {KEY}"
    assert sent.header("Content-Length") == str(len(sent.body))
    assert sent.header("Connection") == "keep-alive"
    assert sent.header("Accept-Encoding") == "gzip, deflate"
    assert (sent.header("User-Agent") or "").startswith("scoring-sidecar/")
    assert json.loads(sent.body) == {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "score this"}]}


def test_header_values_with_line_breaks_are_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        LeanHTTPClient("http://127.0.0.1:1/v1", {"Authorization": "Bearer sk-x\r\nX-Evil: 1"})
    with pytest.raises(ValueError, match="not an http"):
        LeanHTTPClient("ftp://127.0.0.1/v1")


# -- framing ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("http_client", ["lean", "aiohttp"])
async def test_chunked_response(start: Start, transports: Make, http_client: str) -> None:
    body = completion("chunked works")
    framed = response(
        chunked(body, extension=True, trailers=True), headers=("Transfer-Encoding: chunked",), length=False
    )
    server = await start(serve(framed))
    transport = transports(server.url, http_client=http_client)
    assert (await transport.complete(REQUEST)).text == "chunked works"
    assert (await transport.complete(REQUEST)).text == "chunked works"  # and the connection is reusable
    assert len(server.peers) == 1


async def test_response_arriving_byte_by_byte(start: Start, transports: Make) -> None:
    body = completion("slowly")
    framed = response(chunked(body, size=5), headers=("Transfer-Encoding: chunked",), length=False)

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            plain = peer.served % 2 == 1
            await peer.send(response(body) if plain else framed, pieces=len(framed), pause_s=0)
            peer.served += 1

    server = await start(handler)
    transport = transports(server.url)
    for _ in range(4):
        assert (await transport.complete(REQUEST)).text == "slowly"
    assert len(server.peers) == 1


async def test_body_until_end_of_stream(start: Start, transports: Make) -> None:
    raw = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + completion("until eof")
    server = await start(serve(raw, close_after=True))
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "until eof"
    assert (await transport.complete(REQUEST)).text == "until eof"
    assert len(server.peers) == 2  # no length, no reuse


@pytest.mark.parametrize(
    ("coding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send it
    ],
)
async def test_compressed_bodies(
    start: Start, transports: Make, coding: str, compress: Callable[[bytes], bytes]
) -> None:
    encoded = compress(completion("compressed"))
    server = await start(
        serve(
            response(encoded, headers=(f"Content-Encoding: {coding}",)),
            response(
                chunked(encoded), headers=(f"content-encoding: {coding}", "Transfer-Encoding: chunked"), length=False
            ),
        )
    )
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "compressed"
    assert (await transport.complete(REQUEST)).text == "compressed"


async def test_corrupt_gzip_is_a_connection_error(start: Start, transports: Make) -> None:
    server = await start(serve(response(b"\x1f\x8bnot really gzip", headers=("Content-Encoding: gzip",))))
    with pytest.raises(APIConnectionError, match="decode"):
        await transports(server.url).complete(REQUEST)


async def test_interim_responses_are_skipped(start: Start, transports: Make) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    server = await start(serve(interim + response(completion("after interim"))))
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "after interim"
    assert (await transport.complete(REQUEST)).text == "after interim"


async def test_header_names_are_case_insensitive(start: Start, transports: Make) -> None:
    body = completion("shouting")
    error = json.dumps({"error": {"message": "slow down", "code": "rate_limit_exceeded"}}).encode()
    server = await start(
        serve(
            b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: %d\r\nconnection: KEEP-ALIVE\r\n\r\n%s" % (len(body), body),
            b"HTTP/1.1 200 OK\r\ntransfer-ENCODING: Chunked\r\n\r\n" + chunked(body),
            b"HTTP/1.1 429 Too Many Requests\r\nretry-AFTER: 7\r\nContent-length: %d\r\n\r\n%s" % (len(error), error),
        )
    )
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "shouting"
    assert (await transport.complete(REQUEST)).text == "shouting"
    with pytest.raises(RateLimitError) as caught:
        await transport.complete(REQUEST)
    assert caught.value.retry_after_s == 7.0
    assert caught.value.code == "rate_limit_exceeded"
    assert len(server.peers) == 1


async def test_error_status_on_a_chunked_body(start: Start, transports: Make) -> None:
    error = json.dumps({"error": {"message": f"overloaded, key {KEY}"}}).encode()
    framed = response(chunked(error), "503 Service Unavailable", ("Transfer-Encoding: chunked", "Retry-After-Ms: 1500"))
    server = await start(serve(framed.replace(b"Content-Length: 0\r\n", b"")))
    with pytest.raises(ServiceUnavailableError) as caught:
        await transports(server.url).complete(REQUEST)
    assert caught.value.retry_after_s == 1.5
    assert KEY not in caught.value.message


@pytest.mark.parametrize(
    "raw",
    [
        response(completion())[:-20],  # Content-Length promises more than arrives
        response(chunked(completion()), headers=("Transfer-Encoding: chunked",), length=False)[:-30],
        b"HTTP/1.1 200 OK\r\nContent-Le",  # cut inside the headers
        b"",  # closed without a byte
    ],
    ids=["content-length", "chunked", "headers", "nothing"],
)
async def test_truncated_response_is_a_connection_error(start: Start, transports: Make, raw: bytes) -> None:
    server = await start(serve(raw, close_after=True))
    with pytest.raises(APIConnectionError, match="closed the connection"):
        await transports(server.url).complete(REQUEST)
    assert len(server.requests) == 1  # a fresh connection: never sent twice


@pytest.mark.parametrize(
    "raw",
    [
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    ],
)
async def test_malformed_response_is_a_connection_error(start: Start, transports: Make, raw: bytes) -> None:
    server = await start(serve(raw))
    with pytest.raises(APIConnectionError):
        await transports(server.url).complete(REQUEST)


# -- connections ------------------------------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection(start: Start, transports: Make) -> None:
    server = await start(serve(response(completion())))
    transport = transports(server.url)
    for _ in range(5):
        await transport.complete(REQUEST)
    assert len(server.peers) == 1 and len(server.requests) == 5


async def test_connection_close_is_honoured(start: Start, transports: Make) -> None:
    # The server says close but keeps the socket open: the client must not reuse it anyway.
    server = await start(serve(response(completion(), headers=("Connection: close",))))
    transport = transports(server.url)
    for _ in range(3):
        await transport.complete(REQUEST)
    assert len(server.peers) == 3


async def test_idle_connection_closed_by_the_server(start: Start, transports: Make) -> None:
    server = await start(serve(response(completion()), close_after=True))  # closes right after answering
    transport = transports(server.url)
    await transport.complete(REQUEST)
    await asyncio.sleep(0.05)  # the FIN arrives while the connection is idle
    assert (await transport.complete(REQUEST)).text == '{"score": 1.0}'
    assert len(server.peers) == 2 and len(server.requests) == 2


async def test_stale_reused_connection_is_retried_once_on_a_new_one(start: Start, transports: Make) -> None:
    # The second request on a connection meets a close without a byte of response (the keep-alive race):
    # sent again on a fresh connection, where it succeeds.
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            if peer.served == 1:
                peer.writer.transport.abort()
                return
            await peer.send(response(completion()))
            peer.served += 1

    server = await start(handler)
    transport = transports(server.url)
    await transport.complete(REQUEST)
    assert (await transport.complete(REQUEST)).text == '{"score": 1.0}'
    assert len(server.peers) == 2 and len(server.requests) == 3


async def test_no_retry_once_response_bytes_arrived(start: Start, transports: Make) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            if peer.served == 1:
                await peer.send(b"HTTP/1.1 200 OK\r\n")
                peer.writer.transport.abort()
                return
            await peer.send(response(completion()))
            peer.served += 1

    server = await start(handler)
    transport = transports(server.url)
    await transport.complete(REQUEST)
    with pytest.raises(APIConnectionError, match="before the response was complete"):
        await transport.complete(REQUEST)
    assert len(server.requests) == 2


async def test_connection_refused(transports: Make) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(APIConnectionError, match="cannot connect"):
        await transports(f"http://127.0.0.1:{port}/v1").complete(REQUEST)


@pytest.mark.parametrize("http_client", ["lean", "aiohttp"])
async def test_slow_server_times_out_within_timeout_s(start: Start, transports: Make, http_client: str) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{")  # then nothing
            await asyncio.sleep(10)

    server = await start(handler)
    transport = transports(server.url, http_client=http_client)
    started = time.monotonic()
    with pytest.raises(Timeout):
        await transport.complete(ChatRequest(messages=REQUEST.messages, timeout_s=0.3))
    assert 0.25 <= time.monotonic() - started < 1.0


async def test_pool_limit_is_respected(start: Start, transports: Make) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await asyncio.sleep(0.03)
            await peer.send(response(completion()))

    server = await start(handler)
    transport = transports(server.url, connection_limit=3)
    replies = await asyncio.gather(*(transport.complete(REQUEST) for _ in range(20)))
    assert all(r.text == '{"score": 1.0}' for r in replies)
    assert server.max_active <= 3 and len(server.peers) == 3
    assert len(server.requests) == 20


async def test_waiting_for_a_connection_counts_against_the_timeout(start: Start) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await asyncio.sleep(0.5)
            await peer.send(response(completion()))

    server = await start(handler)
    client = LeanHTTPClient(server.url + "/chat/completions", limit=1)
    try:
        first = asyncio.ensure_future(client.post(b"{}", 2.0))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.post(b"{}", 0.1)
        assert time.monotonic() - started < 0.4
        assert (await first).status == 200
        assert (await client.post(b"{}", 2.0)).status == 200  # the slot came back
        assert len(server.peers) == 1
    finally:
        await client.aclose()


async def test_cancelled_request_does_not_leave_its_connection_in_the_pool(start: Start) -> None:
    gate = asyncio.Event()

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            if not gate.is_set():
                await gate.wait()
            await peer.send(response(completion()))

    server = await start(handler)
    client = LeanHTTPClient(server.url + "/chat/completions", limit=1)
    try:
        pending = asyncio.ensure_future(client.post(b"{}", 5.0))
        await asyncio.sleep(0.05)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        gate.set()
        reply = await client.post(b"{}", 2.0)  # the first answer must not be taken for this one
        assert reply.status == 200
        assert len(server.peers) == 2
    finally:
        await client.aclose()


async def test_aclose_closes_connections_and_the_client_still_works(start: Start) -> None:
    server = await start(serve(response(completion())))
    client = LeanHTTPClient(server.url + "/chat/completions")
    await asyncio.gather(*(client.post(b"{}", 2.0) for _ in range(3)))
    assert server.active == 3
    await client.aclose()
    await asyncio.sleep(0.05)
    assert server.active == 0
    assert (await client.post(b"{}", 2.0)).status == 200
    await client.aclose()


async def test_unsolicited_bytes_on_an_idle_connection_drop_it(start: Start) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await peer.send(response(completion()))
            await asyncio.sleep(0.02)
            if peer.index == 0:
                await peer.send(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")

    server = await start(handler)
    client = LeanHTTPClient(server.url + "/chat/completions")
    try:
        await client.post(b"{}", 2.0)
        await asyncio.sleep(0.1)
        assert (await client.post(b"{}", 2.0)).status == 200
        assert len(server.peers) == 2
    finally:
        await client.aclose()


# -- TLS --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    try:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"no openssl to make a test certificate: {exc}")
    return cert, key


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return context


@pytest.mark.parametrize("http_client", ["lean", "aiohttp"])
async def test_tls(start: Start, transports: Make, certificate: tuple[Path, Path], http_client: str) -> None:
    framed = response(chunked(completion("over tls")), headers=("Transfer-Encoding: chunked",), length=False)
    server = await start(serve(framed), server_tls(certificate))
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    url = f"https://localhost:{server.port}/v1"
    transport = transports(url, http_client=http_client, ssl_context=trusted)
    for _ in range(3):
        assert (await transport.complete(REQUEST)).text == "over tls"
    assert len(server.peers) == 1
    assert server.requests[0].header("Host") == f"localhost:{server.port}"


async def test_tls_with_an_untrusted_certificate_fails(
    start: Start, transports: Make, certificate: tuple[Path, Path]
) -> None:
    server = await start(serve(response(completion())), server_tls(certificate))
    with pytest.raises(APIConnectionError, match="cannot connect"):
        await transports(f"https://localhost:{server.port}/v1").complete(REQUEST)
    assert not server.requests


async def test_tls_checks_the_host_name(start: Start, transports: Make, certificate: tuple[Path, Path]) -> None:
    server = await start(serve(response(completion())), server_tls(certificate))
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    # A trusted certificate, but for localhost only: 127.0.0.1 is not a name it covers.
    with pytest.raises(APIConnectionError, match="cannot connect"):
        await transports(f"https://127.0.0.1:{server.port}/v1", ssl_context=trusted).complete(REQUEST)
    assert not server.requests


async def test_the_client_alone_raises_its_own_errors(start: Start) -> None:
    server = await start(serve(response(completion())[:-5], close_after=True))
    client = LeanHTTPClient(server.url + "/chat/completions")
    try:
        with pytest.raises(HTTPConnectionError, match="before the response was complete"):
            await client.post(b"{}", 2.0)
    finally:
        await client.aclose()


async def test_requests_waiting_for_a_connection_are_served_in_order(start: Start) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await asyncio.sleep(0.01)
            await peer.send(response(b"{}"))

    server = await start(handler)
    client = LeanHTTPClient(server.url + "/chat/completions", limit=2)
    try:
        calls = []
        for n in range(8):
            calls.append(asyncio.ensure_future(client.post(b'{"n": %d}' % n, 5.0)))
            await asyncio.sleep(0)  # queue in this order
        await asyncio.gather(*calls)
        # Newcomers arriving while others wait must not overtake them either.
        assert [json.loads(r.body)["n"] for r in server.requests] == list(range(8))
        assert len(server.peers) == 2
    finally:
        await client.aclose()


async def test_aclose_fails_a_request_in_flight_without_sending_it_again(start: Start) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            if peer.served == 1:
                await asyncio.sleep(10)
            await peer.send(response(b"{}"))
            peer.served += 1

    server = await start(handler)
    client = LeanHTTPClient(server.url + "/chat/completions")
    await client.post(b"{}", 2.0)
    pending = asyncio.ensure_future(client.post(b"{}", 5.0))  # on the reused connection
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await client.aclose()
    with pytest.raises(HTTPConnectionError):
        await pending
    assert time.monotonic() - started < 1.0
    assert len(server.requests) == 2


async def test_idle_connections_expire(start: Start) -> None:
    server = await start(serve(response(b"{}")))
    client = LeanHTTPClient(server.url + "/chat/completions", keepalive_s=0.05)
    try:
        await client.post(b"{}", 2.0)
        await client.post(b"{}", 2.0)
        assert len(server.peers) == 1
        await asyncio.sleep(0.1)
        await client.post(b"{}", 2.0)
        assert len(server.peers) == 2
    finally:
        await client.aclose()


async def test_blank_lines_before_the_status_line_are_tolerated(start: Start) -> None:
    server = await start(serve(b"\r\n" + response(b'{"ok": 1}')))
    client = LeanHTTPClient(server.url + "/chat/completions")
    try:
        reply = await client.post(b"{}", 2.0)
        assert (reply.status, reply.body, reply.headers["content-type"]) == (200, b'{"ok": 1}', "application/json")
    finally:
        await client.aclose()
