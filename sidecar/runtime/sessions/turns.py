"""Stage 1 of conversations: a ready trace's turns, published to the internal topic; and which runs a closed
window of turns makes (stage 2's, and ``preview``'s and ``eval``'s from records).

The whole-trace stage hands each ready trace here (a follower of ``runtime.stages.trace``): its top-level agent runs
that name a conversation become turns (``sidecar.conventions.session_turns``) and go to the topic through the
checkpointed publisher, as one more part of the trace's claim: the trace's records are committed only after the
broker acknowledged its turns. Which turns a session scorer reads is its targets' business (agents, services,
where: the turn lists the scorers that admit its agent span); its sampling is by conversation id, so a
conversation every session scorer samples out is not published at all.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.conventions.selection import Selection, classify, sampled_in
from sidecar.conventions.session_runs import session_run
from sidecar.conventions.session_turns import TurnSummary, turns_of
from sidecar.conventions.spans import admit
from sidecar.conventions.trace_runs import TraceSpan
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ScorerRunRequest, SessionCloseReason
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.sessions.limits import SessionLimits
from sidecar.runtime.sessions.topic import TurnTopic

__all__ = ["ConversationRuns", "TurnPublishing", "Turns", "conversation_runs", "samples_in"]


def samples_in(rate: float, conversation_id: str) -> bool:
    """Whether a scorer sampling ``rate`` of the conversations scores this one (the same on every replica)."""
    return sampled_in(rate, conversation_id.encode())


@dataclass(slots=True)
class ConversationRuns:
    """The runs of a closed window: one per session scorer with a turn of it, and the scorers that sample the
    conversation out."""

    runs: list[tuple[ConfiguredScorer, ScorerRunRequest]] = field(default_factory=list)
    sampled_out: list[str] = field(default_factory=list)


def conversation_runs(
    scorers: Sequence[ConfiguredScorer], conversation: str, turns: Sequence[TurnSummary], reason: SessionCloseReason
) -> ConversationRuns:
    """What a closed window starts: for each scorer, the window's turns that it admits, as one run."""
    out = ConversationRuns()
    for configured in scorers:
        scorer_id = configured.scorer.id
        mine = [turn for turn in turns if scorer_id in turn.scorers]
        if not mine:
            continue
        if not samples_in(configured.selection.sample_rate, conversation):
            out.sampled_out.append(scorer_id)
            continue
        out.runs.append((configured, session_run(conversation, mine, reason)))
    return out


class Turns:
    """Which turns a ready trace makes for the session scorers (pure: the live stage 1 and the offline assembly)."""

    def __init__(self, scorers: Sequence[ConfiguredScorer], limits: SessionLimits, observer: ServiceObserver) -> None:
        self.limits = limits
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
        own = classify(agent.span.attributes).internal
        return tuple(
            scorer_id
            for scorer_id, selection, _ in self._targets
            if admit(agent.span, own_span=own, service=agent.service, selection=selection).verdict == "ok"
        )

    def _sampled_in(self, turn: TurnSummary) -> bool:
        return any(
            samples_in(rate, turn.conversation_id) for scorer_id, _, rate in self._targets if scorer_id in turn.scorers
        )


class TurnPublishing(Turns):
    """Stage 1: a follower of the whole-trace stage, publishing each ready trace's turns."""

    def __init__(
        self,
        scorers: Sequence[ConfiguredScorer],
        limits: SessionLimits,
        topic: TurnTopic,
        observer: ServiceObserver,
    ) -> None:
        super().__init__(scorers, limits, observer)
        self._topic = topic

    def follow(
        self, spans: Sequence[TraceSpan], runs: Sequence[ScorerRunRequest], *, complete: bool
    ) -> Coroutine[Any, Any, None] | None:
        turns = self.turns(spans, runs, complete=complete)
        return self.publish(turns) if turns else None

    async def publish(self, turns: Sequence[TurnSummary]) -> None:
        """Hand the turns to the topic's publisher (waits only for room); the checkpoint confirms them."""
        for turn in turns:
            ended_ms = turn.end_time_unix_nano // 1_000_000
            await self._topic.publish(turn.conversation_id, turn.key, turn.encode(), ended_ms or None)
        self._observer.session_turns("published", len(turns))
