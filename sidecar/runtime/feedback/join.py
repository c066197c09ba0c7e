"""The join of a person's verdict with the sidecar's own score of the same subject, whichever comes first: pure (no
I/O, no clock), so the live stage and the tests drive the same state.

The state is kept per *lane*: partition ``p`` of the feedback topic and partition ``p`` of the score topic, both keyed
by trace id (a conversation's by its id), so the two halves of a pair meet on one lane, owned by one member of the
stage's group. Every change the live stage must keep is returned as a write for the lane's partition of the
compacted state topic (``f/<feedback id>``: a feedback waiting for its score; ``s/<score id>``: a score, with the
feedback ids already paired with it; ``w/<scorer>``: the lane's last pairs, which the gauges describe; a ``None``
value removes the key), and :meth:`Join.restore` reads them back, so a lane rebuilt on another member after a
rebalance or a crash holds what the old one held.

Subjects are matched as score ids are derived (``ScorerRunRequest.subject``): a span scorer's and a trace scorer's
score by trace id and span id (a feedback without a span id meets the trace's first score of that scorer), a
conversation's by its id and any of its window's turns' trace ids. A redelivered feedback or score changes nothing:
a feedback is held under its id, a score remembers the feedback it was paired with.
"""

from __future__ import annotations

import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic_core

from sidecar.runtime.feedback.limits import FeedbackLimits
from sidecar.runtime.feedback.records import Feedback, ScoreSeen, feedback_of_json, score_of_json
from sidecar.scoring.agreement import AgreementStats, Comparison, IncomparableVerdict, agreement, compare

__all__ = ["Effects", "Join", "JoinedScorer", "PairMade", "WindowEntry", "pair_id_of"]

_PAIR_NAMESPACE = uuid.UUID("2b7c6f0e-5d8a-5e3b-9a41-7f0c3d2e1b64")
# What a score remembers of the feedback paired with it (a subject rarely gets more than a few labels).
_PAIRED_KEPT = 64
# Unparsable state records are our own bug or another writer's: skipped, never fatal.
_FEEDBACK, _SCORE, _WINDOW = "f/", "s/", "w/"


def pair_id_of(score_id: str, feedback_id: str) -> str:
    """The pair's id: the same for the same score and feedback in every process and on every redelivery."""
    return str(uuid.uuid5(_PAIR_NAMESPACE, f"{score_id}:{feedback_id}"))


@dataclass(frozen=True, slots=True)
class JoinedScorer:
    """What the join knows of a configured scorer."""

    scorer_id: str
    # It scores conversations: its subject is a conversation's window (its stage's facts say so).
    conversations: bool = False
    scale: float = 1.0
    fingerprint: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class WindowEntry:
    """One pair as a window keeps it."""

    pair_id: str
    at_ms: int
    comparison: Comparison

    def to_json(self) -> list[Any]:
        c = self.comparison
        return [self.pair_id, self.at_ms, c.kind, c.judge, c.human, c.agreed]

    @classmethod
    def of_json(cls, data: list[Any]) -> WindowEntry:
        pair_id, at_ms, kind, judge, human, agreed = data
        return cls(str(pair_id), int(at_ms), Comparison(kind, judge, human, bool(agreed)))


@dataclass(frozen=True, slots=True)
class PairMade:
    """A feedback met its score."""

    pair_id: str
    lane: int
    score: ScoreSeen
    feedback: Feedback
    scorer_id: str
    comparison: Comparison
    at_ms: int

    @property
    def partition_key(self) -> bytes:
        """Where the pair's record goes: the subject's trace (a conversation's id), as the score record is keyed."""
        return (self.score.conversation_id or self.score.trace_id).encode()


@dataclass(slots=True)
class Effects:
    """What a step of the join asks of the live stage."""

    writes: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)  # (lane, key, value or None)
    pairs: list[PairMade] = field(default_factory=list)
    unmatched: Counter[str] = field(default_factory=Counter)  # scorer → feedback that expired without its score
    rejected: list[tuple[Feedback, str]] = field(default_factory=list)  # feedback that cannot be joined, and why
    duplicates: int = 0  # feedback held or paired before (a redelivery)
    held: bool = False  # the feedback or score now waits for its other half

    def extend(self, other: Effects) -> None:
        self.writes.extend(other.writes)
        self.pairs.extend(other.pairs)
        self.unmatched.update(other.unmatched)
        self.rejected.extend(other.rejected)
        self.duplicates += other.duplicates


@dataclass(slots=True)
class _HeldFeedback:
    feedback: Feedback
    scorer_id: str
    key: str
    held_at_ms: int

    def to_json(self) -> bytes:
        return pydantic_core.to_json(
            {"feedback": self.feedback.to_json(), "scorer": self.scorer_id, "heldAt": self.held_at_ms}
        )


@dataclass(slots=True)
class _HeldScore:
    score: ScoreSeen
    keys: tuple[str, ...]
    held_at_ms: int
    paired: list[str] = field(default_factory=list)

    def to_json(self) -> bytes:
        return pydantic_core.to_json({"score": self.score.to_json(), "heldAt": self.held_at_ms, "paired": self.paired})


@dataclass(slots=True)
class _Lane:
    feedback: dict[str, _HeldFeedback] = field(default_factory=dict)
    waiting: dict[str, list[str]] = field(default_factory=dict)  # join key → feedback ids
    scores: dict[str, _HeldScore] = field(default_factory=dict)
    score_of: dict[str, str] = field(default_factory=dict)  # join key → score id
    windows: dict[str, deque[WindowEntry]] = field(default_factory=dict)


def _score_keys(score: ScoreSeen) -> tuple[str, ...]:
    scorer = score.scorer_id
    if score.conversation_id is not None:
        return tuple(f"c|{scorer}|{score.conversation_id}|{turn}" for turn in score.turn_trace_ids)
    return f"s|{scorer}|{score.trace_id}|{score.span_id}", f"t|{scorer}|{score.trace_id}"


def _feedback_key(scorer: JoinedScorer, feedback: Feedback) -> str:
    if scorer.conversations:
        return f"c|{scorer.scorer_id}|{feedback.conversation_id}|{feedback.trace_id}"
    if feedback.span_id is not None:
        return f"s|{scorer.scorer_id}|{feedback.trace_id}|{feedback.span_id}"
    return f"t|{scorer.scorer_id}|{feedback.trace_id}"


class Join:
    """Held feedback and scores per lane, their pairs, and each lane's window of pairs per scorer."""

    def __init__(self, limits: FeedbackLimits, scorers: Mapping[str, JoinedScorer]) -> None:
        self.limits = limits
        self.scorers = dict(scorers)
        self._lanes: dict[int, _Lane] = {}
        # Everything held, oldest first: (lane, kind, id) → when it was first held (ms).
        self._age: OrderedDict[tuple[int, str, str], int] = OrderedDict()
        self._hold_ms = int(limits.hold_s * 1000)
        self.changed: set[str] = set()  # scorers whose windows changed since :meth:`stats` was asked

    # -- lanes ---------------------------------------------------------------------------------------------
    @property
    def lanes(self) -> frozenset[int]:
        return frozenset(self._lanes)

    @property
    def held(self) -> int:
        return len(self._age)

    def held_of(self, lane: int) -> tuple[int, int]:
        """Feedback and scores held on ``lane``."""
        found = self._lanes.get(lane)
        return (len(found.feedback), len(found.scores)) if found is not None else (0, 0)

    def open(self, lane: int) -> None:
        """A lane assigned, empty until its state is restored."""
        self.drop(lane)
        self._lanes[lane] = _Lane()

    def drop(self, lane: int) -> None:
        """A lane revoked: its state goes to the new owner, which restores it."""
        found = self._lanes.pop(lane, None)
        if found is None:
            return
        for key in [key for key in self._age if key[0] == lane]:
            del self._age[key]
        self.changed.update(found.windows)

    def restore(self, lane: int, key: bytes | None, value: bytes | None) -> bool:
        """One record of the lane's state partition, in order (the latest value of a key wins, ``None`` removes it);
        ``False`` when the record is not one the join wrote."""
        target = self._lanes.setdefault(lane, _Lane())
        try:
            text = (key or b"").decode()
            body: Any = pydantic_core.from_json(value) if value is not None else None
            if text.startswith(_FEEDBACK):
                self._forget_feedback(lane, target, text[len(_FEEDBACK) :])
                if body is not None:
                    held = _HeldFeedback(
                        feedback_of_json(body["feedback"]), str(body["scorer"]), "", int(body["heldAt"])
                    )
                    scorer = self.scorers.get(held.scorer_id)
                    if scorer is None:
                        return True  # a scorer no longer configured: its feedback is dropped
                    held.key = _feedback_key(scorer, held.feedback)
                    self._hold_feedback(lane, target, held)
            elif text.startswith(_SCORE):
                self._forget_score(lane, target, text[len(_SCORE) :])
                if body is not None:
                    score = score_of_json(body["score"])
                    held_score = _HeldScore(score, _score_keys(score), int(body["heldAt"]), list(body["paired"]))
                    self._hold_score(lane, target, held_score)
            elif text.startswith(_WINDOW):
                scorer_id = text[len(_WINDOW) :]
                entries = [WindowEntry.of_json(item) for item in (body or {}).get("pairs", ())]
                target.windows[scorer_id] = deque(entries, maxlen=self.limits.window)
                self.changed.add(scorer_id)
            else:
                return False
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return False
        return True

    def restored(self) -> None:
        """After a restore: what is held, oldest first again (lanes restore one after another)."""
        self._age = OrderedDict(sorted(self._age.items(), key=lambda item: item[1]))

    # -- the two halves ------------------------------------------------------------------------------------
    def feedback(self, lane: int, feedback: Feedback, now_ms: int, at_ms: int | None = None) -> Effects:
        """A person's verdict, written at ``at_ms`` (its record's time; ``None``: now): paired at once when its score
        is held, else held until it comes (one already ``hold_s`` old is counted unmatched at once)."""
        effects = Effects()
        scorer_id = self.limits.scorer_for(feedback.name)
        scorer = self.scorers.get(scorer_id)
        if scorer is None:
            known = ", ".join(sorted(self.scorers)) or "none"
            effects.rejected.append(
                (feedback, f"name {feedback.name!r} is no scorer's (scorers: {known}; feedback.names maps others)")
            )
            return effects
        if scorer.conversations and feedback.conversation_id is None:
            effects.rejected.append(
                (feedback, f"scorer {scorer_id!r} scores conversations: its feedback names a conversationId")
            )
            return effects
        target = self._lanes.setdefault(lane, _Lane())
        key = _feedback_key(scorer, feedback)
        fid = feedback.feedback_id
        score_id = target.score_of.get(key)
        held_score = target.scores.get(score_id) if score_id is not None else None
        if fid in target.feedback or (held_score is not None and fid in held_score.paired):
            effects.duplicates += 1
            return effects
        if held_score is not None:
            self._pair(lane, target, held_score, feedback, scorer, now_ms, effects)
            effects.writes.append((lane, (_SCORE + held_score.score.score_id).encode(), held_score.to_json()))
            return effects
        held_at = now_ms if at_ms is None else at_ms
        if held_at + self._hold_ms <= now_ms:
            effects.unmatched[scorer_id] += 1
            return effects
        held = _HeldFeedback(feedback, scorer_id, key, held_at)
        self._hold_feedback(lane, target, held)
        effects.writes.append((lane, (_FEEDBACK + fid).encode(), held.to_json()))
        effects.held = True
        self._bound(effects)
        return effects

    def score(self, lane: int, score: ScoreSeen, now_ms: int, at_ms: int | None = None) -> Effects:
        """One of the sidecar's scores, written at ``at_ms`` (its record's time; ``None``: now): paired with every
        feedback that waits for it, then held for later ones (unless it is ``hold_s`` old already)."""
        effects = Effects()
        scorer = self.scorers.get(score.scorer_id)
        target = self._lanes.setdefault(lane, _Lane())
        if scorer is None or score.score_id in target.scores:
            return effects  # a scorer the join does not follow, or a score redelivered
        held = _HeldScore(score, _score_keys(score), now_ms if at_ms is None else at_ms)
        for key in held.keys:
            for fid in target.waiting.get(key, [])[:]:
                waiting = self._forget_feedback(lane, target, fid)
                assert waiting is not None
                effects.writes.append((lane, (_FEEDBACK + fid).encode(), None))
                self._pair(lane, target, held, waiting.feedback, scorer, now_ms, effects)
        if held.held_at_ms + self._hold_ms <= now_ms and not held.paired:
            return effects  # too old to wait for anyone (a new group reading the topic's past)
        self._hold_score(lane, target, held)
        effects.writes.append((lane, (_SCORE + score.score_id).encode(), held.to_json()))
        effects.held = True
        self._bound(effects)
        return effects

    def _pair(
        self,
        lane: int,
        target: _Lane,
        held: _HeldScore,
        feedback: Feedback,
        scorer: JoinedScorer,
        now_ms: int,
        effects: Effects,
    ) -> None:
        score = held.score
        try:
            comparison = compare(
                score.score, score.label, feedback.value, scale=scorer.scale, agree_within=self.limits.agree_within
            )
        except IncomparableVerdict as exc:
            effects.rejected.append((feedback, str(exc)))
            return
        held.paired.append(feedback.feedback_id)
        del held.paired[:-_PAIRED_KEPT]
        pair = PairMade(
            pair_id_of(score.score_id, feedback.feedback_id),
            lane,
            score,
            feedback,
            scorer.scorer_id,
            comparison,
            now_ms,
        )
        effects.pairs.append(pair)
        window = target.windows.setdefault(scorer.scorer_id, deque(maxlen=self.limits.window))
        window.append(WindowEntry(pair.pair_id, now_ms, comparison))
        self.changed.add(scorer.scorer_id)
        body = pydantic_core.to_json({"pairs": [entry.to_json() for entry in window]})
        effects.writes.append((lane, (_WINDOW + scorer.scorer_id).encode(), body))

    # -- what is held --------------------------------------------------------------------------------------
    def _hold_feedback(self, lane: int, target: _Lane, held: _HeldFeedback) -> None:
        fid = held.feedback.feedback_id
        target.feedback[fid] = held
        target.waiting.setdefault(held.key, []).append(fid)
        self._age[(lane, "f", fid)] = held.held_at_ms

    def _forget_feedback(self, lane: int, target: _Lane, fid: str) -> _HeldFeedback | None:
        held = target.feedback.pop(fid, None)
        if held is not None:
            waiting = target.waiting.get(held.key, [])
            if fid in waiting:
                waiting.remove(fid)
            if not waiting:
                target.waiting.pop(held.key, None)
        self._age.pop((lane, "f", fid), None)
        return held

    def _hold_score(self, lane: int, target: _Lane, held: _HeldScore) -> None:
        score_id = held.score.score_id
        target.scores[score_id] = held
        for key in held.keys:
            target.score_of.setdefault(key, score_id)  # the first score of a subject meets its feedback
        self._age[(lane, "s", score_id)] = held.held_at_ms

    def _forget_score(self, lane: int, target: _Lane, score_id: str) -> None:
        held = target.scores.pop(score_id, None)
        if held is not None:
            for key in held.keys:
                if target.score_of.get(key) == score_id:
                    del target.score_of[key]
                    later = next((other for other in target.scores.values() if key in other.keys), None)
                    if later is not None:
                        target.score_of[key] = later.score.score_id
        self._age.pop((lane, "s", score_id), None)

    def _bound(self, effects: Effects) -> None:
        """Past ``max_held``: the oldest goes first (a feedback counted unmatched)."""
        while len(self._age) > self.limits.max_held:
            (lane, kind, held_id), _ = next(iter(self._age.items()))
            effects.extend(self._let_go(lane, kind, held_id))

    def expire(self, now_ms: int) -> Effects:
        """What waited ``hold_s``: a feedback whose score never came is counted unmatched; a score no feedback
        named is let go."""
        effects = Effects()
        while self._age:
            (lane, kind, held_id), held_at = next(iter(self._age.items()))
            if held_at + self._hold_ms > now_ms:
                break
            effects.extend(self._let_go(lane, kind, held_id))
        return effects

    def _let_go(self, lane: int, kind: str, held_id: str) -> Effects:
        effects = Effects()
        target = self._lanes.get(lane)
        if target is None:
            self._age.pop((lane, kind, held_id), None)
            return effects
        if kind == "f":
            held = self._forget_feedback(lane, target, held_id)
            if held is not None:
                effects.unmatched[held.scorer_id] += 1
            effects.writes.append((lane, (_FEEDBACK + held_id).encode(), None))
        else:
            self._forget_score(lane, target, held_id)
            effects.writes.append((lane, (_SCORE + held_id).encode(), None))
        return effects

    # -- the windows ---------------------------------------------------------------------------------------
    def window(self, scorer_id: str) -> list[WindowEntry]:
        """The last ``window`` pairs of ``scorer_id`` over every lane held, oldest first (each pair once)."""
        entries: dict[str, WindowEntry] = {}
        for lane in self._lanes.values():
            for entry in lane.windows.get(scorer_id, ()):
                entries[entry.pair_id] = entry
        ordered = sorted(entries.values(), key=lambda entry: (entry.at_ms, entry.pair_id))
        return ordered[-self.limits.window :]

    def stats(self) -> Iterator[tuple[str, AgreementStats]]:
        """The statistics of each scorer whose window changed since last asked."""
        changed, self.changed = self.changed, set()
        for scorer_id in sorted(changed):
            yield scorer_id, agreement(entry.comparison for entry in self.window(scorer_id))
