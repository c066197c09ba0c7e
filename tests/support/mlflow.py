"""A real MLflow tracking server for the tests: ``mlflow server`` from its own environment (``.venvs/mlflow``,
tests/support/venvs.py), on loopback, with SQLite in a temporary directory, in a session (a process group) of
its own, killed whole at the end.

One server per test session, started by the first test that asks for it (``mlflow``); the tests that use it
share one xdist worker (tests/conftest.py). Tests isolate themselves by experiments and trace ids. Started as
an offline test box needs it (measured with 3.17.2): ``MLFLOW_DISABLE_TELEMETRY=true``;
``MLFLOW_MODEL_CATALOG_URI`` empty, else each start stalls about 7 s on a catalog fetch that cannot succeed
offline; ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``, so no job-runner processes (healthy in 5 to 10 s); one
worker. Traces go in as an instrumented app's do, OTLP/HTTP to ``/v1/traces`` with ``x-mlflow-experiment-id``;
reads go through MLflow's REST API (``GET /api/3.0/mlflow/traces/{id}``: ``trace.trace_info.assessments``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.server_process import ServerProcess
from tests.support.sidecar_process import free_port
from tests.support.venvs import require

__all__ = ["MlflowServer", "mlflow", "mlflow_session"]

# What makes `mlflow server` start and run offline, quietly, in one process.
QUIET = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_MODEL_CATALOG_URI": "",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}


class MlflowServer(ServerProcess):
    name = "mlflow"

    def __init__(self, executable: Path, workdir: Path) -> None:
        super().__init__(workdir)
        self.executable = executable
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def health_url(self) -> str:
        return self.url + "/health"

    def environment(self) -> dict[str, str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        environment.update(QUIET)
        return environment

    def command(self) -> list[str]:
        return [
            str(self.executable), "server",
            "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
            "--default-artifact-root", str(self.workdir / "artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]  # fmt: skip

    # -- the REST API and OTLP in -------------------------------------------------------------------------------
    async def call(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None) -> Any:
        """One REST call that must answer 200: its JSON."""
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.url + path, json=body, params=params) as response,
        ):
            text = await response.text()
            assert response.status == 200, f"{method} {path}: HTTP {response.status}: {text}"
            return await response.json(content_type=None)

    async def experiment(self, name: str) -> str:
        """A new experiment's id."""
        return str((await self.call("POST", "/api/2.0/mlflow/experiments/create", {"name": name}))["experiment_id"])

    async def experiment_id(self, name: str) -> str | None:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + "/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": name}) as r,
        ):
            if r.status == 404:
                return None
            return str((await r.json(content_type=None))["experiment"]["experiment_id"])

    async def send_traces(self, request: ExportTraceServiceRequest, experiment_id: str) -> None:
        """What the Collector's ``otlphttp`` exporter does with ``x-mlflow-experiment-id`` in its headers."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.url + "/v1/traces",
                data=request.SerializeToString(),
                headers={"Content-Type": "application/x-protobuf", "x-mlflow-experiment-id": experiment_id},
            ) as response,
        ):
            assert response.status == 200, await response.text()

    async def trace(self, otel_trace_id: str) -> dict[str, Any] | None:
        """The trace's ``trace_info`` (assessments included), or ``None`` when MLflow has no such trace."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}/api/3.0/mlflow/traces/tr-{otel_trace_id.lower()}") as response,
        ):
            if response.status == 404:
                return None
            assert response.status == 200, await response.text()
            info: dict[str, Any] = (await response.json(content_type=None))["trace"]["trace_info"]
            return info

    async def assessments(self, otel_trace_id: str) -> list[dict[str, Any]]:
        info = await self.trace(otel_trace_id)
        return list(info.get("assessments") or []) if info is not None else []

    async def wait_for_traces(self, trace_ids: list[str], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        missing = list(trace_ids)
        while time.monotonic() < deadline:
            missing = [t for t in missing if await self.trace(t) is None]
            if not missing:
                return
            await asyncio.sleep(0.25)
        raise AssertionError(f"{len(missing)} traces not in MLflow after {timeout_s} s: {missing[:3]}")

    async def wait_for_assessments(
        self, trace_ids: list[str], expected: int, timeout_s: float = 120
    ) -> dict[str, list[dict[str, Any]]]:
        """Every trace's assessments, once ``expected`` are there in all."""
        deadline = time.monotonic() + timeout_s
        found: dict[str, list[dict[str, Any]]] = {}
        while time.monotonic() < deadline:
            found = {t: await self.assessments(t) for t in trace_ids}
            if sum(len(rows) for rows in found.values()) >= expected:
                return found
            await asyncio.sleep(0.5)
        total = sum(len(rows) for rows in found.values())
        raise AssertionError(f"{total} of {expected} assessments in MLflow after {timeout_s} s")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def mlflow_session(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MlflowServer]:
    server = MlflowServer(require("mlflow", "mlflow"), tmp_path_factory.mktemp("mlflow"))
    await server.start(timeout_s=120)
    yield server
    server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def mlflow(mlflow_session: MlflowServer) -> MlflowServer:
    """The session's MLflow, running (a test that stopped it restarts it before it ends)."""
    if not mlflow_session.running:
        await mlflow_session.start()
    return mlflow_session
