"""What one worker process may use when ``runtime.workers`` processes share a pod's configuration.

The configuration states the pod's budget: a judge's ``max_concurrency``, ``rpm``, ``tpm`` and spend cap,
the runtime's in-flight bounds, the trace buffer's, the conversations' (``sessions.max_bytes``) and
what feedback holds (``feedback.max_held``). Each worker
gets its part, so N workers together never ask a provider for more than one process would have (each worker
keeps its own gate: no shared state).
"""

from __future__ import annotations

from sidecar.settings import JudgeSettings, Settings

__all__ = ["settings_for_worker", "worker_share"]


def worker_share(total: int, index: int, count: int) -> int:
    """Worker ``index``'s part of ``total``: parts differ by at most one and sum to ``total``; never below 1
    (a limit of 1 shared by 2 workers allows 2, the least that lets each worker work)."""
    if not 0 <= index < count:
        raise ValueError(f"worker index {index} is outside 0..{count - 1}")
    return max(1, total // count + (1 if index < total % count else 0))


def _judge_for_worker(judge: JudgeSettings, index: int, count: int) -> JudgeSettings:
    return judge.model_copy(
        update={
            "max_concurrency": worker_share(judge.max_concurrency, index, count),
            "rpm": None if judge.rpm is None else worker_share(judge.rpm, index, count),
            "tpm": None if judge.tpm is None else worker_share(judge.tpm, index, count),
            "spend_cap_usd_per_hour": None
            if judge.spend_cap_usd_per_hour is None
            else judge.spend_cap_usd_per_hour / count,
        }
    )


def settings_for_worker(settings: Settings, index: int, count: int) -> Settings:
    """The settings worker ``index`` of ``count`` runs with (``runtime.workers`` becomes 1: it is one process)."""
    runtime = settings.runtime
    sessions = settings.sessions
    if sessions is not None:  # each worker holds the conversations of its own partitions
        sessions = sessions.model_copy(
            update={"max_bytes": max(sessions.max_session_bytes, worker_share(sessions.max_bytes, index, count))}
        )
    # Each worker compares its share of the runs and any worker's verdict pages: the level is split between them.
    versions = settings.versions.model_copy(update={"replicas": settings.versions.replicas * count})
    feedback = settings.feedback
    if feedback is not None:  # each worker holds what waits on its own lanes
        feedback = feedback.model_copy(update={"max_held": worker_share(feedback.max_held, index, count)})
    # The canary runs in worker 0 only: one round per replica, not one per worker.
    scorers = settings.scorers if index == 0 else tuple(s.model_copy(update={"canary": None}) for s in settings.scorers)
    return settings.model_copy(
        update={
            "scorers": scorers,
            "sessions": sessions,
            "versions": versions,
            "feedback": feedback,
            "judges": {name: _judge_for_worker(j, index, count) for name, j in settings.judges.items()},
            "runtime": runtime.model_copy(
                update={
                    "workers": 1,
                    "max_in_flight_runs": worker_share(runtime.max_in_flight_runs, index, count),
                    "max_buffered_bytes": worker_share(runtime.max_buffered_bytes, index, count),
                    "trace_buffer": runtime.trace_buffer.model_copy(
                        update={
                            "max_traces": worker_share(runtime.trace_buffer.max_traces, index, count),
                            "max_bytes": worker_share(runtime.trace_buffer.max_bytes, index, count),
                        }
                    ),
                }
            ),
        }
    )
