"""The demo's ``/metrics`` port: checked before anything starts, and announced once the service serves it.

The demo has no configuration file, so a taken port must name the demo's own flag (``demo --metrics-port``),
not the keys ``run`` would advise; and its URL is printed only once something answers there, so that a
newcomer never opens a URL the demo then fails to serve.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import time
from typing import Any

import aiohttp

__all__ = ["port_problem", "taken_port_line", "wait_until_serving"]


def taken_port_line(host: str, port: int, error: OSError) -> str:
    """The one line for a metrics port the demo cannot bind, with the flag that changes it."""
    why = os.strerror(error.errno) if error.errno else str(error)
    if error.errno == errno.EADDRINUSE:
        why = "the port is taken (is another demo or sidecar running?)"
    return f"demo: cannot serve /metrics on {host}:{port}: {why}: pass demo --metrics-port N (0: a free port)"


def port_problem(host: str, port: int) -> str | None:
    """``None`` when ``host:port`` can be bound now, else the line saying why not (checked before the broker
    starts: failing at once beats failing after it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the metrics server binds: a port in TIME_WAIT from a demo that just stopped is free to reuse.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return taken_port_line(host, port, exc)
    return None


async def wait_until_serving(url: str, service: asyncio.Future[Any], *, timeout_s: float = 60.0) -> bool:
    """Whether ``url`` (the service's ``/healthz``) answered before ``service`` ended or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while not service.done() and time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return True
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.1)
    return False
