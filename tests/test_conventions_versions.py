"""A run's agent version (sidecar.conventions.versions): read from the configured attributes, first present wins,
at span, trace and session scope, kept as bounded text."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.conventions import Selection, spans_to_runs
from sidecar.conventions.session_runs import session_run
from sidecar.conventions.session_turns import TurnSummary
from sidecar.conventions.trace_runs import group_by_trace, trace_runs
from sidecar.conventions.versions import (
    MAX_VERSION_CHARS,
    NO_VERSIONS,
    VersionAttributes,
    parse_version_attribute,
)
from sidecar.embedded.traffic import AGENTS, AgentProfile, agent_trace
from sidecar.ingest import decode_traces
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.runtime.stages import OfflineRecord, offline_runs
from sidecar.settings.kafka import KafkaSettings
from tests.support.custom_scorer import create_constant_scorer

GENAI = next(a for a in AGENTS if a.convention == "genai")  # its version on the agent span
OPENINFERENCE = next(a for a in AGENTS if a.convention == "openinference")  # on its resource (service.version)


def record_of(agent: AgentProfile) -> bytes:
    _, _, request = agent_trace(agent, agent.conversations[0])
    return request.SerializeToString()


def test_the_agent_span_attribute_then_the_resource_by_default() -> None:
    config = KafkaSettings(bootstrap_servers="localhost:9092", topics=["spans"]).ingest_config("spans")
    assert "service.version" in config.resource_attributes  # kept so that it can be read
    scorer = ConfiguredScorer(create_constant_scorer())
    for agent in (GENAI, OPENINFERENCE):
        record = record_of(agent)
        (run,) = offline_runs([scorer], [OfflineRecord(decode_traces(record), record, "test")], ingest=config)
        assert run.request.target.version == agent.version


def test_the_first_attribute_present_wins_in_the_configured_order() -> None:
    both = dataclasses.replace(OPENINFERENCE, convention="genai")  # span attribute 1.4.0, no service.version
    traces = decode_traces(record_of(both), "otlp_proto")
    versions = VersionAttributes.of(["resource.service.version", "span.gen_ai.agent.version"])
    (run,) = spans_to_runs(traces, resource_attributes={"service.version"}, versions=versions).runs
    assert run.target.version == both.version  # no resource version: the span's
    (run,) = spans_to_runs(traces, versions=NO_VERSIONS).runs
    assert run.target.version is None


def test_both_present_the_order_decides() -> None:
    span, resource = {"gen_ai.agent.version": "span-2"}, [("service.version", "image-7")]
    assert VersionAttributes.of(["span.gen_ai.agent.version", "resource.service.version"]).version_of(
        span, resource
    ) == ("span-2")
    assert VersionAttributes.of(["resource.service.version", "span.gen_ai.agent.version"]).version_of(
        span, resource
    ) == ("image-7")


def test_a_resource_version_needs_its_attribute_kept() -> None:
    traces = decode_traces(record_of(OPENINFERENCE), "otlp_proto")
    (run,) = spans_to_runs(traces).runs
    assert run.target.version is None
    (run,) = spans_to_runs(traces, resource_attributes={"service.version"}).runs
    assert run.target.version == OPENINFERENCE.version


def test_a_whole_trace_run_has_its_agent_span_version() -> None:
    for agent in (GENAI, OPENINFERENCE):
        traces = decode_traces(record_of(agent), "otlp_proto")
        [spans] = group_by_trace(traces, resource_attributes={"service.version"}).values()
        (run,) = trace_runs(spans, Selection(), ready_reason="root_idle").runs
        assert run.target.version == agent.version


def test_a_conversation_run_has_its_last_turn_version() -> None:
    turns = [
        TurnSummary(
            conversation_id="c",
            trace_id=f"{i + 1:032x}",
            span_id=f"{i + 1:016x}",
            start_time_unix_nano=i,
            end_time_unix_nano=i + 1,
            user="hi",
            answer="hello",
            version=version,
        )
        for i, version in enumerate(["1.0", "1.1"])
    ]
    assert TurnSummary.decode(turns[1].encode()).version == "1.1"  # as the internal topic carries it
    assert session_run("c", turns, "idle").target.version == "1.1"


@given(st.text(max_size=400))
def test_a_version_is_trimmed_text_of_bounded_length(text: str) -> None:
    versions = VersionAttributes.of(["span.v"])
    found = versions.version_of({"v": text}, ())
    if text.strip():
        assert found == text.strip()[:MAX_VERSION_CHARS]
    else:
        assert found is None


def test_numbers_are_versions_flags_and_structures_are_not() -> None:
    versions = VersionAttributes.of(["span.v", "resource.r"])
    assert versions.version_of({"v": 7}, ()) == "7"
    assert versions.version_of({"v": 2.5}, ()) == "2.5"
    for not_a_version in (True, ["1"], {"a": 1}, b"1", ""):
        assert versions.version_of({"v": not_a_version}, [("r", "fallback")]) == "fallback"


@pytest.mark.parametrize("text", ["gen_ai.agent.version", "span.", "attributes.service.version", ""])
def test_a_key_must_say_where_it_is_read(text: str) -> None:
    with pytest.raises(ValueError, match=r"span\.<attribute> or resource\.<attribute>"):
        parse_version_attribute(text)
