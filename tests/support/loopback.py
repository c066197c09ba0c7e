"""An aiohttp application served on a loopback port, for the stand-ins of the destinations (Langfuse, Datadog,
a faulty front of Phoenix, an OTLP receiver, a scripted HTTP destination)."""

from __future__ import annotations

from aiohttp import web

__all__ = ["serve_on_loopback"]


async def serve_on_loopback(app: web.Application, port: int = 0) -> tuple[web.AppRunner, int]:
    """``app`` serving on ``127.0.0.1:port`` (0: a free port), and the port it took. A stand-in stopped
    (``runner.cleanup()``) and started again on the port it had comes back where its sink expects it."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
    await site.start()
    return runner, int(runner.addresses[0][1])
