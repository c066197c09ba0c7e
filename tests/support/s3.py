"""A local S3 emulator (moto's server) so the test broker can keep its data across a restart."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

__all__ = ["S3Emulator", "s3_emulator"]


@dataclass(frozen=True)
class S3Emulator:
    endpoint: str

    def broker_env(self) -> dict[str, str]:
        """What Tansu's s3:// storage engine needs to use this emulator."""
        return {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def create_bucket(self, name: str) -> None:
        client = boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id="test", aws_secret_access_key="test",
            region_name="us-east-1",
        )  # fmt: skip
        client.create_bucket(Bucket=name)


@pytest.fixture(scope="session")
def s3_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Emulator]:
    log_path: Path = tmp_path_factory.mktemp("moto") / "moto.log"
    server = Path(sys.executable).parent / "moto_server"
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(server), "-p", "0"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None:
            match = re.search(rb"Running on http://127\.0\.0\.1:(\d+)", log_path.read_bytes())
            if match:
                port = int(match.group(1))
            elif time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"moto_server did not start: {log_path.read_text()}")
            else:
                time.sleep(0.1)
        yield S3Emulator(f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(10)
