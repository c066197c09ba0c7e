"""A scripted OpenAI-compatible chat-completions server, for tests and benchmarks on loopback.

It speaks the real wire format, so the real clients (litellm, the fast HTTP transport) run unchanged:
scripted replies with usage and provider cost, delays, HTTP errors with Retry-After, malformed bodies.
Replies come from a FIFO script first, then from a responder function (default: a fixed reply).

``refuse_formats`` names ``response_format`` types the server does not take, answered as llama.cpp's
``llama_cpp.server`` answers ``json_schema``: HTTP 500 with its request validation error (by default; set
``refusal_status`` for vLLM's 400 or TGI's 422). A refused request is recorded but takes no scripted reply.

Run standalone for benchmarks: ``python -m sidecar.testing.judge_server --port 8000 --latency-ms 200``
(``--fixed``: the leaner ``sidecar.testing.fixed_judge_server``, for load tests).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import itertools
import json
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sidecar.testing.completions import ToolCallReply, chat_completion
from sidecar.testing.fixed_judge_server import FixedJudgeServer, chat_completion_body

__all__ = ["JudgeServer", "RecordedRequest", "Reply", "Responder", "ToolCallReply", "format_refusal"]

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    content: str | None = '{"score": 1.0}'
    status: int = 200
    usage: dict[str, Any] | None = field(
        default_factory=lambda: {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    )
    cost: float | None = None  # provider-reported cost, put in usage.cost as OpenRouter does
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None  # raw body: replaces the generated one (malformed answers, odd errors)
    finish_reason: str | None = "stop"
    # Tool calls the model asks for (finish_reason ``tool_calls``): a scripted agent's turn, for the tests that run a
    # real instrumented client against this server.
    tool_calls: tuple[ToolCallReply, ...] = ()

    @classmethod
    def calling(cls, *calls: ToolCallReply, **kwargs: Any) -> Reply:
        """The model asks for ``calls`` and says nothing else."""
        return cls(content=None, tool_calls=calls, finish_reason="tool_calls", **kwargs)

    @classmethod
    def json(cls, value: Any, **kwargs: Any) -> Reply:
        return cls(content=json.dumps(value), **kwargs)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "error",
        *,
        code: str | None = None,
        retry_after: float | None = None,
        delay_s: float = 0.0,
    ) -> Reply:
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        payload = {"error": {"message": message, "type": "server_error", "code": code}}
        return cls(
            content=None,
            status=status,
            usage=None,
            headers=headers,
            body=json.dumps(payload).encode(),
            delay_s=delay_s,
        )


Responder = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]


@dataclass(frozen=True)
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def user_prompt(self) -> str:
        return next((str(m.get("content")) for m in self.body.get("messages", []) if m.get("role") == "user"), "")

    @property
    def system_prompt(self) -> str | None:
        return next((str(m.get("content")) for m in self.body.get("messages", []) if m.get("role") == "system"), None)


def format_refusal(kind: str, status: int = 500) -> Reply:
    """What llama.cpp's server (``llama_cpp.server`` 0.3.36) answers a ``response_format`` type it has no grammar
    for: its request model's validation error, wrapped as an internal error (``llama_cpp/server/errors.py``)."""
    message = (
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "
        f"\"Input should be 'text' or 'json_object'\", 'input': '{kind}', 'ctx': {{'expected': \"'text' or "
        "'json_object'\"}}\n"
    )
    payload = {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}}
    return Reply(content=None, status=status, usage=None, body=json.dumps(payload).encode())


class JudgeServer:
    def __init__(self, responder: Responder | None = None, *, record: bool = True) -> None:
        self._responder = responder
        self._script: deque[Reply] = deque()
        self._record = record
        self.requests: list[RecordedRequest] = []
        # response_format types refused (as llama.cpp refuses json_schema), with this status.
        self.refuse_formats: frozenset[str] = frozenset()
        self.refusal_status = 500
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The api_base to give clients (``…/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        self._script.extend(replies)

    def reset(self, responder: Responder | None = None) -> None:
        self._script.clear()
        self.requests.clear()
        self._responder = responder
        self.refuse_formats = frozenset()
        self.refusal_status = 500

    async def _reply_for(self, body: dict[str, Any]) -> Reply:
        response_format = body.get("response_format")
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind in self.refuse_formats:
            return format_refusal(str(kind), self.refusal_status)
        if self._script:
            return self._script.popleft()
        if self._responder is None:
            return Reply()
        reply = self._responder(body)
        return await reply if inspect.isawaitable(reply) else reply

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "request body is not JSON"}}, status=400)
        if self._record:
            self.requests.append(RecordedRequest(body=body, headers=dict(request.headers)))
        reply = await self._reply_for(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.body is not None:
            return web.Response(
                body=reply.body, status=reply.status, headers=reply.headers, content_type="application/json"
            )
        usage = dict(reply.usage) if reply.usage is not None else None
        if usage is not None and reply.cost is not None:
            usage["cost"] = reply.cost
        payload = chat_completion(
            reply.content,
            usage=usage,
            completion_id=f"chatcmpl-{next(_ids)}",
            model=body.get("model", "judge"),
            finish_reason=reply.finish_reason,
            tool_calls=reply.tool_calls,
        )
        return web.Response(
            body=json.dumps(payload).encode(),
            status=reply.status,
            headers=reply.headers,
            content_type="application/json",
        )

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> JudgeServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=4096)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> JudgeServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible judge server (fixed reply).")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--reply", default='{"score": 0.5}', help="message content of every reply")
    parser.add_argument(
        "--fixed",
        action="store_true",
        help="serve with sidecar.testing.fixed_judge_server: one pre-encoded reply, a fraction of the CPU per "
        "request (load tests on the machine the client runs on)",
    )
    args = parser.parse_args()

    async def serve() -> None:
        delay_s = args.latency_ms / 1000.0
        if args.fixed:
            lean = FixedJudgeServer(chat_completion_body(args.reply), delay_s=delay_s)
            port = (await lean.start(port=args.port)).port
        else:
            fixed = Reply(content=args.reply, delay_s=delay_s)
            port = (await JudgeServer(lambda _body: fixed, record=False).start(port=args.port)).port
        print(f"listening {port}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
