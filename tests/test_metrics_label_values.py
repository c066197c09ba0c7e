"""The metrics' fixed label values are the names their emitters declare, never a second list.

What a fresh ``SidecarMetrics`` exports before any event (dead-letter reasons, trace readiness, a registered
judge's call outcomes, gate states and pause reasons) is exactly the declared set; every other declared name
(run and skip outcomes, ingest skips, shed reasons) is taken as a label value when its event arrives.
"""

from __future__ import annotations

from typing import get_args

from exporters.prometheus import SidecarMetrics
from sidecar.core.deadletters import DeadLetterReason
from sidecar.core.observers import FeedbackOutcome, IngestSkipReason, JudgePauseReason, JudgeState, SkipOutcome
from sidecar.core.runs import ReadyReason
from sidecar.core.scored import RunOutcome
from sidecar.runtime.judge_gate import PAUSE_REASONS, GateState
from sidecar.scoring.judge.errors import ShedReason
from sidecar.scoring.types import JudgeCallOutcome
from tests.support.runs import finished_run

MODEL = "openai/gpt-4o-mini"


def label_values(metrics: SidecarMetrics, sample: str, label: str, **where: str) -> set[str]:
    return {
        s.labels[label]
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == sample and where.items() <= s.labels.items()
    }


def test_the_series_exported_before_any_event_carry_the_declared_names() -> None:
    metrics = SidecarMetrics()
    metrics.register_judge(MODEL)
    metrics.track_judge_pause(MODEL, lambda: None)

    assert label_values(metrics, "scoring_sidecar_dead_letters_total", "reason") == {r.value for r in DeadLetterReason}
    assert label_values(metrics, "scoring_sidecar_traces_ready_total", "reason") == set(get_args(ReadyReason))
    assert label_values(metrics, "scoring_sidecar_feedback_records_total", "outcome") == set(get_args(FeedbackOutcome))
    calls = label_values(metrics, "scoring_sidecar_judge_calls_total", "outcome", judge_model=MODEL)
    assert calls == set(get_args(JudgeCallOutcome))
    assert label_values(metrics, "scoring_sidecar_judge_state", "state", judge_model=MODEL) == set(get_args(JudgeState))
    reasons = label_values(metrics, "scoring_sidecar_judge_pause_reason", "reason", judge_model=MODEL)
    assert reasons == set(get_args(JudgePauseReason))


def test_the_judge_gate_reports_only_declared_states_and_pause_reasons() -> None:
    # The metrics pre-initialise the declared sets: a state or reason the gate has beyond them would be a
    # series nobody expects (and a state change the metrics refuse).
    assert set(get_args(GateState)) <= set(get_args(JudgeState))
    assert set(PAUSE_REASONS) <= set(get_args(JudgePauseReason))


def test_every_declared_outcome_and_reason_is_a_label_value_when_its_event_arrives() -> None:
    metrics = SidecarMetrics()
    for run_outcome in get_args(RunOutcome):
        metrics.run_finished(finished_run("s", "a", run_outcome, 0.5))
    for skip_outcome in get_args(SkipOutcome):
        metrics.runs_skipped("s", "a", skip_outcome, 1, judge=MODEL)
    for shed_reason in get_args(ShedReason):
        metrics.runs_skipped("s", "a", "shed", 1, judge=MODEL, shed_reason=shed_reason)
    for ingest_skip in get_args(IngestSkipReason):
        metrics.spans_skipped(ingest_skip, 1)

    outcomes = label_values(metrics, "scoring_sidecar_scorer_runs_total", "outcome", scorer="s")
    assert outcomes == set(get_args(RunOutcome)) | set(get_args(SkipOutcome))
    assert label_values(metrics, "scoring_sidecar_judge_shed_total", "reason", judge_model=MODEL) == set(
        get_args(ShedReason)
    )
    assert label_values(metrics, "scoring_sidecar_spans_skipped_total", "reason") == set(get_args(IngestSkipReason))
