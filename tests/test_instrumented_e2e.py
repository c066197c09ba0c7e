"""What real instrumentations write, scored by the real service: each package of ``tests/support/instrumented/
matrix.py`` (pinned, in a test-only environment the tests build: ``environments.py``) instruments an app that talks
to the scripted judge server as its model; its spans and log records go through the broker, as the Collector's Kafka
exporter writes them (``otlp_spans``, ``otlp_logs``), to ``scoring-sidecar run``, whose ``llm-judge`` marks where
each variable lands. The judge must have been given, for every LLM call (OpenAI client instrumentations, scope span)
and every agent run (OpenAI Agents SDK instrumentations, scope trace), the planted system prompt, question and
answer in their variables, and each tool call once with its arguments and result.

The content that only log records hold (openai-v2 ``event_only``, OpenLLMetry ``use_attributes=False``) is joined to
its spans: after them (the matrix), before them, and after a restart that left the spans read but uncommitted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.testing.judge_server import JudgeServer
from tests.support.instrumented.apps import (
    JudgedRun,
    Written,
    judge_scorer,
    judged_runs,
    serve_agent_model,
    written,
)
from tests.support.instrumented.environments import ENVIRONMENTS
from tests.support.instrumented.matrix import SETUPS, Setup, ingest_table
from tests.support.judge import SECRET_KEY
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    read_scores,
    score_values,
    sidecar_config,
)
from tests.support.trace_scope import produce_records
from tests.support.waits import eventually
from tests.test_service_e2e import sample

_BY_ID = {setup.id: setup for setup in SETUPS}


async def sidecar_for(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    scope: str,
    *,
    join_wait_s: float = 30.0,
) -> tuple[SidecarProcess, dict[str, str]]:
    topics = {
        "spans": await new_topic("spans", partitions=2),
        "logs": await new_topic("logs", partitions=2),
        "scores": await new_topic("scores", partitions=1),
        "dead": await new_topic("dead", partitions=1),
        "group": unique_name("group"),
    }
    settings = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=topics["spans"], scores_topic=topics["scores"],
        dead_topic=topics["dead"], group=topics["group"], judge_url=judge_server.url, metrics_port=free_port(),
        scorers=[judge_scorer(scope)],
        runtime={"trace_buffer": {"idle_s": 1.0, "max_wait_s": 30}, "log_join": {"join_wait_s": join_wait_s}},
    )  # fmt: skip
    settings["kafka"]["log_topics"] = [topics["logs"]]
    return SidecarProcess(settings, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY}), topics


async def both_committed(bootstrap: str, topics: dict[str, str], app: Written) -> bool:
    """Every record of both topics committed: the spans scored, and the log records whose content they took."""
    spans = await committed_total(bootstrap, topics["group"], topics["spans"], 2)
    logs = await committed_total(bootstrap, topics["group"], topics["logs"], 2)
    return spans == len(app.spans) and logs == len(app.logs)


def _weather(tag: str, result: str | None, *, city_suffix: str = "") -> str:
    head = 'get_weather({"city": "Paris"})'
    return f"{head} → (no result)" if result is None else f"{head} → 18C and sunny{city_suffix} (result:{tag}:tool)"


def assert_planted(runs: list[JudgedRun], tag: str, setup: Setup) -> None:
    """Every LLM call or agent run was judged once with what the app planted, in the right variables."""
    for run in runs:
        assert f"(system:{tag}:{run.name})" in run.system, run
        assert f"(question:{tag}:{run.name})" in run.input, run
    by_name: dict[str, list[JudgedRun]] = {}
    for run in runs:
        by_name.setdefault(run.name, []).append(run)
    if setup.scenario == "chat":
        assert sorted(by_name) == ["chat", "tool"] and len(runs) == 3, runs
        (chat,) = by_name["chat"]
        assert f"(answer:{tag}:chat)" in chat.output and chat.tool_calls == []
        asked, answered = sorted(by_name["tool"], key=lambda r: "(answer:" in r.output)
        assert asked.tool_calls == [_weather(tag, None)]  # the call asked for, no answer yet
        assert "(answer:" not in asked.output
        assert answered.tool_calls == [_weather(tag, "sunny")]  # once, with its result
        assert f"(answer:{tag}:tool)" in answered.output
    else:
        assert sorted(by_name) == ["planner", "translator"] and len(runs) == 2, runs  # no run for the workflow
        (planner,), (translator,) = by_name["planner"], by_name["translator"]
        assert f"(answer:{tag}:planner)" in planner.output
        assert planner.tool_calls == [
            _weather(tag, "sunny", city_suffix=" in Paris"),
            # The sub-agent called as a tool: its request and its answer, once.
            f'translate({{"input": "Have a sunny day. (question:{tag}:translator)"}}) → Here is my answer. '
            f"(answer:{tag}:translator)",
        ]
        assert f"(answer:{tag}:translator)" in translator.output and translator.tool_calls == []


@pytest.mark.slow
@pytest.mark.parametrize("setup", SETUPS, ids=[setup.id for setup in SETUPS])
async def test_every_llm_call_and_agent_run_is_judged_with_what_the_instrumentation_wrote(
    setup: Setup,
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    serve_agent_model(judge_server)
    tag = unique_name("t")
    app = await written(setup, judge_server, tag, tmp_path)
    assert bool(app.logs) == setup.logs or setup.mode == "span_and_event", "the content is not where the table says"
    sidecar, topics = await sidecar_for(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, setup.scope, join_wait_s=30
    )
    expected = 3 if setup.scenario == "chat" else 2
    sidecar.start()
    try:
        await sidecar.wait_ready()
        judge_server.requests.clear()
        # Spans first: an LLM call without content waits for its log records, which complete it well before
        # join_wait_s (30 s) would let it go on without them.
        await produce_records(kafka_bootstrap, topics["spans"], app.spans)
        await produce_records(kafka_bootstrap, topics["logs"], app.logs)
        found = await read_scores(kafka_bootstrap, topics["scores"], score_ids=expected, timeout_s=25)
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()

    values = score_values(found)
    assert len({v["scoreId"] for v in values}) == expected, values
    assert_planted(judged_runs(judge_server.requests), tag, setup)
    assert sample(metrics, "scoring_sidecar_spans_skipped_total", {"reason": "no_content"}) == 0
    if setup.logs:
        assert sample(metrics, "scoring_sidecar_content_waits_total", {"outcome": "joined"}) == 3
        assert sample(metrics, "scoring_sidecar_content_waits_total", {"outcome": "timed_out"}) == 0
    # A span that looks like an LLM or agent span and that no rule selects is counted, never silently skipped:
    # the OpenTelemetry Agents instrumentation's turn spans (gen_ai.operation.name "unknown").
    unrecognised = 6 if setup.id == "otel-agents" else 0
    assert sample(metrics, "scoring_sidecar_spans_skipped_total", {"reason": "unrecognised"}) == unrecognised


@pytest.mark.slow
async def test_content_that_arrives_before_its_span_is_joined_at_once(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    setup = _BY_ID["openai-v2-event_only"]
    serve_agent_model(judge_server)
    tag = unique_name("t")
    app = await written(setup, judge_server, tag, tmp_path)
    sidecar, topics = await sidecar_for(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, "span", join_wait_s=60
    )
    sidecar.start()
    try:
        await sidecar.wait_ready()
        judge_server.requests.clear()
        await produce_records(kafka_bootstrap, topics["logs"], app.logs)

        async def content_held() -> bool:
            return sample(await sidecar.metrics_text(), "scoring_sidecar_content_join_bytes", {}) > 0

        await eventually(content_held, timeout_s=20)
        await produce_records(kafka_bootstrap, topics["spans"], app.spans)
        # Scored at once: well within join_wait_s (60 s), which nothing waits for here.
        found = await read_scores(kafka_bootstrap, topics["scores"], score_ids=3, timeout_s=20)
        metrics = await sidecar.metrics_text()

        await eventually(lambda: both_committed(kafka_bootstrap, topics, app), timeout_s=20)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    assert len({v["scoreId"] for v in score_values(found)}) == 3
    assert_planted(judged_runs(judge_server.requests), tag, setup)
    assert sample(metrics, "scoring_sidecar_log_content_total", {"outcome": "joined"}) == 3
    assert sample(metrics, "scoring_sidecar_content_waits_total", {"outcome": "joined"}) == 3


@pytest.mark.slow
async def test_content_that_arrives_after_a_restart_joins_the_spans_read_again(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """The spans were read and held, waiting for their content, when the service stopped: nothing of them was
    committed, so the restarted service reads them again, and the content produced meanwhile joins them."""
    setup = _BY_ID["openllmetry-0.62-events"]
    serve_agent_model(judge_server)
    tag = unique_name("t")
    app = await written(setup, judge_server, tag, tmp_path)
    sidecar, topics = await sidecar_for(
        tmp_path, kafka_bootstrap, new_topic, unique_name, judge_server, "span", join_wait_s=60
    )
    sidecar.start()
    try:
        await sidecar.wait_ready()
        judge_server.requests.clear()
        await produce_records(kafka_bootstrap, topics["spans"], app.spans)

        async def spans_held() -> bool:
            return sample(await sidecar.metrics_text(), "scoring_sidecar_content_join_records", {}) == len(app.spans)

        await eventually(spans_held, timeout_s=20)
        assert sidecar.terminate() == 0
        assert await committed_total(kafka_bootstrap, topics["group"], topics["spans"], 2) == 0
        assert not judged_runs(judge_server.requests)  # nothing was scored without its content

        await produce_records(kafka_bootstrap, topics["logs"], app.logs)
        sidecar.start()
        await sidecar.wait_ready()
        found = await read_scores(kafka_bootstrap, topics["scores"], score_ids=3, timeout_s=20)

        await eventually(lambda: both_committed(kafka_bootstrap, topics, app), timeout_s=20)
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()
    assert len({v["scoreId"] for v in score_values(found)}) == 3
    assert_planted(judged_runs(judge_server.requests), tag, setup)


def test_the_table_in_the_ingest_docs_is_the_tested_matrix() -> None:
    page = (Path(__file__).parent.parent / "docs" / "ingest.md").read_text()
    begin = "<!-- instrumentations:begin (generated from tests/support/instrumented/matrix.py) -->\n"
    assert begin in page, "docs/ingest.md lost its table of instrumentations"
    table = page.split(begin, 1)[1].split("\n<!-- instrumentations:end -->", 1)[0]
    assert table == ingest_table(), "docs/ingest.md's table differs from the matrix the tests run: paste\n" + (
        ingest_table()
    )


def test_every_environment_is_used_and_every_setup_named_once() -> None:
    assert {setup.environment for setup in SETUPS} == set(ENVIRONMENTS)
    assert len({setup.id for setup in SETUPS}) == len(SETUPS)
