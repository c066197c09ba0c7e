"""Per agent and scorer, the newest version against its reference, score by score (docs/versions.md).

A comparison starts when a version is first seen (its *release*, at ``since_ms``) and lasts until a newer version
appears or the new version gets no run for ``forget_after_s``. It holds three confidence sequences, each at
``alpha / 2 / replicas``: the new version's scores; the reference's scores since the release (*concurrent*: a
canary shares its window with the stable version); and the reference's last window before the release (at most
``baseline_max_runs`` scores of the ``baseline_window_s`` before it). Which reference stream it reads is decided
once, from how the runs arrive and never from their scores, so the choice costs no error level:

- **concurrent** as soon as the reference has ``min_runs`` runs since the release (it still receives traffic);
- **before** (a full rollout) when the new version reaches ``4 * min_runs`` runs first, if the window before the
  release holds ``min_runs``;
- until then **pending**: runs are counted, no bounds and no verdict.

Time is the scores' own (the run's end, in milliseconds, as the score record's ``timestamp``), never a clock read
here: the ``compare`` command, fed the score topic's records in time order, reaches the same verdicts as the live
service that produced them.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from sidecar.versions.registry import OTHER, AgentVersions
from sidecar.versions.sequences import StreamSequence, Verdict, difference_bounds, verdict

__all__ = [
    "ROLLOUT_FACTOR",
    "ComparisonSettings",
    "ComparisonView",
    "Mode",
    "Observation",
    "VersionComparisons",
    "VersionView",
]

log = logging.getLogger(__name__)

Mode = Literal["pending", "concurrent", "before"]
# A new version this many times min_runs ahead of the reference's concurrent runs is a rollout, not a canary.
ROLLOUT_FACTOR: Final = 4
# Score ids remembered to count a redelivered run once (at-least-once delivery, a rebalance's redelivery).
_SEEN_IDS: Final = 65_536
# How often (in the scores' time) idle versions are looked for.
_FORGET_EVERY_MS: Final = 10_000


@dataclass(frozen=True, slots=True)
class ComparisonSettings:
    alpha: float = 0.05  # the false-alarm level of what pages, across the replicas (docs/versions.md)
    min_effect: float = 0.05  # the smallest drop (on the 0-1 scale) worth a verdict
    max_versions: int = 5  # label values per agent, "other" included
    min_runs: int = 20
    baseline_window_s: float = 3600.0
    baseline_max_runs: int = 2000
    forget_after_s: float = 3600.0
    replicas: int = 1  # processes that each test a share of the same traffic (pods x workers)
    reference: Mapping[str, str] = field(default_factory=dict)  # agent -> pinned reference version

    @property
    def stream_alpha(self) -> float:
        """Each of the two streams' level: alpha split over the two streams and over the replicas that each
        may declare (any replica's verdict pages)."""
        return self.alpha / 2 / self.replicas


@dataclass(frozen=True, slots=True)
class Observation:
    agent: str
    scorer: str
    version: str
    score: float  # normalised to [0, 1]
    time_ms: int
    higher_is_better: bool = True
    score_id: str | None = None


@dataclass(frozen=True, slots=True)
class VersionView:
    """Every scored run of one version of an agent counted by this process, for one scorer."""

    agent: str
    scorer: str
    version: str  # or OTHER
    runs: int
    mean: float


@dataclass(frozen=True, slots=True)
class ComparisonView:
    agent: str
    scorer: str
    version: str
    reference: str
    since_ms: int  # the new version's release: its first run here
    mode: Mode
    higher_is_better: bool
    runs: int  # the new version's runs in the comparison
    mean: float  # their mean (NaN before any)
    reference_runs: int  # the reference's runs the comparison reads (by mode; concurrent while pending)
    reference_mean: float
    # New minus reference in the better direction (negative: worse), and the confidence sequence's bounds on it;
    # None while pending.
    delta: float | None
    lower: float | None
    upper: float | None
    verdict: Verdict


class _Comparison:
    def __init__(
        self,
        version: str,
        reference: str,
        since_ms: int,
        higher_is_better: bool,
        baseline: list[float],
        settings: ComparisonSettings,
    ) -> None:
        self.version, self.reference, self.since_ms = version, reference, since_ms
        self.higher_is_better = higher_is_better
        self._settings = settings
        level = settings.stream_alpha
        self.new, self.concurrent, self.before = StreamSequence(level), StreamSequence(level), StreamSequence(level)
        self.before.extend(baseline)
        self.mode: Mode = "pending"

    def add(self, version: str, score: float, time_ms: int) -> None:
        if version == self.version:
            self.new.update(score)
        elif version == self.reference and time_ms >= self.since_ms:
            self.concurrent.update(score)
        else:
            return
        if self.mode == "pending":
            runs = self._settings.min_runs
            if self.concurrent.n >= runs:
                self.mode = "concurrent"
            elif self.new.n >= ROLLOUT_FACTOR * runs and self.before.n >= runs:
                self.mode = "before"

    def view(self, agent: str, scorer: str) -> ComparisonView:
        reference = self.before if self.mode == "before" else self.concurrent
        mean, reference_mean = self.new.mean, reference.mean
        delta = lower = upper = None
        decided: Verdict = 0
        if self.mode != "pending":
            sign = 1.0 if self.higher_is_better else -1.0
            delta = sign * (mean - reference_mean)
            lower, upper = difference_bounds(
                (self.new.lower, self.new.upper),
                (reference.lower, reference.upper),
                higher_is_better=self.higher_is_better,
            )
            decided = verdict(lower, upper, self._settings.min_effect)
        return ComparisonView(
            agent,
            scorer,
            self.version,
            self.reference,
            self.since_ms,
            self.mode,
            self.higher_is_better,
            self.new.n,
            mean,
            reference.n,
            reference_mean,
            delta,
            lower,
            upper,
            decided,
        )


class _Baseline:
    """A version's most recent scores with their times, for the comparison of the next release against it."""

    def __init__(self, max_runs: int) -> None:
        self.scores: deque[tuple[int, float]] = deque(maxlen=max_runs)

    def before(self, since_ms: int, window_ms: float) -> list[float]:
        return [score for time_ms, score in self.scores if since_ms - window_ms <= time_ms < since_ms]


@dataclass
class _Counted:
    runs: int = 0
    total: float = 0.0


@dataclass
class _ScorerState:
    higher_is_better: bool
    counted: dict[str, _Counted] = field(default_factory=dict)  # by label
    baselines: dict[str, _Baseline] = field(default_factory=dict)  # the newest's and the pinned reference's
    comparison: _Comparison | None = None


class VersionComparisons:
    """Every agent's versions and, per scorer, the comparison of its newest version; fed one scored run at a time."""

    def __init__(self, settings: ComparisonSettings | None = None) -> None:
        self.settings = settings or ComparisonSettings()
        self._agents: dict[str, AgentVersions] = {}
        self._scorers: dict[str, dict[str, _ScorerState]] = {}  # agent -> scorer -> state
        self._seen_ids: OrderedDict[str, None] = OrderedDict()
        self._now_ms = 0
        self._next_forget_ms = 0
        self._warned: set[str] = set()  # agents whose versions outgrew max_versions (said once each)

    def observe(self, observation: Observation) -> None:
        """One scored run. Raises ``ValueError`` for a score outside [0, 1]."""
        if not (0.0 <= observation.score <= 1.0) or math.isnan(observation.score):
            raise ValueError(f"a score must be normalised to [0, 1], got {observation.score!r}")
        if observation.score_id is not None and not self._first_time(observation.score_id):
            return
        self._now_ms = max(self._now_ms, observation.time_ms)
        if self._now_ms >= self._next_forget_ms:
            self._forget_idle()
        agent = observation.agent
        versions = self._agents.get(agent)
        if versions is None:
            versions = self._agents[agent] = AgentVersions(
                self.settings.max_versions, self.settings.reference.get(agent)
            )
            self._scorers[agent] = {}
        scorers = self._scorers[agent]
        state = scorers.get(observation.scorer)
        joined = state is None
        if state is None:
            state = scorers[observation.scorer] = _ScorerState(observation.higher_is_better)
        seen = versions.see(observation.version, observation.time_ms)
        for name in seen.displaced:
            self._drop(agent, name)
        if seen.displaced and agent not in self._warned:
            self._warned.add(agent)
            log.warning(
                "agent %r has more than %d versions (versions.max_versions): %s and the older ones are labelled "
                "%r in the metrics from now on; many versions in a short time usually mean a build id or a commit in "
                "the version attribute (versions.attributes)",
                agent,
                self.settings.max_versions - 1,
                ", ".join(repr(name) for name in seen.displaced),
                OTHER,
            )
        if seen.released:
            for each in scorers.values():
                self._start(agent, each, observation.version, observation.time_ms)
        elif joined:
            self._join(agent, state)
        counted = state.counted.setdefault(seen.label, _Counted())
        counted.runs += 1
        counted.total += observation.score
        if seen.label == OTHER:
            return
        baseline = state.baselines.get(observation.version)
        if baseline is not None:
            baseline.scores.append((observation.time_ms, observation.score))
        if state.comparison is not None:
            state.comparison.add(observation.version, observation.score, observation.time_ms)

    def _first_time(self, score_id: str) -> bool:
        if score_id in self._seen_ids:
            return False
        self._seen_ids[score_id] = None
        if len(self._seen_ids) > _SEEN_IDS:
            self._seen_ids.popitem(last=False)
        return True

    def _start(self, agent: str, state: _ScorerState, version: str, since_ms: int) -> None:
        """The comparison of ``version``, released at ``since_ms``, for one scorer of ``agent``, against the
        reference's runs before it that the scorer buffered; the release's own buffer starts (it is the reference of
        the next one)."""
        versions = self._agents[agent]
        reference = versions.reference_of(version)
        settings = self.settings
        previous = state.baselines.get(reference) if reference is not None else None
        baseline = previous.before(since_ms, settings.baseline_window_s * 1000) if previous is not None else []
        kept = self._buffered(versions)
        state.baselines = {name: b for name, b in state.baselines.items() if name in kept}
        for name in kept:
            state.baselines.setdefault(name, _Baseline(settings.baseline_max_runs))
        state.comparison = (
            None
            if reference is None
            else _Comparison(version, reference, since_ms, state.higher_is_better, baseline, settings)
        )

    def _join(self, agent: str, state: _ScorerState) -> None:
        """A scorer's first run of an agent whose versions are known: it buffers the newest (and the pinned
        reference) from now on, and joins the newest's comparison when the other scorers compare it (with the
        reference's concurrent runs only: it buffered none before the release)."""
        versions = self._agents[agent]
        for name in self._buffered(versions):
            state.baselines.setdefault(name, _Baseline(self.settings.baseline_max_runs))
        newest = versions.newest
        if newest is None:
            return
        reference = versions.reference_of(newest.name)
        others = self._scorers[agent].values()
        if reference is not None and any(
            s.comparison is not None and s.comparison.version == newest.name for s in others
        ):
            state.comparison = _Comparison(
                newest.name, reference, newest.first_seen_ms, state.higher_is_better, [], self.settings
            )

    @staticmethod
    def _buffered(versions: AgentVersions) -> set[str]:
        """The versions whose recent runs are kept: the newest (the reference of the next release) and the pinned."""
        newest = versions.newest
        return {name for name in (newest.name if newest else None, versions.pinned) if name is not None}

    def _drop(self, agent: str, version: str) -> None:
        for state in self._scorers[agent].values():
            state.counted.pop(version, None)
            state.baselines.pop(version, None)
            if state.comparison is not None and version in (state.comparison.version, state.comparison.reference):
                state.comparison = None

    def _forget_idle(self) -> None:
        self._next_forget_ms = self._now_ms + _FORGET_EVERY_MS
        before_ms = self._now_ms - int(self.settings.forget_after_s * 1000)
        for agent, versions in self._agents.items():
            newest = versions.newest
            # The reference of a live comparison stays, however quiet: after a full rollout it gets no runs at all.
            keep = set()
            if newest is not None and newest.last_seen_ms >= before_ms:
                keep.add(newest.name)
                if (reference := versions.reference_of(newest.name)) is not None:
                    keep.add(reference)
            for name in versions.forget_idle(before_ms, keep):
                self._drop(agent, name)

    def versions(self) -> list[VersionView]:
        return [
            VersionView(agent, scorer, label, counted.runs, counted.total / counted.runs)
            for agent, scorers in self._scorers.items()
            for scorer, state in scorers.items()
            for label, counted in state.counted.items()
            if counted.runs
        ]

    def comparisons(self) -> list[ComparisonView]:
        return [
            state.comparison.view(agent, scorer)
            for agent, scorers in self._scorers.items()
            for scorer, state in scorers.items()
            if state.comparison is not None
        ]
