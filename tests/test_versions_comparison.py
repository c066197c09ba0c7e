"""The comparison of an agent's newest version against its reference (sidecar.versions.comparison): canary and full
rollout, pinned references, the better direction, bounded labels, redeliveries and versions that go quiet."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.versions.comparison import ComparisonSettings, ComparisonView, Observation, VersionComparisons
from sidecar.versions.registry import OTHER
from sidecar.versions.sequences import StreamSequence, difference_bounds


def beta(rng: random.Random, mean: float, concentration: float = 10.0) -> float:
    return rng.betavariate(mean * concentration, (1 - mean) * concentration)


class Traffic:
    """Scored runs of one agent, one per 100 ms, fed to a comparison."""

    def __init__(self, comparisons: VersionComparisons, *, agent: str = "support-bot", seed: int = 1) -> None:
        self.comparisons = comparisons
        self.agent = agent
        self.rng = random.Random(seed)
        self.time_ms = 1_000_000

    def run(self, version: str, score: float, scorer: str = "helpfulness", *, higher: bool = True) -> None:
        self.time_ms += 100
        self.comparisons.observe(Observation(self.agent, scorer, version, score, self.time_ms, higher))

    def runs(self, n: int, means: dict[str, float], share: dict[str, float], scorer: str = "helpfulness") -> None:
        versions = list(share)
        for _ in range(n):
            version = self.rng.choices(versions, weights=[share[v] for v in versions])[0]
            self.run(version, beta(self.rng, means[version]), scorer)


def the_comparison(comparisons: VersionComparisons, scorer: str = "helpfulness") -> ComparisonView:
    found = [c for c in comparisons.comparisons() if c.scorer == scorer]
    assert len(found) == 1, found
    return found[0]


def test_a_worse_canary_is_declared_a_regression_against_the_stable_version() -> None:
    comparisons = VersionComparisons()
    traffic = Traffic(comparisons)
    traffic.runs(300, {"v1": 0.8}, {"v1": 1})
    traffic.run("v2", 0.65)
    release_ms = traffic.time_ms
    traffic.runs(2999, {"v1": 0.8, "v2": 0.65}, {"v1": 0.5, "v2": 0.5})
    view = the_comparison(comparisons)
    assert (view.version, view.reference, view.mode, view.since_ms) == ("v2", "v1", "concurrent", release_ms)
    assert view.verdict == -1
    assert view.lower is not None and view.upper is not None and view.delta is not None
    assert view.lower < view.delta < view.upper < -0.05
    assert view.runs + view.reference_runs == 3000  # the concurrent window only: v1's 300 runs before are not read
    assert view.delta == pytest.approx(view.mean - view.reference_mean)


def test_a_canary_equal_to_the_stable_version_stays_undecided() -> None:
    comparisons = VersionComparisons()
    traffic = Traffic(comparisons, seed=2)
    traffic.runs(200, {"v1": 0.7}, {"v1": 1})
    traffic.runs(4000, {"v1": 0.7, "v2": 0.7}, {"v1": 0.95, "v2": 0.05})
    view = the_comparison(comparisons)
    assert view.mode == "concurrent" and view.verdict == 0
    assert view.lower is not None and view.upper is not None and view.lower < 0 < view.upper


def test_a_full_rollout_is_compared_with_the_reference_last_window_before_it() -> None:
    comparisons = VersionComparisons(ComparisonSettings(baseline_window_s=60, baseline_max_runs=500))
    traffic = Traffic(comparisons, seed=3)
    traffic.runs(2000, {"v1": 0.3}, {"v1": 1})  # 200 s of v1: only its last 60 s (600 runs, 500 kept) are read
    traffic.runs(1000, {"v1": 0.9}, {"v1": 1})
    traffic.runs(3000, {"v2": 0.75}, {"v2": 1})
    view = the_comparison(comparisons)
    assert view.mode == "before"
    assert view.reference_runs == 500
    assert view.reference_mean == pytest.approx(0.9, abs=0.02)  # the last window, not the older 0.3
    assert view.verdict == -1


def test_a_comparison_is_pending_until_the_runs_say_canary_or_rollout() -> None:
    comparisons = VersionComparisons(ComparisonSettings(min_runs=20))
    traffic = Traffic(comparisons)
    traffic.runs(100, {"v1": 0.8}, {"v1": 1})
    for _ in range(79):
        traffic.run("v2", 0.1)
    pending = the_comparison(comparisons)
    assert (pending.mode, pending.delta, pending.lower, pending.upper, pending.verdict) == (
        "pending",
        None,
        None,
        None,
        0,
    )
    assert pending.runs == 79 and pending.reference_runs == 0
    traffic.run("v2", 0.1)  # the 80th: four times min_runs, and v1 got none since the release
    assert the_comparison(comparisons).mode == "before"


def test_a_pinned_reference_is_the_reference_whatever_arrives_first() -> None:
    # A process that starts during a canary sees v2 first: without a pin, v1 would look like the newer release.
    comparisons = VersionComparisons(ComparisonSettings(reference={"support-bot": "v1"}))
    traffic = Traffic(comparisons, seed=4)
    traffic.run("v2", 0.6)
    traffic.runs(2000, {"v1": 0.8, "v2": 0.6}, {"v1": 0.5, "v2": 0.5})
    view = the_comparison(comparisons)
    assert (view.version, view.reference, view.verdict) == ("v2", "v1", -1)
    # Unpinned, the order of first sight decides.
    unpinned = VersionComparisons()
    traffic = Traffic(unpinned, seed=4)
    traffic.run("v2", 0.6)
    traffic.runs(2000, {"v1": 0.8, "v2": 0.6}, {"v1": 0.5, "v2": 0.5})
    view = the_comparison(unpinned)
    assert (view.version, view.reference, view.verdict) == ("v1", "v2", 1)


def test_lower_is_better_turns_a_rise_into_a_regression() -> None:
    comparisons = VersionComparisons()
    traffic = Traffic(comparisons, seed=5)
    for _ in range(100):
        traffic.run("v1", beta(traffic.rng, 0.1), "toxicity", higher=False)
    for _ in range(2000):
        version = traffic.rng.choice(["v1", "v2"])
        traffic.run(version, beta(traffic.rng, 0.1 if version == "v1" else 0.3), "toxicity", higher=False)
    view = the_comparison(comparisons, "toxicity")
    assert not view.higher_is_better
    assert view.delta is not None and view.delta == pytest.approx(view.reference_mean - view.mean)
    assert view.verdict == -1


def test_the_bounds_are_those_of_the_two_sequences_fed_the_same_streams() -> None:
    """What the simulation measures is what the service computes: the comparison's bounds are the union of the
    two streams' sequences at alpha / 2 (and / replicas)."""
    settings = ComparisonSettings(replicas=3)
    comparisons = VersionComparisons(settings)
    traffic = Traffic(comparisons, seed=6)
    streams: dict[str, list[float]] = {"v1": [], "v2": []}
    traffic.run("v1", 0.5)  # before the release: not in the comparison
    for _ in range(800):
        version = traffic.rng.choice(["v1", "v2"])
        score = beta(traffic.rng, 0.7)
        traffic.run(version, score)
        if version == "v2" or streams["v2"]:
            streams[version].append(score)
    sequences = {v: StreamSequence(settings.alpha / 6) for v in streams}
    for version, scores in streams.items():
        sequences[version].extend(scores)
    lower, upper = difference_bounds(
        (sequences["v2"].lower, sequences["v2"].upper), (sequences["v1"].lower, sequences["v1"].upper)
    )
    view = the_comparison(comparisons)
    assert (view.lower, view.upper) == (pytest.approx(lower), pytest.approx(upper))


def test_each_scorer_has_its_own_comparison_and_a_late_scorer_joins_the_release() -> None:
    comparisons = VersionComparisons()
    traffic = Traffic(comparisons, seed=7)
    traffic.runs(200, {"v1": 0.8}, {"v1": 1}, scorer="helpfulness")
    traffic.runs(2000, {"v1": 0.8, "v2": 0.6}, {"v1": 0.5, "v2": 0.5}, scorer="helpfulness")
    traffic.runs(2000, {"v1": 0.7, "v2": 0.7}, {"v1": 0.5, "v2": 0.5}, scorer="tone")  # first seen after v2's release
    assert the_comparison(comparisons, "helpfulness").verdict == -1
    tone = the_comparison(comparisons, "tone")
    assert (tone.version, tone.reference, tone.mode, tone.verdict) == ("v2", "v1", "concurrent", 0)


def test_a_redelivered_run_counts_once() -> None:
    comparisons = VersionComparisons()
    for _ in range(3):
        comparisons.observe(Observation("a", "s", "v1", 0.5, 1000, score_id="same"))
    assert [(v.version, v.runs) for v in comparisons.versions()] == [("v1", 1)]


def test_a_third_release_is_compared_with_the_second() -> None:
    comparisons = VersionComparisons()
    traffic = Traffic(comparisons, seed=8)
    traffic.runs(300, {"v1": 0.5}, {"v1": 1})
    traffic.runs(300, {"v2": 0.8}, {"v2": 1})
    traffic.runs(600, {"v2": 0.8, "v3": 0.8}, {"v2": 0.5, "v3": 0.5})
    view = the_comparison(comparisons)
    assert (view.version, view.reference, view.mode) == ("v3", "v2", "concurrent")
    assert view.reference_mean == pytest.approx(0.8, abs=0.03)


def test_a_quiet_new_version_ends_its_comparison_and_a_rolled_back_canary_resolves() -> None:
    comparisons = VersionComparisons(ComparisonSettings(forget_after_s=60))
    traffic = Traffic(comparisons, seed=9)
    traffic.runs(200, {"v1": 0.8}, {"v1": 1})
    traffic.runs(2000, {"v1": 0.8, "v2": 0.5}, {"v1": 0.5, "v2": 0.5})
    assert the_comparison(comparisons).verdict == -1
    traffic.runs(1000, {"v1": 0.8}, {"v1": 1})  # rolled back: 100 s of v1 only
    assert comparisons.comparisons() == []
    assert {v.version for v in comparisons.versions()} == {"v1"}
    # v2 again, later: a release like any other (it was forgotten, not displaced).
    traffic.runs(200, {"v1": 0.8, "v2": 0.8}, {"v1": 0.5, "v2": 0.5})
    assert the_comparison(comparisons).version == "v2"


def test_a_full_rollout_keeps_its_quiet_reference() -> None:
    comparisons = VersionComparisons(ComparisonSettings(forget_after_s=60))
    traffic = Traffic(comparisons, seed=10)
    traffic.runs(500, {"v1": 0.8}, {"v1": 1})
    traffic.runs(3000, {"v2": 0.6}, {"v2": 1})  # 300 s without a run of v1
    view = the_comparison(comparisons)
    assert (view.reference, view.mode, view.verdict) == ("v1", "before", -1)


@settings(max_examples=10, deadline=None)
@given(st.integers(min_value=3, max_value=8), st.integers(min_value=0, max_value=2**32))
def test_a_thousand_versions_of_one_agent_leave_at_most_max_versions_labels(max_versions: int, seed: int) -> None:
    rng = random.Random(seed)
    comparisons = VersionComparisons(ComparisonSettings(max_versions=max_versions))
    time_ms = 0
    released: list[str] = []
    for i in range(1000):
        released.append(f"build-{i}")
        for run in range(3):  # each release, then runs of any release so far (the displaced ones come back too)
            time_ms += 10
            version = released[-1] if run == 0 or rng.random() < 0.5 else rng.choice(released)
            comparisons.observe(Observation("agent", "scorer", version, rng.random(), time_ms))
        labels = {v.version for v in comparisons.versions()}
        for view in comparisons.comparisons():
            labels |= {view.version, view.reference}
        assert len(labels) <= max_versions
    assert OTHER in {v.version for v in comparisons.versions()}
    assert the_comparison(comparisons, "scorer").version == "build-999"


def test_out_of_range_scores_are_refused() -> None:
    comparisons = VersionComparisons()
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="normalised"):
            comparisons.observe(Observation("a", "s", "v1", bad, 0))
    assert comparisons.versions() == []


def feed(comparisons: VersionComparisons, observations: Iterable[Observation]) -> None:
    for observation in observations:
        comparisons.observe(observation)


def test_the_same_runs_in_the_same_order_give_the_same_comparison() -> None:
    rng = np.random.default_rng(12)
    observations = [
        Observation("a", "s", "v1" if i < 100 or rng.random() < 0.5 else "v2", float(rng.beta(7, 3)), 1000 + i * 10)
        for i in range(1500)
    ]
    first, second = VersionComparisons(), VersionComparisons()
    feed(first, observations)
    feed(second, observations)
    assert first.comparisons() == second.comparisons() and first.versions() == second.versions()


def test_outgrowing_max_versions_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    comparisons = VersionComparisons(ComparisonSettings(max_versions=3))
    with caplog.at_level("WARNING", logger="sidecar.versions.comparison"):
        for i in range(10):
            comparisons.observe(Observation("support-bot", "s", f"build-{i}", 0.5, i * 1000))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("agent 'support-bot' has more than 2 versions (versions.max_versions): 'build-0'")


def test_a_scorer_first_seen_after_a_release_keeps_the_next_reference_window() -> None:
    """tone's first run comes after 1.0 was released (by helpfulness's runs): its runs of 1.0 are still what a full
    rollout of 1.1 is compared with."""
    comparisons = VersionComparisons()
    traffic = Traffic(comparisons, seed=11)
    traffic.runs(50, {"1.0": 0.8}, {"1.0": 1}, scorer="helpfulness")
    traffic.runs(300, {"1.0": 0.8}, {"1.0": 1}, scorer="tone")
    traffic.runs(1000, {"1.1": 0.6}, {"1.1": 1}, scorer="tone")
    view = the_comparison(comparisons, "tone")
    assert (view.version, view.reference, view.mode, view.verdict) == ("1.1", "1.0", "before", -1)
    assert view.reference_runs == 300
