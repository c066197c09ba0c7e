"""``runtime``: flow control, timeouts, workers and the whole-trace buffer."""

from __future__ import annotations

from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from sidecar.runtime.limits import JoinLimits, RuntimeLimits, TraceBufferLimits
from sidecar.settings.base import _Frozen
from sidecar.settings.errors import _problem

__all__ = ["LogJoinSettings", "RuntimeSettings", "TraceBufferSettings"]

# The engine declares its defaults (sidecar.runtime.limits); the settings only add the bounds a value must keep.
_RUNTIME = RuntimeLimits()
_TRACES = TraceBufferLimits()
_JOIN = JoinLimits()


class TraceBufferSettings(_Frozen):
    """When a trace is done for ``scope: trace`` scorers, and how much of them may wait in memory."""

    # Ready when its root span has arrived and no span of it came for idle_s ...
    idle_s: float = Field(default=_TRACES.idle_s, gt=0, le=3600)
    # ... or max_wait_s after its first span, whatever arrived (the run says it is incomplete).
    max_wait_s: float = Field(default=_TRACES.max_wait_s, gt=0, le=86400)
    # At either bound intake pauses until traces are scored (nothing is dropped).
    max_traces: int = Field(default=_TRACES.max_traces, gt=0)
    max_bytes: int = Field(default=_TRACES.max_bytes, gt=0)  # bytes of the spans of the traces waiting
    # One trace past this is scored at once from what arrived, and marked incomplete (ready reason evicted).
    max_trace_bytes: int = Field(default=_TRACES.max_trace_bytes, gt=0)

    @model_validator(mode="after")
    def _wait_covers_idle(self) -> TraceBufferSettings:
        if self.max_wait_s < self.idle_s:
            raise ValidationError.from_exception_data(
                type(self).__name__, [_problem(("max_wait_s",), "must be at least idle_s")]
            )
        return self


class LogJoinSettings(_Frozen):
    """How long an LLM call's span and its content from the logs topics (``kafka.log_topics``) wait for each other,
    and how much of both may be held (docs/ingest.md)."""

    # A span without content of its own waits this long for it (then it is scored as it came), and content as long
    # for its span. Its partition's commits wait behind it: keep it seconds, not minutes.
    join_wait_s: float = Field(default=_JOIN.join_wait_s, gt=0, le=600)
    # Span records waiting and content held; past it the oldest goes on (or, content, is let go), counted.
    max_bytes: int = Field(default=_JOIN.max_bytes, gt=0)


class RuntimeSettings(_Frozen):
    """Flow control and timeouts of the scoring loop."""

    # Runs started and not yet exported; at the bound intake pauses its partitions (the backlog waits in Kafka).
    max_in_flight_runs: int = Field(default=_RUNTIME.max_in_flight_runs, gt=0)
    # The runs one record (or one ready trace) may start, shared evenly among its scorers; past it, counted
    # (limit_hits_total{limit="runs_per_record"}) and not started.
    max_runs_per_record: int = Field(default=_RUNTIME.max_runs_per_record, gt=0)
    # Bytes of the records whose runs are in flight; at the bound intake pauses, as at max_in_flight_runs.
    max_buffered_bytes: int = Field(default=_RUNTIME.max_buffered_bytes, gt=0)
    # How often exporters are flushed and the offsets of records whose scores are all exported committed.
    commit_interval_s: float = Field(default=_RUNTIME.commit_interval_s, gt=0)
    # The bound on a whole stop (SIGTERM: drain, flush, commit, leave the group); past it, what is left is
    # redelivered. Give Kubernetes terminationGracePeriodSeconds at least this + 5 (docs/worker-lifecycle.md).
    shutdown_timeout_s: float = Field(default=_RUNTIME.shutdown_timeout_s, gt=0)
    # How long a rebalance waits for the revoked partitions' runs to finish and commit; the rest is redelivered
    # to the partitions' new owner.
    revoke_timeout_s: float = Field(default=_RUNTIME.revoke_timeout_s, gt=0)
    # One run's bound (its judge calls included; time held for a paused judge does not count): past it, failed.
    run_timeout_s: float = Field(default=_RUNTIME.run_timeout_s, gt=0)
    # The `agent` label of the metrics: the first max_agent_labels agent names seen keep their own label,
    # later ones read "other"; agent_labels are always labelled (bounded series, whatever the traces say).
    max_agent_labels: int = Field(default=50, ge=0)
    agent_labels: tuple[str, ...] = ()  # agent names that always get their own label, whatever arrives first
    # Processes in this pod, each a consumer of the group (Kafka spreads the partitions). Judge limits,
    # spend caps and the in-flight bounds above are the pod's: workers split them.
    workers: int = Field(default=1, ge=1, le=64)
    # A one-line INFO summary of intake (records, spans, runs per scorer, skips by reason, dead letters) this
    # often, when something happened: how a configuration that scores nothing shows why. 0: never.
    intake_log_interval_s: float = Field(default=60.0, ge=0)
    trace_buffer: TraceBufferSettings = TraceBufferSettings()
    log_join: LogJoinSettings = LogJoinSettings()

    def limits(self, *, max_poll_records: int, startup_timeout_s: float) -> RuntimeLimits:
        """The engine's limits from this block (and the two the ``kafka`` block sets)."""
        traces = self.trace_buffer
        return RuntimeLimits(
            max_in_flight_runs=self.max_in_flight_runs,
            max_runs_per_record=self.max_runs_per_record,
            max_buffered_bytes=self.max_buffered_bytes,
            commit_interval_s=self.commit_interval_s,
            shutdown_timeout_s=self.shutdown_timeout_s,
            revoke_timeout_s=self.revoke_timeout_s,
            run_timeout_s=self.run_timeout_s,
            max_poll_records=max_poll_records,
            startup_timeout_s=startup_timeout_s,
            trace_buffer=TraceBufferLimits(
                idle_s=traces.idle_s,
                max_wait_s=traces.max_wait_s,
                max_traces=traces.max_traces,
                max_bytes=traces.max_bytes,
                max_trace_bytes=traces.max_trace_bytes,
            ),
            log_join=JoinLimits(join_wait_s=self.log_join.join_wait_s, max_bytes=self.log_join.max_bytes),
        )
