"""Stage 1 of conversations: a ready trace's turns, published to the internal topic.

The whole-trace stage hands each ready trace here (``runtime.trace_scope``): its top-level agent runs that name a
conversation become turns (``sidecar.conventions.session_turns``) and go to the topic through the checkpointed
publisher, as one more part of the trace's claim: the trace's records are committed only after the broker
acknowledged its turns. Which turns a session scorer reads is its targets' business (agents, services, where:
the turn lists the scorers that admit its agent span); its sampling is by conversation id, so a conversation
every session scorer samples out is not published at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.conventions.selection import Selection, classify, sampled_in
from sidecar.conventions.session_turns import TurnSummary, turns_of
from sidecar.conventions.spans import admit
from sidecar.conventions.trace_runs import TraceSpan
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ScorerRunRequest
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.sessions.limits import SessionLimits
from sidecar.runtime.sessions.topic import TurnTopic

__all__ = ["TurnPublishing", "samples_in"]


def samples_in(rate: float, conversation_id: str) -> bool:
    """Whether a scorer sampling ``rate`` of the conversations scores this one (the same on every replica)."""
    return sampled_in(rate, conversation_id.encode())


class TurnPublishing:
    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        limits: SessionLimits,
        topic: TurnTopic,
        observer: ServiceObserver,
    ) -> None:
        self.limits = limits
        self._topic = topic
        self._observer = observer
        # Every agent span can make a turn: each scorer's own targets are applied per turn (``admitted``).
        self.selection = Selection(
            kinds=frozenset({"agent"}), max_input_bytes=max(s.selection.max_input_bytes for s in scorers)
        )
        self._targets = tuple(
            (s.scorer.id, s.selection.model_copy(update={"sample_rate": 1.0}), s.selection.sample_rate) for s in scorers
        )

    def turns(
        self, spans: Sequence[TraceSpan], runs: Sequence[ScorerRunRequest], *, complete: bool
    ) -> list[TurnSummary]:
        """The turns of a ready trace (``runs``: its agent runs under :attr:`selection`) worth publishing."""
        found = turns_of(
            spans, runs, id_attributes=self.limits.id_attributes, caps=self.limits.caps, admitted=self._admitted,
            complete=complete,
        )  # fmt: skip
        if found.no_conversation:
            self._observer.session_turns("no_conversation", found.no_conversation)
        kept = [turn for turn in found.turns if self._sampled_in(turn)]
        if len(kept) < len(found.turns):
            self._observer.session_turns("sampled_out", len(found.turns) - len(kept))
        return kept

    def _admitted(self, agent: TraceSpan) -> tuple[str, ...]:
        _, own = classify(agent.span.attributes)
        return tuple(
            scorer_id
            for scorer_id, selection, _ in self._targets
            if admit(agent.span, own_span=own, service=agent.service, selection=selection).verdict == "ok"
        )

    def _sampled_in(self, turn: TurnSummary) -> bool:
        return any(
            samples_in(rate, turn.conversation_id) for scorer_id, _, rate in self._targets if scorer_id in turn.scorers
        )

    async def publish(self, turns: Sequence[TurnSummary]) -> None:
        """Hand the turns to the topic's publisher (waits only for room); the checkpoint confirms them."""
        for turn in turns:
            ended_ms = turn.end_time_unix_nano // 1_000_000
            await self._topic.publish(turn.conversation_id, turn.key, turn.encode(), ended_ms or None)
        self._observer.session_turns("published", len(turns))
