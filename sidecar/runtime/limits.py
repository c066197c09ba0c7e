"""The engine's limits, with their defaults: the one declaration of each (``runtime:`` in the settings reads
its defaults from here, and ``RuntimeSettings.limits`` builds these from a configuration)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.runtime.join_buffer import JoinLimits
from sidecar.runtime.trace_buffer import TraceBufferLimits

__all__ = ["JoinLimits", "RuntimeLimits", "TraceBufferLimits"]


@dataclass(frozen=True, slots=True)
class RuntimeLimits:
    max_in_flight_runs: int = 512
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
