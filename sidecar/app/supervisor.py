"""``runtime.workers`` > 1: one supervisor, N worker processes, one consumer group.

A Python process scores on one core. A pod given several cores runs several workers: each is the
whole service (``scoring-sidecar run`` with its share of the judge limits, see ``worker_share``) and a
member of the same consumer group, so Kafka spreads the partitions among them as among replicas, and
at-least-once holds per worker as it does per replica.

The supervisor owns what the pod shows the outside: ``/metrics`` (every worker's metrics with a
``worker`` label, see ``exporters.worker_metrics``), ``/healthz`` and ``/readyz`` (ready when every
worker is). It restarts a worker that exits on its own (a restarted worker resumes from the group's
committed offsets), gives up on a crash loop (exit 1: the orchestrator restarts the pod), and on
SIGTERM stops every worker the usual way (drain, flush, commit, leave the group) within
``runtime.shutdown_timeout_s``: a worker still running ``STOP_GRACE_S`` + ``KILL_MARGIN_S`` later is
killed with SIGKILL, and the supervisor then exits with ``EXIT_STOP_OVERRUN`` (3). Workers watch their
stdin pipe and their parent pid (``sidecar.app.lifecycle``), so a supervisor killed with SIGKILL takes
no orphan consumer with it: each stops within its own deadline. docs/worker-lifecycle.md has the whole
picture. SIGUSR1 (resume the judges: an operator fixed a paused judge's key, quota or model) is passed on
to every worker, each of which has a judge gate of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from exporters.http_server import MetricsServer, ReadinessResult
from exporters.worker_metrics import WorkerPoolMetrics, merge_worker_metrics
from sidecar.app.lifecycle import EXIT_STOP_OVERRUN, STOP_GRACE_S
from sidecar.runtime.signals import DEFAULT_STOP_SIGNALS, stop_on_signals
from sidecar.runtime.startup import EXIT_INVALID, EXIT_UNREACHABLE, listen_failure
from sidecar.settings import Settings

__all__ = ["KILL_MARGIN_S", "RestartPolicy", "Supervisor", "limits_below_worker_count", "supervise"]

log = logging.getLogger(__name__)

_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Past a worker's own deadline (shutdown_timeout_s + STOP_GRACE_S, kept by its watchdog) the supervisor
# kills it: the pod's stop takes at most shutdown_timeout_s + STOP_GRACE_S + KILL_MARGIN_S (+ reaping).
KILL_MARGIN_S = 1.0


@dataclass(frozen=True)
class RestartPolicy:
    """A worker that exits on its own is restarted after ``backoff_s`` (doubling up to ``max_backoff_s``).
    ``max_quick_exits`` exits in a row, each within ``quick_exit_s`` of its start, is a crash loop."""

    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    quick_exit_s: float = 30.0
    max_quick_exits: int = 5


class _Worker:
    def __init__(self, index: int, socket_path: str) -> None:
        self.index = index
        self.name = str(index)
        self.socket_path = socket_path
        self.process: asyncio.subprocess.Process | None = None
        self.killed = False  # by the supervisor, past the stop deadline
        self.session: aiohttp.ClientSession | None = None
        self.ready: tuple[bool, str] = (False, "starting")
        # It has answered /readyz: its signal handlers are installed (SIGUSR1 before that would end it).
        self.answered = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def get(self, path: str, *, accept: str = "*/*") -> tuple[int, str]:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self.socket_path),
                timeout=aiohttp.ClientTimeout(total=5.0),
            )
        async with self.session.get(f"http://worker{path}", headers={"Accept": accept}) as response:
            return response.status, await response.text()


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        config_path: Path,
        *,
        workers: int | None = None,
        policy: RestartPolicy = RestartPolicy(),
        python: str = sys.executable,
    ) -> None:
        self.settings = settings
        self.config_path = config_path
        self.count = workers or settings.runtime.workers
        self.policy = policy
        self.python = python
        self.metrics = WorkerPoolMetrics(self.count)
        self._stopping = False
        self._gave_up = False
        self._exit_code = 1  # when giving up: a worker's own start-up failure (4) is the pod's
        self._socket_dir = ""
        self._workers: list[_Worker] = []

    # -- what the pod shows -------------------------------------------------------------------------
    def readiness(self) -> ReadinessResult:
        waiting = [f"worker {w.name}: {w.ready[1] or 'not ready'}" for w in self._workers if not w.ready[0]]
        return (not waiting, "; ".join(waiting))

    async def refresh_metrics(self) -> None:
        """Fetch every running worker's metrics and merge them (a worker that does not answer is left out)."""

        async def fetch(worker: _Worker) -> tuple[_Worker, str | None]:
            if not worker.running:
                return worker, None
            try:
                status, text = await worker.get("/metrics", accept=_OPENMETRICS)
            except (aiohttp.ClientError, OSError, TimeoutError):
                return worker, None
            return worker, text if status == 200 else None

        answers = await asyncio.gather(*(fetch(w) for w in self._workers))
        texts = {w.name: text for w, text in answers if text is not None}
        families, invalid = await asyncio.get_running_loop().run_in_executor(None, merge_worker_metrics, texts)
        for worker, text in answers:
            self.metrics.worker_up.labels(worker=worker.name).set(int(text is not None and worker.name not in invalid))
        if invalid:
            log.warning("workers %s served metrics that are not valid OpenMetrics", ",".join(invalid))
        self.metrics.merged.update(families)

    def resume_judges(self) -> list[str]:
        """Pass SIGUSR1 on to every running worker that has installed its handlers (a worker still starting
        has a fresh, closed gate: there is nothing to resume); the names of the workers signalled."""
        signalled = []
        for worker in self._workers:
            if worker.running and worker.answered and worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGUSR1)
                    signalled.append(worker.name)
        log.info("supervisor: SIGUSR1: resuming the judges of workers %s", ",".join(signalled) or "(none running)")
        return signalled

    # -- lifecycle ----------------------------------------------------------------------------------
    def worker_command(self, worker: _Worker) -> list[str]:
        return [
            self.python,
            "-m",
            "sidecar.cli",
            "run",
            "--config",
            str(self.config_path),
            "--worker",
            f"{worker.index}/{self.count}",
            "--metrics-socket",
            worker.socket_path,
        ]

    async def run(self, stop: asyncio.Event) -> int:
        """Run the workers until ``stop`` is set (or a crash loop); 0 when every worker stopped cleanly."""
        self._socket_dir = tempfile.mkdtemp(prefix="scoring-sidecar-")
        self._workers = [_Worker(i, os.path.join(self._socket_dir, f"worker-{i}.sock")) for i in range(self.count)]
        server: MetricsServer | None = None
        prometheus = self.settings.exporters.prometheus
        if prometheus.enabled:
            server = MetricsServer(
                self.metrics.registry,
                host=prometheus.host,
                port=prometheus.port,
                readiness=self.readiness,
                refresh=self.refresh_metrics,
            )
            try:
                await server.start()
            except OSError as exc:
                raise listen_failure(prometheus.host, prometheus.port, exc) from exc
            log.info("supervisor: %d workers' metrics on %s:%d/metrics", self.count, prometheus.host, server.port)
        halt = asyncio.Event()  # SIGTERM or a crash loop: every worker stops
        keepers = [asyncio.create_task(self._keep_running(w, halt)) for w in self._workers]
        poller = asyncio.create_task(self._poll_readiness())
        relay = asyncio.create_task(stop.wait())
        relay.add_done_callback(lambda _: halt.set())
        try:
            await halt.wait()
            self._stopping = True
            stopping = time.monotonic()
            codes = await self._stop_workers(keepers)
        finally:
            self._stopping = True
            relay.cancel()
            poller.cancel()
            for task in keepers:
                task.cancel()
            await asyncio.gather(poller, *keepers, return_exceptions=True)
            closing = [asyncio.create_task(w.session.close()) for w in self._workers if w.session is not None]
            if server is not None:
                closing.append(asyncio.create_task(server.stop()))
            if closing:  # bounded: a scrape in flight must not hold the pod's stop past its deadline
                await asyncio.wait(closing, timeout=2.0)
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        return self._exit_status(codes, time.monotonic() - stopping)

    def _exit_status(self, codes: Sequence[int], took_s: float) -> int:
        """0: every worker stopped within its deadline; 3 (EXIT_STOP_OVERRUN): one overran it (its watchdog
        ended it, or this process killed it); 4: a worker could not reach the broker within
        kafka.startup_timeout_s; 1: a crash loop, or a worker that failed while stopping."""
        listed = ",".join(str(c) for c in codes)
        outcomes = list(zip(self._workers, codes, strict=True))
        overran = [w.name for w, c in outcomes if w.killed or c == EXIT_STOP_OVERRUN]
        # -SIGTERM: a worker stopped before it installed its handlers (it had consumed nothing yet).
        failed = [w.name for w, c in outcomes if w.name not in overran and c not in (0, -signal.SIGTERM)]
        if self._gave_up or failed:
            code = self._exit_code if self._gave_up else 1
            log.error("supervisor: stopped in %.1f s; workers' exit codes %s: exiting with %d", took_s, listed, code)
            return code
        if overran:
            log.error(
                "supervisor: stopped in %.1f s; worker %s overran its stop deadline (runtime.shutdown_timeout_s "
                "%g s; exit codes %s): exiting with %d, their uncommitted records are redelivered",
                took_s,
                ",".join(overran),
                self.settings.runtime.shutdown_timeout_s,
                listed,
                EXIT_STOP_OVERRUN,
            )
            return EXIT_STOP_OVERRUN
        log.info("supervisor: workers stopped in %.1f s (exit codes %s)", took_s, listed)
        return 0

    async def _start(self, worker: _Worker) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(worker.socket_path)
        worker.ready = (False, "starting")
        worker.answered = False
        # stdin: a pipe never written to; the worker stops when it reads end of file (this process is gone).
        command = self.worker_command(worker)
        worker.process = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE)
        log.info("supervisor: worker %s started (pid %d)", worker.name, worker.process.pid)

    async def _keep_running(self, worker: _Worker, halt: asyncio.Event) -> int:
        """Start the worker and restart it when it exits on its own; the last exit code once stopping."""
        backoff, quick_exits = self.policy.backoff_s, 0
        while True:
            started = time.monotonic()
            await self._start(worker)
            assert worker.process is not None
            if self._stopping:  # stopping began while it started: it was not among those signalled
                worker.process.send_signal(signal.SIGTERM)
            code = await worker.process.wait()
            worker.ready = (False, f"exited with {code}")
            self.metrics.worker_up.labels(worker=worker.name).set(0)
            if self._stopping or halt.is_set():
                return code
            lived = time.monotonic() - started
            quick_exits = quick_exits + 1 if lived < self.policy.quick_exit_s else 0
            # A configuration does not heal by restarting, and a worker that gave up on the broker waited
            # kafka.startup_timeout_s already: the pod stops, and its orchestrator restarts it.
            if code in (EXIT_INVALID, EXIT_UNREACHABLE) or quick_exits >= self.policy.max_quick_exits:
                if code == EXIT_UNREACHABLE:
                    self._exit_code = EXIT_UNREACHABLE
                log.error(
                    "supervisor: worker %s exited with %d (%d quick exits in a row): stopping the pod",
                    worker.name,
                    code,
                    quick_exits,
                )
                self._gave_up = True
                halt.set()
                return code
            backoff = self.policy.backoff_s if quick_exits <= 1 else min(backoff * 2, self.policy.max_backoff_s)
            log.warning(
                "supervisor: worker %s exited with %d after %.1f s; restarting in %.1f s",
                worker.name,
                code,
                lived,
                backoff,
            )
            self.metrics.worker_restarts.labels(worker=worker.name).inc()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await halt.wait()
            if halt.is_set():
                return code

    async def _poll_readiness(self, every_s: float = 1.0) -> None:
        while True:
            for worker in self._workers:
                if not worker.running:
                    continue
                try:
                    status, body = await worker.get("/readyz")
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    worker.ready = (False, f"no answer ({type(exc).__name__})")
                    continue
                worker.ready = (status == 200, "" if status == 200 else _reason(body))
                worker.answered = True
            await asyncio.sleep(every_s)

    async def _stop_workers(self, keepers: Sequence[asyncio.Task[int]]) -> list[int]:
        """SIGTERM every running worker (each drains, flushes, commits and leaves the group within
        shutdown_timeout_s, or its watchdog ends it); SIGKILL what outlives that by KILL_MARGIN_S."""
        for worker in self._workers:
            if worker.running and worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGTERM)
        budget = self.settings.runtime.shutdown_timeout_s
        deadline = budget + STOP_GRACE_S + KILL_MARGIN_S
        _, pending = await asyncio.wait(keepers, timeout=deadline)
        for worker in self._workers:
            if worker.running and worker.process is not None:
                log.error(
                    "supervisor: worker %s (pid %d) did not exit within %.0f s of SIGTERM (runtime.shutdown_timeout_s "
                    "%g s + %g s): killing it with SIGKILL; its last lines (worker=%s pid=%d) say what it waited for",
                    worker.name,
                    worker.process.pid,
                    deadline,
                    budget,
                    STOP_GRACE_S + KILL_MARGIN_S,
                    worker.name,
                    worker.process.pid,
                )
                worker.killed = True
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
        if pending:
            await asyncio.wait(pending, timeout=2.0)
        return [_exit_code(task) for task in keepers]


def limits_below_worker_count(settings: Settings) -> list[str]:
    """Limits the workers cannot split (each worker keeps at least 1, so the pod may exceed them)."""
    count = settings.runtime.workers
    problems = []
    for name, judge in settings.judges.items():
        for key in ("max_concurrency", "rpm", "tpm"):
            value = getattr(judge, key)
            if value is not None and value < count:
                problems.append(
                    f"judges.{name}.{key} is {value}, below runtime.workers ({count}): each worker keeps 1, "
                    f"so the pod allows {count}"
                )
    return problems


def _exit_code(keeper: asyncio.Task[int]) -> int:
    if keeper.done() and not keeper.cancelled() and keeper.exception() is None:
        return keeper.result()
    return -int(signal.SIGKILL)


def _reason(body: str) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(body).get("reason") or "not ready")
    return "not ready"


def supervise(
    settings: Settings,
    config_path: Path,
    *,
    signals: Sequence[signal.Signals] = DEFAULT_STOP_SIGNALS,
) -> int:
    """Blocking entry point of a multi-worker pod: exit 0 after a clean stop, 1 after a crash loop."""

    async def main() -> int:
        stop = stop_on_signals(signals)
        log.info("scoring-sidecar supervisor starting %d workers", settings.runtime.workers)
        for problem in limits_below_worker_count(settings):
            log.warning("%s", problem)
        supervisor = Supervisor(settings, config_path)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, supervisor.resume_judges)
        return await supervisor.run(stop)

    return asyncio.run(main())
