"""A real Arize Phoenix server for the tests: ``phoenix serve`` from the ``arize-phoenix`` package (the dev
extra), on loopback, with SQLite in a temporary working directory.

One server per test session, started by the first test that asks for it (``phoenix``): it is slow to become
healthy and large in memory (docs/phoenix.md has the figures). Tests isolate themselves by project names and
span ids. Reads go through Phoenix's documented REST API (``/v1/projects/{project}/spans``,
``/v1/projects/{project}/span_annotations``, ``…/session_annotations``, ``…/sessions``); traces go in over
OTLP/HTTP like any instrumented app's.

Without the package the tests that need it are skipped, saying so; under CI (``CI`` set) they fail instead,
since ``.ci/run`` installs it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.loopback import serve_on_loopback
from tests.support.server_process import ServerProcess
from tests.support.sidecar_process import free_port

__all__ = ["FaultyFront", "PhoenixServer", "phoenix", "phoenix_executable", "phoenix_session", "with_project"]

# Phoenix reaches out by default (telemetry, a docs server for its assistant): none of that on a test box.
_QUIET = {
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
    "PHOENIX_ENABLE_MCP_SERVER": "false",
}


def phoenix_executable() -> str | None:
    """``phoenix`` next to this interpreter (the project's venv), else on PATH."""
    return shutil.which("phoenix", path=str(Path(sys.executable).parent)) or shutil.which("phoenix")


def with_project(request: ExportTraceServiceRequest, project: str) -> ExportTraceServiceRequest:
    """A copy of ``request`` whose resources name the Phoenix project (``openinference.project.name``)."""
    copy = ExportTraceServiceRequest()
    copy.CopyFrom(request)
    for resource_spans in copy.resource_spans:
        kv = resource_spans.resource.attributes.add()
        kv.key, kv.value.string_value = "openinference.project.name", project
    return copy


class PhoenixServer(ServerProcess):
    name = "phoenix"

    def __init__(self, executable: str, workdir: Path) -> None:
        super().__init__(workdir)
        self.executable = executable
        self.http_port = free_port()
        self.grpc_port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def health_url(self) -> str:
        return self.url + "/healthz"

    def environment(self) -> dict[str, str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_") and "API_KEY" not in k}
        environment.update(
            _QUIET,
            PHOENIX_WORKING_DIR=str(self.workdir),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.http_port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
        )
        return environment

    def command(self) -> list[str]:
        return [self.executable, "serve"]

    # -- OTLP in ---------------------------------------------------------------------------------------------
    async def send_traces(self, request: ExportTraceServiceRequest) -> None:
        """What an instrumented app (or a Collector) does: OTLP/HTTP protobuf to ``/v1/traces``."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.url + "/v1/traces",
                data=request.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf"},
            ) as response,
        ):
            assert response.status == 200, await response.text()

    # -- the REST API ----------------------------------------------------------------------------------------
    async def _pages(self, path: str, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor: str | None = None
        async with aiohttp.ClientSession() as session:
            while True:
                query = [*params, *([("cursor", cursor)] if cursor else [])]
                async with session.get(self.url + path, params=query) as response:
                    if response.status == 404:  # no such project (yet)
                        return []
                    assert response.status == 200, await response.text()
                    body = await response.json()
                rows.extend(body["data"])
                cursor = body.get("next_cursor")
                if not cursor:
                    return rows

    async def projects(self) -> list[str]:
        return [p["name"] for p in await self._pages("/v1/projects", [("limit", "100")])]

    async def spans(self, project: str, *, trace_id: str | None = None) -> list[dict[str, Any]]:
        params = [("limit", "1000"), *([("trace_id", trace_id)] if trace_id else [])]
        return await self._pages(f"/v1/projects/{project}/spans", params)

    async def span_annotations(self, project: str, span_ids: list[str]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for i in range(0, len(span_ids), 50):
            params = [("limit", "1000"), *(("span_ids", s) for s in span_ids[i : i + 50])]
            rows.extend(await self._pages(f"/v1/projects/{project}/span_annotations", params))
        return rows

    async def session_annotations(self, project: str, session_ids: list[str]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for i in range(0, len(session_ids), 50):
            params = [("limit", "1000"), *(("session_ids", s) for s in session_ids[i : i + 50])]
            rows.extend(await self._pages(f"/v1/projects/{project}/session_annotations", params))
        return rows

    async def sessions(self, project: str) -> list[dict[str, Any]]:
        return await self._pages(f"/v1/projects/{project}/sessions", [("limit", "100")])

    async def wait_for_spans(self, project: str, expected: int, *, timeout_s: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        spans: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            spans = await self.spans(project)
            if len(spans) >= expected:
                return spans
            await asyncio.sleep(0.5)
        raise AssertionError(f"{len(spans)} of {expected} spans in Phoenix project {project!r} after {timeout_s} s")


class FaultyFront:
    """A reverse proxy in front of the real Phoenix that answers scripted faults first (429 with Retry-After,
    503, 401), then forwards: what a gateway, a rate limiter or an auth proxy before Phoenix does. Records
    each request's time, status and ``Authorization`` header."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.faults: list[tuple[int, dict[str, str]]] = []  # answered in order, one per request
        self.always: int | None = None  # answer this status to every request while set
        self.log: list[tuple[float, int, str | None]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FaultyFront:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner, self.port = await serve_on_loopback(app)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        auth = request.headers.get("Authorization")
        if self.always is not None or self.faults:
            status, headers = (self.always, {}) if self.always is not None else self.faults.pop(0)
            self.log.append((time.monotonic(), status, auth))
            return web.Response(status=status, text=f"scripted {status}", headers=headers)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with (
            aiohttp.ClientSession() as session,
            session.request(request.method, self.upstream + request.path_qs, data=body, headers=headers) as upstream,
        ):
            text = await upstream.text()
            self.log.append((time.monotonic(), upstream.status, auth))
            return web.Response(status=upstream.status, text=text, content_type=upstream.content_type)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def phoenix_session(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PhoenixServer]:
    executable = phoenix_executable()
    if executable is None:
        reason = "arize-phoenix is not installed (pip install -e '.[dev]' brings it)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: .ci/run installs it")
        pytest.skip(reason)
    server = PhoenixServer(executable, tmp_path_factory.mktemp("phoenix"))
    await server.start()
    yield server
    server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def phoenix(phoenix_session: PhoenixServer) -> PhoenixServer:
    """The session's Phoenix, running (a test that stopped it restarts it before it ends)."""
    if not phoenix_session.running:
        await phoenix_session.start()
    return phoenix_session
