"""What every stage starts work on, built once per service by the composition root: the claims on fetched records,
the dispatcher that runs scorers and hands their scores to the sinks, the capacity that pauses intake, the
observer, and the limits they share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import TopicPartition

from sidecar.core import Sink
from sidecar.core.observers import ServiceObserver
from sidecar.runtime.agent_labels import AgentLabels
from sidecar.runtime.capacity import Capacity
from sidecar.runtime.claims import Claims
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.runtime.limits import RuntimeLimits

__all__ = ["Engine"]


@dataclass(frozen=True, slots=True)
class Engine:
    limits: RuntimeLimits
    observer: ServiceObserver
    sinks: tuple[Sink, ...]
    claims: Claims[TopicPartition]
    dispatcher: RunDispatcher
    capacity: Capacity

    @classmethod
    def build(
        cls,
        sinks: Sequence[Sink],
        *,
        observer: ServiceObserver | None = None,
        limits: RuntimeLimits | None = None,
        agent_labels: AgentLabels | None = None,
    ) -> Engine:
        """The parts, wired: intake pauses at ``max_in_flight_runs`` runs and at ``max_buffered_bytes`` of records
        not done (each stage adds its own bound)."""
        limits = limits or RuntimeLimits()
        observer = observer or ServiceObserver()
        claims: Claims[TopicPartition] = Claims()
        dispatcher = RunDispatcher(sinks, observer, agent_labels or AgentLabels(), run_timeout_s=limits.run_timeout_s)
        capacity = Capacity(observer, lambda: dispatcher.in_flight)
        capacity.bound(lambda: dispatcher.in_flight >= limits.max_in_flight_runs)
        capacity.bound(lambda: claims.held_bytes >= limits.max_buffered_bytes)
        dispatcher.on_change = capacity.update
        return cls(limits, observer, tuple(sinks), claims, dispatcher, capacity)
