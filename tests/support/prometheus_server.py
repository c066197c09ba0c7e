"""A real Prometheus server (the ``prometheus`` binary, e.g. Debian's package) on a loopback port, for tests.

It scrapes the given targets every ``scrape_interval`` with the given rule files loaded and evaluated every
``evaluation_interval``; ``query`` goes through the HTTP API exactly as Grafana's data source does.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.support.sidecar_process import free_port

__all__ = ["PrometheusServer", "prometheus_binary", "rules_with_short_for"]


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


@dataclass
class PrometheusServer:
    workdir: Path
    targets: list[str]
    rule_files: list[Path] = field(default_factory=list)
    job: str = "scoring-sidecar"
    scrape_interval: str = "1s"
    evaluation_interval: str = "1s"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(p.resolve()) for p in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": self.job,
                    "scrape_timeout": self.scrape_interval,
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }

    def start(self) -> None:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("the prometheus binary is not on PATH (apt-get install prometheus)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config()))
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--enable-feature=exemplar-storage",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    async def wait_ready(self, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                assert self.process is not None and self.process.poll() is None, self.log_path.read_text()
                try:
                    async with session.get(self.url + "/-/ready") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"prometheus not ready in {timeout_s}s:\n{self.log_path.read_text()[-3000:]}")

    async def api(self, path: str, params: dict[str, str] | list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """GET ``/api/v1/<path>``; returns the JSON body whatever the status (errors carry ``errorType``)."""
        async with aiohttp.ClientSession() as session, session.get(f"{self.url}/api/v1/{path}", params=params) as r:
            body: dict[str, Any] = await r.json()
            return body

    async def query(self, expr: str) -> dict[str, Any]:
        return await self.api("query", {"query": expr})

    def stop(self, timeout_s: float = 10) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def rules_with_short_for(rule_files: list[Path], workdir: Path, for_s: int) -> list[Path]:
    """A copy of ``rule_files`` with every alert's ``for:`` cut to ``for_s`` seconds, so a test sees an alert go
    pending then firing in seconds. The expressions, labels and annotations are the project's own."""
    workdir.mkdir(parents=True, exist_ok=True)
    copies = []
    for path in rule_files:
        rules = yaml.safe_load(path.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "alert" in rule and "for" in rule:
                    rule["for"] = f"{for_s}s"
        copy = workdir / path.name
        copy.write_text(yaml.safe_dump(rules, sort_keys=False))
        copies.append(copy)
    return copies
