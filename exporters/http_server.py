"""The sidecar's small HTTP server: ``/metrics``, ``/healthz`` and ``/readyz`` (aiohttp, on the event loop).

- ``/metrics``: the registry, in OpenMetrics when the scraper asks for it (``Accept:
  application/openmetrics-text``, which Prometheus sends; exemplars need it), else the text format 0.0.4.
- ``/healthz``: 200 while the process is alive. Answering at all proves the event loop runs; an optional
  ``liveness`` callback can also report a dead main loop (503).
- ``/readyz``: 200 only when the ``readiness`` callback says so, else 503 with a JSON reason.

Port 0 binds a free port; ``port`` holds the bound one after ``start``. With ``unix_path`` the server
listens on that Unix socket instead (a worker process serving only its supervisor). A ``refresh``
coroutine, when given, runs before each ``/metrics`` encoding (the supervisor fetches its workers' metrics).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

__all__ = ["Liveness", "MetricsServer", "Readiness", "ReadinessResult"]

log = logging.getLogger(__name__)

# ``True``/``False``, or ``(ready, reason)`` so a 503 can say why.
ReadinessResult = bool | tuple[bool, str]
Readiness = Callable[[], ReadinessResult]
Liveness = Callable[[], ReadinessResult]


def _evaluate(check: Callable[[], ReadinessResult] | None, default_reason: str) -> tuple[bool, str]:
    if check is None:
        return True, ""
    try:
        result = check()
    except Exception as exc:  # a broken check means "not ready", never a 500 with a traceback
        log.warning("health check raised %s", type(exc).__name__, exc_info=True)
        return False, f"check failed: {type(exc).__name__}"
    if isinstance(result, tuple):
        ok, reason = result
        return bool(ok), reason or ("" if ok else default_reason)
    return bool(result), "" if result else default_reason


class MetricsServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "0.0.0.0",
        port: int = 9464,
        readiness: Readiness | None = None,
        liveness: Liveness | None = None,
        unix_path: str | None = None,
        refresh: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.readiness = readiness
        self.liveness = liveness
        self.unix_path = unix_path
        self.refresh = refresh
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    async def start(self) -> MetricsServer:
        if self._runner is not None:
            return self
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site: web.BaseSite = (
            web.UnixSite(runner, self.unix_path)
            if self.unix_path is not None
            else web.TCPSite(runner, self.host, self.port)
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        if self.unix_path is not None:
            log.info("metrics server listening on unix:%s", self.unix_path)
            return self
        sockets: list[Any] = list(getattr(site._server, "sockets", None) or [])
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        log.info("metrics server listening on %s:%d", self.host, self.port)
        return self

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> MetricsServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers ---------------------------------------------------------------------------------------
    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        if self.refresh is not None:
            await self.refresh()
        # Collection takes locks and formats every series: off the event loop, which scores spans.
        body = await asyncio.get_running_loop().run_in_executor(None, encoder, self.registry)
        response = web.Response(body=body, headers={"Content-Type": content_type})
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression()
        return response

    async def _healthz(self, request: web.Request) -> web.StreamResponse:
        ok, reason = _evaluate(self.liveness, "not alive")
        if ok:
            return web.json_response({"status": "ok"})
        return web.json_response({"status": "unhealthy", "reason": reason}, status=503)

    async def _readyz(self, request: web.Request) -> web.StreamResponse:
        ok, reason = _evaluate(self.readiness, "not ready")
        if ok:
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not_ready", "reason": reason}, status=503)
