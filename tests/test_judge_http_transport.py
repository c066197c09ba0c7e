"""The fast path's transport (``OpenAICompatibleTransport`` over aiohttp) against purpose-built servers.

Each server here is a raw loopback socket server (tests/support/raw_http.py), so a test controls every
byte of the response: framing, compression, interim responses, closes at awkward moments, slowness and
TLS. What is checked is how each case reaches the judge client: a response, or the right ``ProviderError``.
Proxies are a real forward proxy on loopback (tests/support/proxy.py); the environment variables that
name it are set before the transport is made, as they would be in a pod.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
import pytest_asyncio
from pydantic import SecretStr

from sidecar.scoring.judge.errors import (
    APIConnectionError,
    APIError,
    InternalServerError,
    RateLimitError,
    ServiceUnavailableError,
    Timeout,
)
from sidecar.scoring.judge.http_transport import OpenAICompatibleTransport
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from tests.support.proxy import ForwardProxy
from tests.support.raw_http import Peer, StartServer, chunked, completion, response, serve
from tests.support.tls import JudgeCA

KEY = "sk-http-0123456789abcdef0123456789abcdef"
REQUEST = ChatRequest(messages=({"role": "user", "content": "score this"},), timeout_s=2.0)
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")

Make = Callable[..., OpenAICompatibleTransport]


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever proxies the machine running the tests has, the tests start without any."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def judge(url: str, **overrides: Any) -> JudgeModel:
    settings: dict[str, Any] = {
        "model": "openai/gpt-4o-mini",
        "api_base": url,
        "api_key": SecretStr(KEY),
        "transport": "http",
    }
    settings.update(overrides)
    return JudgeModel(**settings)


@pytest_asyncio.fixture
async def transports() -> AsyncIterator[Make]:
    """Make transports with ``transports(url, connection_limit=..., **JudgeModel fields)``; closed after."""
    made: list[OpenAICompatibleTransport] = []

    def make(url: str, *, connection_limit: int = 512, **overrides: Any) -> OpenAICompatibleTransport:
        transport = OpenAICompatibleTransport(judge(url, **overrides), connection_limit=connection_limit)
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.aclose()


# -- the request -----------------------------------------------------------------------------------------


async def test_the_request(raw_servers: StartServer, transports: Make) -> None:
    server = await raw_servers(serve(response(completion())))
    reply = await transports(server.url, temperature=0, max_tokens=64).complete(REQUEST)
    assert reply.text == '{"score": 1.0}'
    assert reply.usage is not None and reply.usage.total_tokens == 15
    sent = server.requests[0]
    assert sent.lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert sent.header("Host") == f"127.0.0.1:{server.port}"
    assert sent.header("Content-Type") == "application/json"
    assert sent.header("Authorization") == f"Bearer {KEY}"
    assert sent.header("Content-Length") == str(len(sent.body))
    assert "gzip" in (sent.header("Accept-Encoding") or "")
    assert json.loads(sent.body) == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "score this"}],
        "temperature": 0,
        "max_tokens": 64,
    }


def test_an_api_base_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http"):
        OpenAICompatibleTransport(judge("ftp://127.0.0.1/v1"))


# -- framing ----------------------------------------------------------------------------------------------


async def test_chunked_response(raw_servers: StartServer, transports: Make) -> None:
    body = completion("chunked works")
    framed = response(
        chunked(body, extension=True, trailers=True), headers=("Transfer-Encoding: chunked",), length=False
    )
    server = await raw_servers(serve(framed))
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "chunked works"
    assert (await transport.complete(REQUEST)).text == "chunked works"  # and the connection is reused
    assert len(server.peers) == 1


async def test_response_arriving_byte_by_byte(raw_servers: StartServer, transports: Make) -> None:
    body = completion("slowly")
    framed = response(chunked(body, size=5), headers=("Transfer-Encoding: chunked",), length=False)

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            reply = response(body) if peer.served % 2 else framed
            await peer.send(reply, pieces=len(reply))
            peer.served += 1

    server = await raw_servers(handler)
    transport = transports(server.url)
    for _ in range(4):
        assert (await transport.complete(REQUEST)).text == "slowly"
    assert len(server.peers) == 1


async def test_body_until_end_of_stream(raw_servers: StartServer, transports: Make) -> None:
    raw = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + completion("until eof")
    server = await raw_servers(serve(raw, close_after=True))
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "until eof"
    assert (await transport.complete(REQUEST)).text == "until eof"
    assert len(server.peers) == 2  # no length, no reuse


@pytest.mark.parametrize(
    ("coding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
async def test_compressed_bodies(
    raw_servers: StartServer, transports: Make, coding: str, compress: Callable[[bytes], bytes]
) -> None:
    encoded = compress(completion("compressed"))
    server = await raw_servers(
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


async def test_corrupt_gzip_is_a_connection_error(raw_servers: StartServer, transports: Make) -> None:
    server = await raw_servers(serve(response(b"\x1f\x8bnot really gzip", headers=("Content-Encoding: gzip",))))
    with pytest.raises(APIConnectionError):
        await transports(server.url).complete(REQUEST)


async def test_interim_responses_are_skipped(raw_servers: StartServer, transports: Make) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    server = await raw_servers(serve(interim + response(completion("after interim"))))
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "after interim"
    assert (await transport.complete(REQUEST)).text == "after interim"


async def test_header_names_are_case_insensitive(raw_servers: StartServer, transports: Make) -> None:
    body = completion("shouting")
    error = json.dumps({"error": {"message": "slow down", "code": "rate_limit_exceeded"}}).encode()
    server = await raw_servers(
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


async def test_error_status_on_a_chunked_body(raw_servers: StartServer, transports: Make) -> None:
    error = json.dumps({"error": {"message": f"overloaded, key {KEY}"}}).encode()
    framed = response(
        chunked(error), "503 Service Unavailable", ("Transfer-Encoding: chunked", "Retry-After-Ms: 1500"), length=False
    )
    server = await raw_servers(serve(framed))
    with pytest.raises(ServiceUnavailableError) as caught:
        await transports(server.url).complete(REQUEST)
    assert caught.value.retry_after_s == 1.5
    assert caught.value.status_code == 503
    assert KEY not in caught.value.message and "overloaded" in caught.value.message


async def test_a_redirect_is_an_error_not_followed(raw_servers: StartServer, transports: Make) -> None:
    server = await raw_servers(serve(response(status="307 Temporary Redirect", headers=("Location: /elsewhere",))))
    with pytest.raises(APIError) as caught:
        await transports(server.url).complete(REQUEST)
    assert caught.value.status_code == 307
    assert len(server.requests) == 1


async def test_a_200_that_is_not_a_completion_is_a_retryable_server_error(
    raw_servers: StartServer, transports: Make
) -> None:
    server = await raw_servers(serve(response(b"<html>gateway says hi</html>")))
    with pytest.raises(InternalServerError):
        await transports(server.url).complete(REQUEST)


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
async def test_truncated_response_is_a_connection_error(raw_servers: StartServer, transports: Make, raw: bytes) -> None:
    server = await raw_servers(serve(raw, close_after=True))
    with pytest.raises(APIConnectionError, match="connection to the judge failed"):
        await transports(server.url).complete(REQUEST)
    assert len(server.requests) == 1  # never sent twice by the transport: retries are the judge client's


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
async def test_malformed_response_is_a_connection_error(raw_servers: StartServer, transports: Make, raw: bytes) -> None:
    server = await raw_servers(serve(raw))
    with pytest.raises(APIConnectionError):
        await transports(server.url).complete(REQUEST)


# -- connections ------------------------------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection(raw_servers: StartServer, transports: Make) -> None:
    server = await raw_servers(serve(response(completion())))
    transport = transports(server.url)
    for _ in range(5):
        await transport.complete(REQUEST)
    assert len(server.peers) == 1 and len(server.requests) == 5


async def test_connection_close_is_honoured(raw_servers: StartServer, transports: Make) -> None:
    # The server says close but keeps the socket open: the client must not reuse it anyway.
    server = await raw_servers(serve(response(completion(), headers=("Connection: close",))))
    transport = transports(server.url)
    for _ in range(3):
        await transport.complete(REQUEST)
    assert len(server.peers) == 3


async def test_idle_connection_closed_by_the_server(raw_servers: StartServer, transports: Make) -> None:
    server = await raw_servers(serve(response(completion()), close_after=True))  # closes right after answering
    transport = transports(server.url)
    await transport.complete(REQUEST)
    await asyncio.sleep(0.05)  # the FIN arrives while the connection is idle
    assert (await transport.complete(REQUEST)).text == '{"score": 1.0}'
    assert len(server.peers) == 2 and len(server.requests) == 2


async def test_a_kept_alive_connection_the_server_drops_mid_request(raw_servers: StartServer, transports: Make) -> None:
    # The keep-alive race: the server closes a reused connection as the request arrives, before a byte of
    # response. aiohttp resends only idempotent methods, so the call fails as a retryable connection error
    # (the judge client retries it) and the next call gets a fresh connection.
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            if peer.served == 1:
                peer.writer.transport.abort()
                return
            await peer.send(response(completion()))
            peer.served += 1

    server = await raw_servers(handler)
    transport = transports(server.url)
    await transport.complete(REQUEST)
    with pytest.raises(APIConnectionError) as caught:
        await transport.complete(REQUEST)
    assert caught.value.retryable
    assert (await transport.complete(REQUEST)).text == '{"score": 1.0}'
    assert len(server.peers) == 2 and len(server.requests) == 3


async def test_connection_refused(transports: Make) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(APIConnectionError) as caught:
        await transports(f"http://127.0.0.1:{port}/v1").complete(REQUEST)
    assert caught.value.retryable
    # The root cause as an operator reads it: the address and the errno's meaning.
    assert f"cannot connect to 127.0.0.1:{port}: Connection refused" in caught.value.message


async def test_an_unknown_host_names_the_dns_failure(transports: Make) -> None:
    with pytest.raises(APIConnectionError) as caught:
        await transports("http://judge.invalid:8000/v1").complete(REQUEST)
    assert caught.value.retryable
    assert caught.value.message.startswith("connection to the judge failed: cannot connect to judge.invalid:8000: ")


async def test_slow_server_times_out_within_timeout_s(raw_servers: StartServer, transports: Make) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{")  # then nothing
            await asyncio.sleep(10)

    server = await raw_servers(handler)
    transport = transports(server.url)
    started = time.monotonic()
    with pytest.raises(Timeout) as caught:
        await transport.complete(ChatRequest(messages=REQUEST.messages, timeout_s=0.3))
    assert 0.25 <= time.monotonic() - started < 1.0
    assert caught.value.code == "408"


async def test_a_server_that_never_answers_times_out_too(raw_servers: StartServer, transports: Make) -> None:
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await asyncio.sleep(10)

    server = await raw_servers(handler)
    started = time.monotonic()
    with pytest.raises(Timeout):
        await transports(server.url).complete(ChatRequest(messages=REQUEST.messages, timeout_s=0.3))
    assert 0.25 <= time.monotonic() - started < 1.0


async def test_pool_limit_is_respected(raw_servers: StartServer, transports: Make) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await asyncio.sleep(0.03)
            await peer.send(response(completion()))

    server = await raw_servers(handler)
    transport = transports(server.url, connection_limit=3)
    replies = await asyncio.gather(*(transport.complete(REQUEST) for _ in range(20)))
    assert all(r.text == '{"score": 1.0}' for r in replies)
    assert server.max_active <= 3 and len(server.peers) == 3
    assert len(server.requests) == 20


async def test_waiting_for_a_connection_counts_against_the_timeout(raw_servers: StartServer, transports: Make) -> None:
    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            await asyncio.sleep(0.5)
            await peer.send(response(completion()))

    server = await raw_servers(handler)
    transport = transports(server.url, connection_limit=1)
    first = asyncio.ensure_future(transport.complete(REQUEST))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(Timeout):
        await transport.complete(ChatRequest(messages=REQUEST.messages, timeout_s=0.1))
    assert time.monotonic() - started < 0.4
    assert (await first).text == '{"score": 1.0}'
    assert (await transport.complete(REQUEST)).text == '{"score": 1.0}'  # the slot came back
    assert len(server.peers) == 1


async def test_a_cancelled_call_does_not_leave_its_answer_for_the_next(
    raw_servers: StartServer, transports: Make
) -> None:
    gate = asyncio.Event()

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            if not gate.is_set():
                await gate.wait()
                await peer.send(response(completion("stale")))
            else:
                await peer.send(response(completion("fresh")))

    server = await raw_servers(handler)
    transport = transports(server.url, connection_limit=1)
    pending = asyncio.ensure_future(transport.complete(REQUEST))
    await asyncio.sleep(0.05)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    gate.set()
    assert (await transport.complete(REQUEST)).text == "fresh"
    assert len(server.peers) == 2


async def test_aclose_closes_connections_and_the_transport_still_works(
    raw_servers: StartServer, transports: Make
) -> None:
    server = await raw_servers(serve(response(completion())))
    transport = transports(server.url)
    await asyncio.gather(*(transport.complete(REQUEST) for _ in range(3)))
    assert server.active == 3
    await transport.aclose()
    await asyncio.sleep(0.05)
    assert server.active == 0
    assert (await transport.complete(REQUEST)).text == '{"score": 1.0}'


# -- TLS --------------------------------------------------------------------------------------------------


async def test_tls_with_the_judges_ca_bundle(raw_servers: StartServer, transports: Make, judge_ca: JudgeCA) -> None:
    framed = response(chunked(completion("over tls")), headers=("Transfer-Encoding: chunked",), length=False)
    server = await raw_servers(serve(framed), judge_ca.server_context())
    transport = transports(f"https://localhost:{server.port}/v1", ca_bundle=judge_ca.ca_pem)
    for _ in range(3):
        assert (await transport.complete(REQUEST)).text == "over tls"
    assert len(server.peers) == 1
    assert server.requests[0].header("Host") == f"localhost:{server.port}"


async def test_tls_without_the_ca_is_a_certificate_error(
    raw_servers: StartServer, transports: Make, judge_ca: JudgeCA
) -> None:
    server = await raw_servers(serve(response(completion())), judge_ca.server_context())
    with pytest.raises(APIConnectionError, match="CERTIFICATE_VERIFY_FAILED") as caught:
        await transports(server.url).complete(REQUEST)
    assert KEY not in caught.value.message
    assert not server.requests


async def test_tls_checks_the_host_name(raw_servers: StartServer, transports: Make, judge_ca: JudgeCA) -> None:
    # A certificate the CA signed, but for another name: trusted, and still refused.
    other = judge_ca.ca.issue_cert("judge.internal")
    context = judge_ca.server_context()
    other.configure_cert(context)
    server = await raw_servers(serve(response(completion())), context)
    with pytest.raises(APIConnectionError, match="CERTIFICATE_VERIFY_FAILED") as caught:
        await transports(server.url, ca_bundle=judge_ca.ca_pem).complete(REQUEST)
    assert "mismatch" in caught.value.message
    assert not server.requests


def test_a_ca_bundle_that_does_not_exist_is_a_validation_error(tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError, match="ca_bundle"):
        judge("https://127.0.0.1:1/v1", ca_bundle=tmp_path / "missing.pem")


def test_a_ca_bundle_that_is_not_pem_is_named_when_the_transport_is_made(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=r"judge 'openai/gpt-4o-mini': ca_bundle '.*bogus\.pem' is not a readable PEM"):
        OpenAICompatibleTransport(judge("https://127.0.0.1:1/v1", ca_bundle=bogus))


async def run_python(code: str, env: dict[str, str]) -> str:
    """Run ``code`` in a fresh interpreter (the loop keeps serving meanwhile); its stdout, or fail."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()[-3000:]
    return stdout.decode()


TRANSPORT_CALL = """
import asyncio, sys
from sidecar.scoring.judge.http_transport import OpenAICompatibleTransport
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest

async def main() -> None:
    transport = OpenAICompatibleTransport(JudgeModel(model="openai/judge", api_base=sys.argv[1], transport="http"))
    try:
        reply = await transport.complete(ChatRequest(messages=({"role": "user", "content": "x"},), timeout_s=10))
    finally:
        await transport.aclose()
    print(reply.text)

asyncio.run(main())
"""


def clean_environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.upper() not in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR")}
    env.update(extra)
    return env


async def test_ssl_cert_file_is_honoured_without_a_ca_bundle(raw_servers: StartServer, judge_ca: JudgeCA) -> None:
    # OpenSSL reads SSL_CERT_FILE when a context loads the default paths, so it must be set before the
    # process makes one: a fresh interpreter is the honest place to check it.
    server = await raw_servers(serve(response(completion("trusted via env"))), judge_ca.server_context())
    code = TRANSPORT_CALL.replace("sys.argv[1]", repr(server.url))
    out = await run_python(code, clean_environment(SSL_CERT_FILE=str(judge_ca.ca_pem)))
    assert out.strip() == "trusted via env"
    assert len(server.requests) == 1


# -- proxies ----------------------------------------------------------------------------------------------


async def test_https_proxy_tunnels_to_a_tls_judge(
    raw_servers: StartServer,
    transports: Make,
    judge_ca: JudgeCA,
    forward_proxy: ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = await raw_servers(serve(response(completion("through the proxy"))), judge_ca.server_context())
    monkeypatch.setenv("HTTPS_PROXY", forward_proxy.url)
    transport = transports(server.url, ca_bundle=judge_ca.ca_pem)
    assert str(transport.proxy) == forward_proxy.url
    for _ in range(3):
        assert (await transport.complete(REQUEST)).text == "through the proxy"
    assert forward_proxy.connects == [f"127.0.0.1:{server.port}"]  # one tunnel, kept alive
    # The proxy only ever saw the tunnel: the key travelled inside TLS.
    assert all("authorization" not in r.headers for r in forward_proxy.requests)
    assert server.requests[0].header("Authorization") == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("no_proxy", "bypassed"),
    [("127.0.0.1", True), ("*", True), ("judge.internal, 127.0.0.1", True), ("example.com", False)],
)
async def test_no_proxy_bypasses_the_proxy_for_the_hosts_it_names(
    raw_servers: StartServer,
    transports: Make,
    judge_ca: JudgeCA,
    forward_proxy: ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy: str,
    bypassed: bool,
) -> None:
    server = await raw_servers(serve(response(completion())), judge_ca.server_context())
    monkeypatch.setenv("HTTPS_PROXY", forward_proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    transport = transports(server.url, ca_bundle=judge_ca.ca_pem)
    assert (await transport.complete(REQUEST)).text == '{"score": 1.0}'
    assert (transport.proxy is None) is bypassed
    assert forward_proxy.connects == ([] if bypassed else [f"127.0.0.1:{server.port}"])


async def test_http_proxy_forwards_a_plain_http_judge(
    raw_servers: StartServer, transports: Make, forward_proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await raw_servers(serve(response(completion("forwarded"))))
    monkeypatch.setenv("HTTP_PROXY", forward_proxy.url)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # for https:// only: never used here
    transport = transports(server.url)
    assert (await transport.complete(REQUEST)).text == "forwarded"
    assert forward_proxy.forwarded == [f"{server.url}/chat/completions"]
    assert server.requests[0].lines[0] == "POST /v1/chat/completions HTTP/1.1"


async def test_proxy_credentials_in_the_url_are_sent_to_the_proxy(
    raw_servers: StartServer,
    transports: Make,
    judge_ca: JudgeCA,
    forward_proxy: ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = await raw_servers(serve(response(completion())), judge_ca.server_context())
    monkeypatch.setenv("HTTPS_PROXY", forward_proxy.url.replace("http://", "http://egress:s3cret@"))
    transport = transports(server.url, ca_bundle=judge_ca.ca_pem)
    await transport.complete(REQUEST)
    expected = "Basic " + base64.b64encode(b"egress:s3cret").decode()
    assert [r.headers.get("proxy-authorization") for r in forward_proxy.requests] == [expected]
    assert server.requests[0].header("Proxy-Authorization") is None


async def test_a_proxy_that_cannot_reach_the_judge_is_a_connection_error(
    transports: Make, forward_proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = closed.sockets[0].getsockname()[1]
    closed.close()
    await closed.wait_closed()
    monkeypatch.setenv("HTTPS_PROXY", forward_proxy.url)
    with pytest.raises(APIConnectionError) as caught:
        await transports(f"https://127.0.0.1:{port}/v1").complete(REQUEST)
    assert caught.value.retryable
    assert forward_proxy.connects == [f"127.0.0.1:{port}"]


LITELLM_CALL = """
import asyncio, sys
from pathlib import Path
from sidecar.scoring.judge.litellm_transport import LiteLLMTransport
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest

async def main() -> None:
    model = JudgeModel(model="hosted_vllm/judge", api_base=sys.argv[1], api_key="sk-x", transport="litellm",
                       ca_bundle=Path(sys.argv[2]))
    reply = await LiteLLMTransport(model).complete(ChatRequest(messages=({"role": "user", "content": "x"},),
                                                              timeout_s=10))
    print(reply.text)

asyncio.run(main())
"""


async def test_the_litellm_path_takes_the_ca_bundle_and_the_proxy_from_the_environment(
    raw_servers: StartServer, judge_ca: JudgeCA, forward_proxy: ForwardProxy
) -> None:
    # litellm keeps clients and proxy decisions in process-wide caches: a fresh interpreter keeps this
    # test's environment its own. hosted_vllm is one of the providers that honour a per-call ssl_verify.
    server = await raw_servers(serve(response(completion("litellm via proxy"))), judge_ca.server_context())
    code = LITELLM_CALL.replace("sys.argv[1]", repr(server.url)).replace("sys.argv[2]", repr(str(judge_ca.ca_pem)))
    out = await run_python(code, clean_environment(HTTPS_PROXY=forward_proxy.url, LITELLM_LOCAL_MODEL_COST_MAP="True"))
    assert out.strip().splitlines()[-1] == "litellm via proxy"
    assert forward_proxy.connects == [f"127.0.0.1:{server.port}"]
