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
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.sidecar_process import free_port
from tests.support.venvs import require

__all__ = ["MlflowServer", "mlflow", "mlflow_session"]

# What makes `mlflow server` start and run offline, quietly, in one process.
QUIET = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_MODEL_CATALOG_URI": "",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}


class MlflowServer:
    def __init__(self, executable: Path, workdir: Path) -> None:
        self.executable = executable
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: list[float] = []  # time to healthy, per start

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "mlflow.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def start(self, timeout_s: float = 120) -> None:
        started = time.monotonic()
        self.process = self._spawn()
        deadline = started + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"mlflow server exited ({self.process.returncode}):\n{self._log_tail()}")
                try:
                    async with session.get(self.url + "/health") as response:
                        if response.status == 200:
                            self.startup_s.append(time.monotonic() - started)
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.25)
        self.stop()
        raise TimeoutError(f"mlflow server not healthy after {timeout_s} s:\n{self._log_tail()}")

    def _spawn(self) -> subprocess.Popen[bytes]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        environment.update(QUIET)
        database = self.workdir / "mlflow.db"
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                [
                    str(self.executable), "server",
                    "--backend-store-uri", f"sqlite:///{database}",
                    "--default-artifact-root", str(self.workdir / "artifacts"),
                    "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                ],
                stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=self.workdir, start_new_session=True,
            )  # fmt: skip

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM to the server's whole process group (uvicorn and its worker), SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        else:
            # The worker may outlive its parent for a moment: nothing of the group is left behind.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def _log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    # -- the REST API and OTLP in -------------------------------------------------------------------------------
    async def _call(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.url + path, json=body, params=params) as response,
        ):
            text = await response.text()
            assert response.status == 200, f"{method} {path}: HTTP {response.status}: {text}"
            return await response.json(content_type=None)

    async def experiment(self, name: str) -> str:
        """A new experiment's id."""
        return str((await self._call("POST", "/api/2.0/mlflow/experiments/create", {"name": name}))["experiment_id"])

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
    await server.start()
    yield server
    server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def mlflow(mlflow_session: MlflowServer) -> MlflowServer:
    """The session's MLflow, running (a test that stopped it restarts it before it ends)."""
    if not mlflow_session.running:
        await mlflow_session.start()
    return mlflow_session
