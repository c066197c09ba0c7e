"""A server the tests run as it ships (Phoenix, MLflow, llama.cpp's): a subprocess on loopback in a session of
its own, polled until its health URL answers 200, stopped as a whole process group (SIGTERM, then SIGKILL for
what lingers), its output in a log file the failures quote."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import aiohttp

__all__ = ["ServerProcess"]


class ServerProcess:
    """Subclasses say how the server starts (``command``, ``environment``) and where it answers (``health_url``)."""

    name = "server"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: list[float] = []  # time to healthy, per start

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    @property
    def health_url(self) -> str:
        raise NotImplementedError

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=self.workdir,
                start_new_session=True,
            )

    async def start(self, timeout_s: float = 180) -> None:
        started = time.monotonic()
        self.process = self._spawn()
        deadline = started + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited ({self.process.returncode}):\n{self.log_tail()}")
                try:
                    async with session.get(self.health_url) as response:
                        if response.status == 200:
                            self.startup_s.append(time.monotonic() - started)
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.25)
        self.stop()
        raise TimeoutError(f"{self.name} not healthy after {timeout_s} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM to the whole process group (a server and its workers), SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        else:  # a worker may outlive its parent for a moment: nothing of the group is left behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""
