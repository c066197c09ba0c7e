"""The load-test judge stand-in (``sidecar.testing.fixed_judge_server``): real clients, real sockets."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from pydantic import SecretStr

from sidecar.scoring.judge.http_transport import OpenAICompatibleTransport
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.testing.fixed_judge_server import FixedJudgeServer, chat_completion_body

REQUEST = ChatRequest(messages=({"role": "user", "content": "score this"},), timeout_s=5.0)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[FixedJudgeServer]:
    async with FixedJudgeServer(chat_completion_body('{"score": 0.25}', prompt_tokens=7), delay_s=0.05) as started:
        yield started


async def exchange(port: int, payload: bytes) -> bytes:
    """Send raw bytes, read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def test_the_sidecars_transport_gets_the_fixed_reply_after_the_delay(server: FixedJudgeServer) -> None:
    model = JudgeModel(model="openai/gpt-4o-mini", api_base=server.url, api_key=SecretStr("sk-fixed"), transport="http")
    transport = OpenAICompatibleTransport(model)
    try:
        started = time.monotonic()
        responses = await asyncio.gather(*(transport.complete(REQUEST) for _ in range(20)))
        elapsed = time.monotonic() - started
        again = await transport.complete(REQUEST)  # a kept-alive connection serves the next request
    finally:
        await transport.aclose()
    assert {r.text for r in [*responses, again]} == {'{"score": 0.25}'}
    assert {r.status_code for r in responses} == {200}
    usage = responses[0].usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (7, 5, 12)
    assert 0.05 <= elapsed < 2.0  # the delay is served concurrently, not one request after another
    assert server.calls == 21


async def test_requests_on_one_connection_are_answered_in_turn_and_close_is_honoured(
    server: FixedJudgeServer,
) -> None:
    body = json.dumps({"model": "judge", "messages": []}).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
    # Two requests in one write (the second asks to close), the first split across its body.
    data = await exchange(server.port, request + b"\r\n" + body + request + b"Connection: close\r\n\r\n" + body)
    replies = data.split(b"HTTP/1.1 200 OK")
    assert len(replies) == 3 and replies[0] == b""
    assert b"Connection: keep-alive" in replies[1] and b"Connection: close" in replies[2]
    _, _, payload = replies[2].partition(b"\r\n\r\n")
    assert json.loads(payload)["choices"][0]["message"]["content"] == '{"score": 0.25}'
    assert server.calls == 2


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: many\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
    ],
)
async def test_requests_it_cannot_frame_get_400_and_a_close(server: FixedJudgeServer, head: bytes) -> None:
    data = await exchange(server.port, head)
    assert data.startswith(b"HTTP/1.1 400 Bad Request")
    assert server.calls == 0


async def test_an_endless_head_is_refused(server: FixedJudgeServer) -> None:
    data = await exchange(server.port, b"POST / HTTP/1.1\r\n" + b"X-Filler: " + b"a" * 70_000)
    assert data.startswith(b"HTTP/1.1 400 Bad Request")
