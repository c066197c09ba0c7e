"""The ``agent`` label of the metrics: the agent's name, for a bounded number of agents.

Agent names come from traced attributes, so their number is not bounded by configuration: a
multi-tenant platform, or an instrumentation that puts a request id in ``gen_ai.agent.name``, would create
a time series per value (Prometheus' naming guide: never use unbounded values as labels). The first
``limit`` distinct names seen keep their own label; later ones are labelled ``other`` (and logged once, so
an operator can pin them). ``pinned`` names always get their own label, whatever arrives first. Spans
without an agent name are labelled ``unknown``. The choice is per process: pin the agents that matter so
every replica labels them alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

__all__ = ["OTHER", "UNKNOWN", "AgentLabels"]

log = logging.getLogger(__name__)

OTHER = "other"
UNKNOWN = "unknown"


class AgentLabels:
    def __init__(self, limit: int = 50, pinned: Iterable[str] = ()) -> None:
        self._limit = limit
        self._labels: dict[str, str] = {name: name for name in pinned}
        self._free = limit
        self._warned = False

    def label(self, agent: str | None) -> str:
        if not agent:
            return UNKNOWN
        label = self._labels.get(agent)
        if label is not None:
            return label
        if self._free > 0:
            self._free -= 1
            label = agent
        else:
            label = OTHER
            if not self._warned:
                self._warned = True
                log.warning(
                    "more than %d agents seen (runtime.max_agent_labels): agent %r and later new ones are "
                    "labelled %r in the metrics; list the agents that matter under runtime.agent_labels",
                    self._limit,
                    agent,
                    OTHER,
                )
        self._labels[agent] = label
        return label
