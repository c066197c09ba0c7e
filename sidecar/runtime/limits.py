"""The engine's limits, with their defaults: the one declaration of each (``runtime:`` in the settings reads
its defaults from here, and ``RuntimeSettings.limits`` builds these from a configuration)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sidecar.core.observers import ServiceObserver
from sidecar.runtime.join_buffer import JoinLimits
from sidecar.runtime.trace_buffer import TraceBufferLimits

__all__ = ["MAX_RUNS_PER_RECORD", "JoinLimits", "RuntimeLimits", "TraceBufferLimits", "runs_over_limit"]

log = logging.getLogger(__name__)

# The runs one record (or one ready trace) may start (sidecar.conventions.run_limit, docs/limits.md): as many as
# may be in flight by default.
MAX_RUNS_PER_RECORD = 512


@dataclass(frozen=True, slots=True)
class RuntimeLimits:
    max_in_flight_runs: int = 512
    max_runs_per_record: int = MAX_RUNS_PER_RECORD
    max_buffered_bytes: int = 64 * 1024 * 1024
    commit_interval_s: float = 1.0
    shutdown_timeout_s: float = 20.0
    revoke_timeout_s: float = 5.0
    run_timeout_s: float = 120.0
    flush_timeout_s: float = 10.0
    poll_timeout_ms: int = 200
    max_poll_records: int = 500
    # A broker unreachable at start-up is retried this long (kafka.startup_timeout_s), then StartupFailure.
    startup_timeout_s: float = 300.0
    # How long intake waits for capacity before pausing its partitions. Pausing drops the consumer's
    # prefetched records (a fetch round trip to resume), so runs that only need CPU are waited for.
    pause_grace_s: float = 0.2
    trace_buffer: TraceBufferLimits = field(default_factory=TraceBufferLimits)
    log_join: JoinLimits = field(default_factory=JoinLimits)


def runs_over_limit(observer: ServiceObserver, what: str, runs: int, over: int) -> None:
    """``what`` (a record, a ready trace) would have started ``runs`` runs: the ``over`` past the bound are not
    started, counted and said."""
    observer.limit_hit("runs_per_record", over)
    log.warning(
        "%s holds %d runs, over runtime.max_runs_per_record: %d not started (each scorer keeps an even share of "
        "the first); raise the bound if the Collector batches that many agent spans into one record",
        what,
        runs,
        over,
    )
