"""The ``agent`` label of the metrics: the agent's name, for a bounded number of agents.

Agent names come from traced attributes, so their number is not bounded by configuration: a
multi-tenant platform, or an instrumentation that puts a request id in ``gen_ai.agent.name``, would create
a time series per value (Prometheus' naming guide: never use unbounded values as labels). The first
``limit`` distinct names seen keep their own label; later ones are labelled ``other`` (and logged once, so
an operator can pin them). ``pinned`` names always get their own label, whatever arrives first. Runs whose
spans name no agent are labelled ``unnamed`` (and logged once, naming their service and what to set). The choice
is per process: pin the agents that matter so every replica labels them alike.

Names are bounded in length too (``sidecar.core.label_values``): a name over ``MAX_LABEL_CHARS`` is labelled by
its start and a hash. Only labels are remembered, never the names behind them, and no more than ``limit`` of
them: a stream of distinct, huge names costs neither memory nor series. Each bound hit is counted
(``limit_hits_total``: ``agent_label_chars``, ``agent_labels``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sidecar.core.label_values import AGENT_UNNAMED, MAX_LABEL_CHARS, bounded_label
from sidecar.core.observers import ServiceObserver

__all__ = ["OTHER", "UNNAMED", "AgentLabels"]

log = logging.getLogger(__name__)

OTHER = "other"
UNNAMED = AGENT_UNNAMED


class AgentLabels:
    def __init__(
        self,
        limit: int = 50,
        pinned: Iterable[str] = (),
        *,
        max_chars: int = MAX_LABEL_CHARS,
        observer: ServiceObserver | None = None,
    ) -> None:
        self._limit = limit
        self._max_chars = max_chars
        self._observer = observer or ServiceObserver()
        # Bounded label → itself: the labels given out (pinned ones first), never more than the pinned and limit.
        self._labels: set[str] = {bounded_label(name, max_chars) for name in pinned}
        self._free = limit
        self._warned = False
        self._warned_long = False
        self._warned_unnamed = False

    def label(self, agent: str | None, service: str | None = None) -> str:
        """The label of a run of ``agent`` (its service says where an unnamed one comes from)."""
        if not agent:
            if not self._warned_unnamed:
                self._warned_unnamed = True
                log.info(
                    "runs of service %r (and maybe others) name no agent: labelled agent=%r in the metrics; set "
                    "gen_ai.agent.name (or your convention's agent name attribute) on the agent's spans to tell "
                    "them apart",
                    service or "unknown_service",
                    UNNAMED,
                )
            return UNNAMED
        if len(agent) > self._max_chars:
            agent = self._shortened(agent)
        if agent in self._labels:
            return agent
        if self._free > 0:
            self._free -= 1
            self._labels.add(agent)
            return agent
        self._observer.limit_hit("agent_labels")
        if not self._warned:
            self._warned = True
            log.warning(
                "more than %d agents seen (runtime.max_agent_labels): agent %r and later new ones are "
                "labelled %r in the metrics; list the agents that matter under runtime.agent_labels",
                self._limit,
                agent,
                OTHER,
            )
        return OTHER

    def _shortened(self, agent: str) -> str:
        label = bounded_label(agent, self._max_chars)
        self._observer.limit_hit("agent_label_chars")
        if not self._warned_long:
            self._warned_long = True
            log.warning(
                "an agent name of %d characters (over %d) is labelled %r in the metrics, and later ones alike: "
                "its start and a hash of the whole",
                len(agent),
                self._max_chars,
                label,
            )
        return label
