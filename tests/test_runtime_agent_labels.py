"""The metrics' agent label is bounded whatever the traces carry."""

from __future__ import annotations

import logging
import tracemalloc
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.prometheus import SidecarMetrics
from sidecar.core.label_values import MAX_LABEL_CHARS
from sidecar.core.observers import LimitName, ServiceObserver
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.runtime.agent_labels import OTHER, UNNAMED, AgentLabels
from sidecar.runtime.claims import Claim
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.dispatch import RunDispatcher
from sidecar.scoring import create_scorer
from tests.support.agent_runs import agent_run


def test_first_agents_keep_their_names_then_other_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    labels = AgentLabels(limit=2, pinned=["billing-bot"])
    with caplog.at_level(logging.WARNING):
        seen = [labels.label(a) for a in ["a", "b", "c", "billing-bot", "a", "d", None, ""]]
    assert seen == ["a", "b", OTHER, "billing-bot", "a", OTHER, UNNAMED, UNNAMED]
    warnings = [r for r in caplog.records if "runtime.max_agent_labels" in r.getMessage()]
    assert len(warnings) == 1 and "'c'" in warnings[0].getMessage()


def test_runs_naming_no_agent_are_labelled_unnamed_and_said_once_with_their_service(
    caplog: pytest.LogCaptureFixture,
) -> None:
    labels = AgentLabels(limit=5)
    with caplog.at_level(logging.INFO, logger="sidecar.runtime.agent_labels"):
        seen = [labels.label(None, "checkout-api"), labels.label("", "search-api"), labels.label(None)]
    assert seen == [UNNAMED, UNNAMED, UNNAMED]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "'checkout-api'" in said[0] and "gen_ai.agent.name" in said[0] and "agent='unnamed'" in said[0]


@given(st.lists(st.text(max_size=8) | st.none(), max_size=200), st.integers(0, 10))
def test_never_more_distinct_labels_than_the_limit_plus_pinned_other_and_unknown(
    agents: list[str | None], limit: int
) -> None:
    labels = AgentLabels(limit=limit, pinned=["pinned"])
    produced = {labels.label(agent) for agent in agents}
    assert len(produced - {OTHER, UNNAMED, "pinned"}) <= limit
    # Stable: an agent keeps its label once given.
    assert all(labels.label(agent) == labels.label(agent) for agent in agents)


class Hits(ServiceObserver):
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()

    def limit_hit(self, limit: LimitName, n: int = 1) -> None:
        self.hits[limit] += n


def test_a_name_too_long_for_a_label_is_labelled_by_its_start_and_a_hash_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hits = Hits()
    labels = AgentLabels(limit=5, observer=hits)
    long_a, long_b = "support-" + "a" * 200_000, "support-" + "a" * 199_999 + "b"
    with caplog.at_level(logging.WARNING):
        a, b = labels.label(long_a), labels.label(long_b)
    assert a != b and len(a) <= MAX_LABEL_CHARS and len(b) <= MAX_LABEL_CHARS
    assert a.startswith("support-aaa") and "~" in a
    assert labels.label(long_a) == a == AgentLabels(observer=hits).label(long_a)  # the same in every process
    assert hits.hits["agent_label_chars"] == 4
    line, _other_process = (r.getMessage() for r in caplog.records)  # once per process
    assert "200008 characters" in line and len(line) < 400  # the name itself is never logged whole


def test_names_past_the_limit_are_counted_and_none_is_remembered() -> None:
    """A stream of distinct 1 MB names keeps neither series nor memory: only the labels given out are kept."""
    hits = Hits()
    labels = AgentLabels(limit=3, observer=hits)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(200):
            labels.label(f"{i:04d}" + "x" * 1024 * 1024)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 64 * 1024, kept
    assert hits.hits == {"agent_label_chars": 200, "agent_labels": 197}


async def test_metrics_stay_under_a_megabyte_with_a_thousand_distinct_one_megabyte_agent_names() -> None:
    """Runs through the dispatcher, as the service starts them, each with its own 1 MB agent name: the agent label
    of every metric is bounded in length and in count, so /metrics stays small."""
    metrics = SidecarMetrics()
    metrics.register_scorer("length", kind="python", direction="higher")
    dispatcher = RunDispatcher([], metrics, AgentLabels(observer=metrics), run_timeout_s=10)
    run_input, run_output = agent_run("Where is my order?", "It ships tomorrow.")
    scorer = ConfiguredScorer(
        create_scorer(id="length", description="answer length").generate_score(lambda ctx: 0.5)  # type: ignore[arg-type]
    )
    for i in range(1000):
        name = f"{i:04d}-" + "n" * 1024 * 1024
        target = SpanTarget(trace_id=f"{i:032x}", span_id=f"{i:016x}", agent_name=name, end_time_unix_nano=0)
        request = ScorerRunRequest.model_construct(target=target, input=run_input, output=run_output)
        dispatcher.start(scorer, request, Claim())
        if i % 50 == 49:
            assert await dispatcher.drain(10) == 0
    assert await dispatcher.drain(10) == 0
    text = generate_latest(metrics.registry)
    assert len(text) < 1024 * 1024, len(text)
    agents = {
        s.labels["agent"]
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if "agent" in s.labels
    }
    assert len(agents) == 51 and "other" in agents and max(len(a) for a in agents) <= MAX_LABEL_CHARS
    hits = metrics.registry.get_sample_value("scoring_sidecar_limit_hits_total", {"limit": "agent_label_chars"})
    assert hits == 1000
    scored = metrics.registry.get_sample_value(
        "scoring_sidecar_scorer_runs_total", {"scorer": "length", "agent": "other", "outcome": "scored"}
    )
    assert scored == 950  # every run scored: each agent has its score histogram too
