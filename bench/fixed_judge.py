"""A fixed judge server in a process of its own (``sidecar.testing.judge_server --fixed``), for benchmarks that
measure a scorer's own CPU: the server's work is not charged to the process under measure."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["start_fixed_judge"]

_ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_fixed_judge(reply: str) -> tuple[subprocess.Popen[str], str]:
    """The server process answering every call with ``reply``, and its OpenAI-compatible base URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar.testing.judge_server",
            "--fixed",
            "--port",
            str(_free_port()),
            "--reply",
            reply,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("listening"):
            return process, f"http://127.0.0.1:{int(line.split()[1])}/v1"
    process.kill()
    raise RuntimeError("the judge server did not start")
