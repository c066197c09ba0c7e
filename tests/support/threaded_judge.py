"""A scripted judge server on its own event loop in a thread, for tests of commands that run their own
``asyncio.run`` (``eval``, ``preview``) in the test's thread."""

from __future__ import annotations

import asyncio
import threading

from sidecar.testing.judge_server import JudgeServer, Responder

__all__ = ["ThreadedJudgeServer"]


class ThreadedJudgeServer:
    def __init__(self, responder: Responder | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = JudgeServer(responder)

    def __enter__(self) -> JudgeServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self.server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
