"""The metrics' agent label is bounded whatever the traces carry."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.runtime.agent_labels import OTHER, UNKNOWN, AgentLabels


def test_first_agents_keep_their_names_then_other_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    labels = AgentLabels(limit=2, pinned=["billing-bot"])
    with caplog.at_level(logging.WARNING):
        seen = [labels.label(a) for a in ["a", "b", "c", "billing-bot", "a", "d", None, ""]]
    assert seen == ["a", "b", OTHER, "billing-bot", "a", OTHER, UNKNOWN, UNKNOWN]
    warnings = [r for r in caplog.records if "runtime.max_agent_labels" in r.getMessage()]
    assert len(warnings) == 1 and "'c'" in warnings[0].getMessage()


@given(st.lists(st.text(max_size=8) | st.none(), max_size=200), st.integers(0, 10))
def test_never_more_distinct_labels_than_the_limit_plus_pinned_other_and_unknown(
    agents: list[str | None], limit: int
) -> None:
    labels = AgentLabels(limit=limit, pinned=["pinned"])
    produced = {labels.label(agent) for agent in agents}
    assert len(produced - {OTHER, UNKNOWN, "pinned"}) <= limit
    # Stable: an agent keeps its label once given.
    assert all(labels.label(agent) == labels.label(agent) for agent in agents)
