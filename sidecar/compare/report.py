"""What ``compare`` prints: the versions of the agent in the window side by side, then the comparison of its newest
version with its reference, as the live gauges hold it (text for a person, ``--json`` for a script)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.backfill.window import utc_text
from sidecar.compare.scores import ScoreRow
from sidecar.versions.comparison import ComparisonView

__all__ = ["VersionSummary", "render_json", "render_text", "summarise_versions"]

_WINDOWS = {
    "concurrent": "the reference's runs since the release (both received traffic: a canary)",
    "before": "the reference's last runs before the release (it got none since: a full rollout)",
    "pending": "too few runs yet to tell a canary from a rollout: no bounds, no verdict",
}
_VERDICTS = {-1: "regression", 0: "undecided", 1: "improvement"}


@dataclass(frozen=True, slots=True)
class VersionSummary:
    version: str
    runs: int
    mean: float
    first_ms: int
    last_ms: int


def summarise_versions(rows: Sequence[ScoreRow], scores: Sequence[float]) -> list[VersionSummary]:
    """Per version (as traced, unbounded: this is a report, not a label), its runs, mean normalised score, first and
    last score; in order of first score. ``scores``: each row's normalised score."""
    found: dict[str, list[Any]] = {}
    for row, score in zip(rows, scores, strict=True):
        if row.version is None:
            continue
        each = found.setdefault(row.version, [0, 0.0, row.time_ms, row.time_ms])
        each[0] += 1
        each[1] += score
        each[2] = min(each[2], row.time_ms)
        each[3] = max(each[3], row.time_ms)
    summaries = [VersionSummary(v, n, total / n, first, last) for v, (n, total, first, last) in found.items()]
    return sorted(summaries, key=lambda s: s.first_ms)


def _number(value: float | None) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:+.3f}"


def render_text(
    *,
    agent: str,
    scorer: str,
    higher_is_better: bool,
    window: str,
    versions: Sequence[VersionSummary],
    comparison: ComparisonView | None,
    alpha: float,
    min_effect: float,
    unversioned: int,
) -> list[str]:
    better = "higher" if higher_is_better else "lower"
    lines = [f"agent {agent}, scorer {scorer} ({better} is better), scores of {window}"]
    if unversioned:
        lines.append(f"  {unversioned} scores without a traced version (versions.attributes) are left out")
    if not versions:
        lines.append("  no score of this agent and scorer with a version in the window")
        return lines
    width = max(7, *(len(v.version) for v in versions))
    lines.append(f"  {'version':<{width}}  {'first score':<24}  {'runs':>7}  {'mean':>6}")
    for v in versions:
        lines.append(f"  {v.version:<{width}}  {utc_text(v.first_ms):<24}  {v.runs:>7}  {v.mean:>6.3f}")
    if comparison is None:
        lines.append("no comparison: the window holds one version of the agent, or its newest has no reference yet")
        return lines
    c = comparison
    released = utc_text(c.since_ms)
    lines += [
        f"{c.version} against {c.reference}, released {released}; the reference's runs read: {_WINDOWS[c.mode]}",
        f"  runs      {c.version}: {c.runs}   {c.reference}: {c.reference_runs}",
        f"  means     {c.version}: {c.mean:.3f}   {c.reference}: {c.reference_mean:.3f}",
        f"  delta     {_number(c.delta)} ({c.version} − {c.reference}, {better} is better: below 0 is worse)",
        f"  bounds    [{_number(c.lower)}, {_number(c.upper)}] (anytime-valid at alpha {alpha:g})",
        f"  verdict   {c.verdict:+d} {_VERDICTS[c.verdict]} (beyond min_effect {min_effect:g})",
    ]
    return lines


def render_json(
    *,
    agent: str,
    scorer: str,
    higher_is_better: bool,
    start_ms: int,
    end_ms: int,
    versions: Sequence[VersionSummary],
    comparison: ComparisonView | None,
    alpha: float,
    min_effect: float,
) -> dict[str, Any]:
    c = comparison
    return {
        "agent": agent,
        "scorer": scorer,
        "direction": "higher" if higher_is_better else "lower",
        "from": utc_text(start_ms),
        "to": utc_text(end_ms),
        "alpha": alpha,
        "minEffect": min_effect,
        "versions": [
            {"version": v.version, "runs": v.runs, "mean": v.mean, "firstScore": utc_text(v.first_ms)} for v in versions
        ],
        "comparison": None
        if c is None
        else {
            "version": c.version,
            "reference": c.reference,
            "released": utc_text(c.since_ms),
            "referenceWindow": c.mode,
            "runs": c.runs,
            "mean": None if math.isnan(c.mean) else c.mean,
            "referenceRuns": c.reference_runs,
            "referenceMean": None if math.isnan(c.reference_mean) else c.reference_mean,
            "delta": c.delta,
            "lower": c.lower,
            "upper": c.upper,
            "verdict": c.verdict,
        },
    }
