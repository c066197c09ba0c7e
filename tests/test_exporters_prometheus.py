"""Prometheus metrics from real scorer runs against the scripted judge, scraped over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import aiohttp
import prometheus_client
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.samples import Sample
from pydantic import BaseModel, SecretStr

from exporters.http_server import MetricsServer
from exporters.prometheus import (
    JUDGE_CALL_DURATION_BUCKETS,
    JUDGE_CALL_OUTCOMES,
    JUDGE_PAUSE_REASONS,
    SCORE_BUCKETS,
    SidecarMetrics,
    judge_model_label,
    normalise_score,
)
from sidecar.core import ScoredRun
from sidecar.core.deadletters import DeadLetterReason
from sidecar.core.observers import Observers, ServiceObserver
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.demo import DemoSummary
from sidecar.runtime.judge_gate import GateConfig, JudgeGate
from sidecar.scoring import (
    AgentRunInput,
    JudgeExecutionFailure,
    JudgeExecutionSuccess,
    JudgeModel,
    Scorer,
    create_scorer,
    not_scorable,
)
from sidecar.scoring.judge.client import JudgeClient
from sidecar.scoring.types import JudgeCall, JudgeExecution
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import judge_client
from tests.support.runs import finished_run, scored_run_of

MODEL = "openai/gpt-4o-mini"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# What Prometheus 2.x and 3.x send when scraping (exemplar storage on or off, both prefer OpenMetrics).
PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_3_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


class Verdict(BaseModel):
    verdict: str
    confidence: float


class Rating(BaseModel):
    rating: float


def judge_model(judge_server: JudgeServer, **overrides: Any) -> JudgeModel:
    settings: dict[str, Any] = {
        "model": MODEL,
        "api_base": judge_server.url,
        "api_key": SecretStr("sk-test-metrics"),
        "transport": "http",
        "max_retries": 1,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.02,
    }
    settings.update(overrides)
    return JudgeModel(**settings)


def verdict_scorer(model: JudgeModel) -> Scorer:
    return (
        create_scorer(id="verdict", name="Verdict", judge={"model": model, "instructions": "Be strict."})
        .analyze(description="judge", create_prompt=lambda ctx: f"Judge: {ctx.run.output}", output_schema=Verdict)
        .generate_score(lambda ctx: ctx.results.analyze_step_result.confidence)
    )


def rating_scorer(model: JudgeModel) -> Scorer:
    """Scores on a 0–10 scale: the metrics normalise them with scale 10."""
    return (
        create_scorer(id="rating", judge={"model": model})
        .analyze(description="rate", create_prompt=lambda ctx: f"Rate: {ctx.run.output}", output_schema=Rating)
        .generate_score(lambda ctx: ctx.results.analyze_step_result.rating)
    )


def tool_scorer() -> Scorer:
    return create_scorer(id="tools").preprocess(lambda ctx: not_scorable("no tool calls")).generate_score(lambda c: 1)


def new_trace_id() -> str:
    return secrets.token_hex(16)


async def scored_run(scorer: Scorer, *, agent: str = "travel-agent", span_age_s: float = 2.0) -> ScoredRun:
    """Run a real scorer and wrap it the way the runtime will."""
    target = SpanTarget(
        trace_id=new_trace_id(),
        span_id=secrets.token_hex(8),
        agent_name=agent,
        end_time_unix_nano=time.time_ns() - int(span_age_s * 1e9),
    )
    request = ScorerRunRequest(target=target, input=AgentRunInput(), output=())
    return await scored_run_of(
        scorer, request, agent_label=agent, run_input="Where can I fly?", run_output="Lisbon, Porto or Faro."
    )


def executions(runs: Iterable[ScoredRun]) -> list[tuple[str, JudgeExecution]]:
    return [
        (run.scorer_id, execution)
        for run in runs
        if run.result is not None and run.result.judge is not None
        for execution in run.result.judge.executions()
    ]


CLIENTS: dict[str, JudgeClient] = {}


def observed(model: JudgeModel, metrics: SidecarMetrics) -> JudgeModel:
    """The model's client reports every call to ``metrics``, as the assembly wires it."""
    CLIENTS[model.cache_key()] = judge_client(model, observers=[metrics])
    return model


def bound(scorer: Scorer, model: JudgeModel) -> Scorer:
    return scorer.bind(CLIENTS[model.cache_key()])


async def real_runs(judge_server: JudgeServer, metrics: SidecarMetrics) -> list[ScoredRun]:
    """Every judge call outcome, a failed run with usage, a failed run without, provider cost, a 0–10 scorer."""
    model = observed(judge_model(judge_server), metrics)
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 40},
        "completion_tokens_details": {"reasoning_tokens": 8},
    }
    runs: list[ScoredRun] = []
    # Rate limited, then a good answer with reasoning and cached tokens.
    judge_server.script(
        Reply.error(429, retry_after=0.01), Reply.json({"verdict": "yes", "confidence": 0.75}, usage=usage)
    )
    runs.append(await scored_run(bound(verdict_scorer(model), model)))
    # The provider reports its cost.
    judge_server.script(Reply.json({"verdict": "no", "confidence": 0.25}, cost=0.001))
    runs.append(await scored_run(bound(verdict_scorer(model), model), agent="booking-agent"))
    # Two invalid answers: a failed run whose failed execution still used tokens.
    judge_server.script(Reply(content="not json"), Reply(content='{"verdict": "yes"}'))
    runs.append(await scored_run(bound(verdict_scorer(model), model)))
    # Server errors, retried once: failed, no usage.
    judge_server.script(Reply.error(500, "boom"), Reply.error(500, "boom"))
    runs.append(await scored_run(bound(verdict_scorer(model), model)))
    # A judge nobody listens for: refused connections, retried once, failed.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    dead = observed(judge_model(judge_server, api_base=f"http://127.0.0.1:{dead_port}/v1"), metrics)
    runs.append(await scored_run(bound(verdict_scorer(dead), dead)))
    # A run cancelled mid-call (shutdown, rebalance): no ScoredRun, but the call is counted.
    judge_server.script(Reply.json({"verdict": "yes", "confidence": 1.0}, delay_s=2.0))
    abandoned = asyncio.ensure_future(scored_run(bound(verdict_scorer(model), model)))
    await asyncio.sleep(0.3)  # the request is at the judge, which answers after 2 s
    abandoned.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await abandoned
    judge_server.reset()
    # A timeout, then a good answer.
    slow = observed(judge_model(judge_server, timeout_s=0.1), metrics)
    judge_server.script(
        Reply.json({"verdict": "yes", "confidence": 1.0}, delay_s=0.4),
        Reply.json({"verdict": "yes", "confidence": 0.5}),
    )
    runs.append(await scored_run(bound(verdict_scorer(slow), slow)))
    # 0–10 scores: 7 → 0.7, 12 → clamped to 1.0.
    judge_server.script(Reply.json({"rating": 7}), Reply.json({"rating": 12}))
    runs.append(await scored_run(bound(rating_scorer(model), model)))
    runs.append(await scored_run(bound(rating_scorer(model), model)))
    runs.append(await scored_run(tool_scorer()))
    return runs


async def scrape(server: MetricsServer, path: str = "/metrics", accept: str | None = None) -> tuple[int, str, str]:
    headers = {"Accept": accept} if accept else {}
    async with aiohttp.ClientSession() as session, session.get(server.url + path, headers=headers) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


def samples_of(families: Iterable[Any]) -> list[Sample]:
    return [sample for family in families for sample in family.samples]


def value(samples: Sequence[Sample], name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0 when none)."""
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def has_series(samples: Sequence[Sample], name: str, **labels: str) -> bool:
    return any(s.name == name and labels.items() <= s.labels.items() for s in samples)


# -- the whole path: real runs → sink → HTTP → parser --------------------------------------------------


async def test_metrics_from_real_scorer_runs_match_the_judge_record(judge_server: JudgeServer) -> None:
    metrics = SidecarMetrics(scales={"rating": 10})
    runs = await real_runs(judge_server, metrics)
    assert [r.outcome for r in runs] == [
        "scored",
        "scored",
        "failed",
        "failed",
        "failed",
        "scored",
        "scored",
        "scored",
        "not_scorable",
    ]
    for run in runs:
        metrics.run_finished(run)  # as the service reports each finished run

    async with MetricsServer(metrics.registry, host="127.0.0.1", port=0) as server:
        assert server.port != 0
        status, content_type, text = await scrape(server)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    samples = samples_of(parse_text(text))
    label = judge_model_label(MODEL)
    assert label == MODEL

    pairs = executions(runs)
    statuses = {execution.status for _, execution in pairs}
    assert statuses == {"success", "failed"}
    failed_with_usage = [e for _, e in pairs if isinstance(e, JudgeExecutionFailure) and e.usage is not None]
    assert failed_with_usage, "the invalid-JSON run must leave a failed execution with usage"

    # Tokens: the sums of the calls' usage, by scorer, type and status (success: the call's answer was used).
    fields = {
        "input": "input_tokens",
        "output": "output_tokens",
        "reasoning": "reasoning_tokens",
        "cached_input": "cached_input_tokens",
        "cache_creation": "cache_creation_input_tokens",
    }
    expected_tokens: dict[tuple[str, str, str], int] = defaultdict(int)
    for scorer, execution in pairs:
        for call in execution.calls:
            if call.usage is None:
                continue
            status = "success" if call.outcome == "ok" else "failed"
            for token_type, field in fields.items():
                expected_tokens[(scorer, token_type, status)] += getattr(call.usage, field) or 0
    assert expected_tokens[("verdict", "reasoning", "success")] == 8
    assert expected_tokens[("verdict", "cached_input", "success")] == 40
    assert expected_tokens[("verdict", "input", "failed")] == 20
    for (scorer, token_type, run_status), tokens in expected_tokens.items():
        got = value(
            samples,
            "scoring_sidecar_judge_tokens_total",
            judge_model=label,
            scorer=scorer,
            type=token_type,
            status=run_status,
        )
        assert got == tokens, (scorer, token_type, run_status)
    assert value(samples, "scoring_sidecar_judge_tokens_total") == sum(expected_tokens.values())

    # Cost: estimated on every call that has an estimate (failed too), provider-reported when given.
    for scorer in ("verdict", "rating"):
        estimated = sum(c.estimated_cost_usd or 0.0 for s, e in pairs if s == scorer for c in e.calls)
        provider = sum(
            e.cost.amount for s, e in pairs if s == scorer and isinstance(e, JudgeExecutionSuccess) and e.cost
        )
        assert estimated > 0
        assert value(
            samples, "scoring_sidecar_judge_cost_usd_total", judge_model=label, scorer=scorer, source="estimated"
        ) == pytest.approx(estimated)
        assert value(
            samples, "scoring_sidecar_judge_cost_usd_total", judge_model=label, scorer=scorer, source="provider"
        ) == pytest.approx(provider)
    assert any(isinstance(e, JudgeExecutionFailure) and e.estimated_cost_usd for _, e in pairs)
    assert value(samples, "scoring_sidecar_judge_cost_usd_total", source="provider") == pytest.approx(0.001)

    # Calls by outcome, one per HTTP call, the cancelled one included (it has no run record); the duration
    # histogram counts the same calls.
    calls: Tally[str] = Tally(call.outcome for _, e in pairs for call in e.calls)
    calls["cancelled"] += 1
    assert set(calls) == set(JUDGE_CALL_OUTCOMES)  # every outcome happened for real
    for outcome in JUDGE_CALL_OUTCOMES:
        assert value(samples, "scoring_sidecar_judge_calls_total", judge_model=label, outcome=outcome) == calls[outcome]
        assert (
            value(samples, "scoring_sidecar_judge_call_duration_seconds_count", judge_model=label, outcome=outcome)
            == calls[outcome]
        )
    total_duration = sum(call.duration_s for _, e in pairs for call in e.calls)
    cancelled_duration = value(
        samples, "scoring_sidecar_judge_call_duration_seconds_sum", judge_model=label, outcome="cancelled"
    )
    assert 0 < cancelled_duration < 2
    assert value(samples, "scoring_sidecar_judge_call_duration_seconds_sum") == pytest.approx(
        total_duration + cancelled_duration
    )
    bounds = {float(s.labels["le"]) for s in samples if s.name == "scoring_sidecar_judge_call_duration_seconds_bucket"}
    assert bounds == {*JUDGE_CALL_DURATION_BUCKETS, float("inf")}

    # Scores, normalised: verdict 0.75 / 0.5 (travel-agent) and 0.25 (booking-agent); rating 0.7 and 1.0.
    def score(stat: str, **labels: str) -> float:
        return value(samples, f"scoring_sidecar_score_{stat}", **labels)

    assert score("count", scorer="verdict", agent="travel-agent") == 2
    assert score("sum", scorer="verdict", agent="travel-agent") == pytest.approx(1.25)
    assert score("count", scorer="verdict", agent="booking-agent") == 1
    assert score("sum", scorer="verdict", agent="booking-agent") == pytest.approx(0.25)
    assert score("count", scorer="rating") == 2 and score("sum", scorer="rating") == pytest.approx(1.7)
    assert score("bucket", scorer="rating", le="0.7") == 1 and score("bucket", scorer="rating", le="0.9") == 1
    assert score("bucket", scorer="rating", le="1.0") == 2
    score_bounds = {float(s.labels["le"]) for s in samples if s.name == "scoring_sidecar_score_bucket"}
    assert score_bounds == {*SCORE_BUCKETS, float("inf")}
    assert not has_series(samples, "scoring_sidecar_score_count", scorer="tools")

    # Outcomes.
    outcomes = Tally((r.scorer_id, r.agent_label, r.outcome) for r in runs)
    for (scorer, agent, outcome), n in outcomes.items():
        got = value(samples, "scoring_sidecar_scorer_runs_total", scorer=scorer, agent=agent, outcome=outcome)
        assert got == n, (scorer, agent, outcome)
    assert value(samples, "scoring_sidecar_scorer_runs_total", outcome="failed") == 3
    assert value(samples, "scoring_sidecar_scorer_runs_total", outcome="not_scorable") == 1

    # End-to-end lag: observed for scored runs only, about the span's age.
    assert value(samples, "scoring_sidecar_score_latency_seconds_count") == 5
    assert 5 * 2.0 <= value(samples, "scoring_sidecar_score_latency_seconds_sum") < 5 * 2.0 + 30
    assert value(samples, "scoring_sidecar_scorer_run_duration_seconds_count") == len(runs)

    # Bounded labels: no trace id (or span id) anywhere in a label value.
    ids = {r.request.target.trace_id for r in runs} | {r.request.target.span_id for r in runs}
    for sample in samples:
        for label_value in sample.labels.values():
            assert not any(i in label_value for i in ids), sample
    assert value(samples, "scoring_sidecar_build_info") == 1


async def test_openmetrics_carries_trace_ids_as_exemplars(judge_server: JudgeServer) -> None:
    metrics = SidecarMetrics(scales={"rating": 10})
    runs = await real_runs(judge_server, metrics)
    for run in runs:
        metrics.run_finished(run)
    async with MetricsServer(metrics.registry, host="127.0.0.1", port=0) as server:
        status, content_type, text = await scrape(server, accept=OPENMETRICS)
        _, _, plain = await scrape(server)
        negotiated = [
            (await scrape(server, accept=accept))[1]
            for accept in ("application/openmetrics-text", PROMETHEUS_2_ACCEPT, PROMETHEUS_3_ACCEPT)
        ]
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert all(c.startswith("application/openmetrics-text") for c in negotiated), negotiated
    assert text.rstrip().endswith("# EOF")
    samples = samples_of(parse_openmetrics(text))  # type: ignore[no-untyped-call]
    scored = {r.request.target.trace_id for r in runs if r.outcome == "scored"}
    failed = {r.request.target.trace_id for r in runs if r.outcome == "failed"}

    def exemplar_trace_ids(name: str) -> set[str]:
        return {s.exemplar.labels["trace_id"] for s in samples if s.name == name and s.exemplar is not None}

    score_exemplars = exemplar_trace_ids("scoring_sidecar_score_bucket")
    latency_exemplars = exemplar_trace_ids("scoring_sidecar_score_latency_seconds_bucket")
    assert score_exemplars and score_exemplars <= scored
    assert latency_exemplars and latency_exemplars <= scored
    # A bucket keeps its latest exemplar: each distinct (scorer, agent, bucket) shows one of the scored traces.
    rating_top = [
        s
        for s in samples
        if s.name == "scoring_sidecar_score_bucket" and s.labels["scorer"] == "rating" and s.labels["le"] == "1.0"
    ]
    assert rating_top[0].exemplar is not None and rating_top[0].exemplar.value == 1.0
    # Failed runs are findable too: the outcome counter carries their trace id.
    assert exemplar_trace_ids("scoring_sidecar_scorer_runs_total") & failed
    # Exemplars exist only in OpenMetrics; the text format never shows them, and no label holds a trace id.
    assert "trace_id" not in plain
    # No series of start times beside the counters and histograms (``_created``): nothing reads them.
    assert "_created" not in plain and "_created" not in text
    for sample in samples:
        assert not any(t in v for t in scored | failed for v in sample.labels.values())


# -- runtime-fed metrics ----------------------------------------------------------------------------


async def test_runtime_metrics_and_dead_letters() -> None:
    metrics = SidecarMetrics(version="9.9.9")
    observer: ServiceObserver = Observers([metrics])  # what the service reports, as it reports it
    for reason in ("decode_error", "too_large", "decode_error", "decode_error", "unmappable"):
        observer.dead_lettered(reason)
    observer.dead_lettered("decode_error", 1)
    observer.consumer_lag("otlp_spans", 0, 42)
    observer.consumer_lag("otlp_spans", 1, 7)
    observer.consumer_lag("otlp_spans", 2, 3)
    observer.consumer_lag("otlp_spans", 2, None)  # revoked
    observer.consumer_lag("otlp_spans", 99, None)  # unknown: no error
    observer.record_consumed("otlp_spans", 9)
    observer.spans_skipped("internal", 1)
    observer.runs_skipped("", "not_read", "filtered", 2)
    observer.runs_skipped("", "not_read", "sampled_out", 3)
    observer.record_consumed("otlp_spans", 0)
    observer.runs_skipped("verdict", "travel-agent", "too_large", 1)
    observer.runs_skipped("verdict", "travel-agent", "too_large", 0)  # nothing to count: no series
    observer.runs_in_flight(2)
    observer.runs_in_flight(1)
    judge = JudgeModel(model="gpt-4o-mini")
    metrics.register_judge(judge)
    observer.judge_state_changed(judge.litellm_model, "open")
    observer.judge_spend(judge.litellm_model, 4.5, 5.0)
    observer.runs_skipped("verdict", "unnamed", "shed", 3, judge=judge.litellm_model)
    async with MetricsServer(metrics.registry, host="127.0.0.1", port=0) as server:
        _, _, text = await scrape(server)
    samples = samples_of(parse_text(text))
    dead = "scoring_sidecar_dead_letters_total"
    assert value(samples, dead, reason="decode_error") == 4
    assert value(samples, dead, reason="too_large") == 1 and value(samples, dead, reason="unmappable") == 1
    assert value(samples, dead, reason="internal_error") == 0
    assert {s.labels["reason"] for s in samples if s.name == dead} == {r.value for r in DeadLetterReason}
    lag = "scoring_sidecar_consumer_lag_records"
    assert value(samples, lag, topic="otlp_spans", partition="0") == 42
    assert value(samples, lag, partition="1") == 7 and not has_series(samples, lag, partition="2")
    assert value(samples, "scoring_sidecar_records_consumed_total", topic="otlp_spans") == 2
    assert value(samples, "scoring_sidecar_spans_seen_total") == 9
    assert value(samples, "scoring_sidecar_spans_skipped_total", reason="internal") == 1
    runs = "scoring_sidecar_scorer_runs_total"
    assert value(samples, runs, scorer="", outcome="filtered") == 2
    assert value(samples, runs, scorer="", outcome="sampled_out") == 3
    assert value(samples, runs, scorer="verdict", agent="travel-agent", outcome="too_large") == 1
    assert value(samples, runs, scorer="verdict", outcome="shed") == 3
    assert value(samples, "scoring_sidecar_runs_in_flight") == 1
    assert value(samples, "scoring_sidecar_judge_paused", judge_model=MODEL) == 1
    assert value(samples, "scoring_sidecar_judge_state", judge_model=MODEL, state="open") == 1
    assert value(samples, "scoring_sidecar_judge_state", judge_model=MODEL) == 1  # one-hot
    assert value(samples, "scoring_sidecar_judge_spend_usd", judge_model=MODEL) == 4.5
    assert value(samples, "scoring_sidecar_judge_spend_cap_usd", judge_model=MODEL) == 5.0
    assert value(samples, "scoring_sidecar_judge_shed_total", judge_model=MODEL, reason="spend_cap") == 3
    # A registered judge has every call outcome from the start, at zero.
    for outcome in JUDGE_CALL_OUTCOMES:
        assert has_series(samples, "scoring_sidecar_judge_calls_total", judge_model=MODEL, outcome=outcome)
    assert value(samples, "scoring_sidecar_build_info", version="9.9.9") == 1

    metrics.judge_state_changed(MODEL, "half_open")  # still holding calls
    assert metrics.registry.get_sample_value("scoring_sidecar_judge_paused", {"judge_model": MODEL}) == 1
    metrics.judge_state_changed(MODEL, "closed")
    assert metrics.registry.get_sample_value("scoring_sidecar_judge_paused", {"judge_model": MODEL}) == 0
    assert (
        metrics.registry.get_sample_value("scoring_sidecar_judge_state", {"judge_model": MODEL, "state": "closed"}) == 1
    )


async def test_judge_pause_reason_follows_the_gate_through_a_pause_a_recheck_and_resume() -> None:
    metrics = SidecarMetrics()
    gate = JudgeGate(
        MODEL, GateConfig(pause_recheck_s=None, failure_threshold=1), on_state_change=metrics.judge_state_changed
    )
    metrics.register_judge(MODEL)
    metrics.track_judge_pause(MODEL, lambda: gate.pause_reason)

    def reasons() -> dict[str, float]:
        return {
            reason: metrics.registry.get_sample_value(
                "scoring_sidecar_judge_pause_reason", {"judge_model": MODEL, "reason": reason}
            )
            or 0.0
            for reason in JUDGE_PAUSE_REASONS
        }

    def state() -> str:
        return next(
            s
            for s in ("closed", "open", "half_open", "paused")
            if metrics.registry.get_sample_value("scoring_sidecar_judge_state", {"judge_model": MODEL, "state": s})
        )

    assert set(reasons().values()) == {0.0} and state() == "closed"
    # The provider answers 402: paused for payment, and the metric says so.
    gate.release(
        JudgeCall(outcome="error", duration_s=0.1, status_code=402, error_name="PaymentRequiredError"),
        await gate.acquire(),
    )
    assert state() == "paused" and reasons() == {**dict.fromkeys(JUDGE_PAUSE_REASONS, 0.0), "payment_required": 1.0}
    assert metrics.registry.get_sample_value("scoring_sidecar_judge_paused", {"judge_model": MODEL}) == 1
    gate.resume()
    assert state() == "closed" and set(reasons().values()) == {0.0}
    # An outage opens the circuit: held, but not paused, so no reason.
    gate.release(
        JudgeCall(outcome="connection_error", duration_s=0.1, error_name="APIConnectionError"), await gate.acquire()
    )
    assert state() == "open" and set(reasons().values()) == {0.0}
    assert metrics.registry.get_sample_value("scoring_sidecar_judge_paused", {"judge_model": MODEL}) == 1
    # A 401 answer (a probe's, say) pauses it with that reason.
    gate.resume()
    gate.release(
        JudgeCall(outcome="error", duration_s=0.1, status_code=401, error_name="AuthenticationError"),
        await gate.acquire(),
    )
    assert state() == "paused" and reasons()["authentication"] == 1.0 and sum(reasons().values()) == 1.0


def test_bounded_label_values_are_checked() -> None:
    metrics = SidecarMetrics()
    with pytest.raises(ValueError, match="skip outcome"):
        metrics.runs_skipped("verdict", "unknown", "scored", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scorer outcome"):
        metrics.run_finished(finished_run("verdict", "a", "exploded"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shed reason"):
        metrics.runs_skipped("verdict", "a", "shed", 1, judge=MODEL, shed_reason="bored")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale"):
        metrics.set_scorer_scale("rating", 0)
    with pytest.raises(ValueError, match="scale"):
        SidecarMetrics(scales={"rating": float("nan")})


def test_score_normalisation_and_latency_clock() -> None:
    assert normalise_score(7, 10) == pytest.approx(0.7)
    assert normalise_score(-1) == 0.0 and normalise_score(3) == 1.0 and normalise_score(0.42) == 0.42
    assert normalise_score(float("nan")) is None and normalise_score(float("inf")) is None
    now = 1_700_000_000 * 10**9
    metrics = SidecarMetrics(clock_ns=lambda: now, scales={"s": 5})
    get = metrics.registry.get_sample_value
    metrics.run_finished(
        finished_run("s", "a", "scored", 4, trace_id=new_trace_id(), span_end_unix_nano=now - 2_500_000_000)
    )
    assert get("scoring_sidecar_score_sum", {"scorer": "s", "agent": "a"}) == pytest.approx(0.8)
    nan = float("nan")  # no score to observe
    # Clock skew: clamped to 0.
    metrics.run_finished(finished_run("s", "a", "scored", nan, span_end_unix_nano=now + 10**9))
    # Unknown span end: not observed.
    metrics.run_finished(finished_run("s", "a", "scored", nan, span_end_unix_nano=0))
    assert get("scoring_sidecar_score_count", {"scorer": "s", "agent": "a"}) == 1
    assert get("scoring_sidecar_score_latency_seconds_count", {"scorer": "s"}) == 2
    assert get("scoring_sidecar_score_latency_seconds_sum", {"scorer": "s"}) == pytest.approx(2.5)
    assert get("scoring_sidecar_score_latency_seconds_bucket", {"scorer": "s", "le": "0.05"}) == 1


def test_each_instance_has_its_own_registry() -> None:
    first, second = SidecarMetrics(), SidecarMetrics()
    for _ in range(5):
        first.record_consumed("t", 1)
    assert first.registry is not second.registry
    assert first.registry.get_sample_value("scoring_sidecar_records_consumed_total", {"topic": "t"}) == 5
    assert second.registry.get_sample_value("scoring_sidecar_records_consumed_total", {"topic": "t"}) is None
    assert prometheus_client.REGISTRY.get_sample_value("scoring_sidecar_build_info", {"version": "0.1.0"}) is None


async def test_a_broken_run_never_takes_the_observers_down(caplog: pytest.LogCaptureFixture) -> None:
    metrics = SidecarMetrics()
    after = DemoSummary()
    target = SpanTarget(trace_id=new_trace_id(), span_id=secrets.token_hex(8))
    broken = ScoredRun(
        request=ScorerRunRequest(target=target, input=AgentRunInput(), output=()),
        scorer_id="s",
        scorer_name="s",
        scorer_fingerprint="f",
        outcome="bogus",  # type: ignore[arg-type]
        result=None,
        error=None,
        started_unix_nano=0,
        finished_unix_nano=0,
    )
    Observers([metrics, after]).run_finished(broken)
    assert "observer SidecarMetrics failed on run_finished" in caplog.text
    assert sum(cell.failed for cell in after.cells.values()) == 1  # the next observer still heard of it


# -- health endpoints ------------------------------------------------------------------------------


async def test_healthz_and_readyz_follow_their_callbacks() -> None:
    state: dict[str, Any] = {"ready": False, "alive": True}

    def readiness() -> tuple[bool, str]:
        return state["ready"], "" if state["ready"] else "no partitions assigned yet"

    def broken() -> bool:
        raise RuntimeError("boom")

    metrics = SidecarMetrics()
    server = MetricsServer(
        metrics.registry, host="127.0.0.1", port=0, readiness=readiness, liveness=lambda: bool(state["alive"])
    )
    await server.start()
    try:
        assert server.running
        assert (await scrape(server, "/healthz"))[0] == 200
        status, content_type, body = await scrape(server, "/readyz")
        assert (status, content_type.split(";")[0]) == (503, "application/json")
        assert '"no partitions assigned yet"' in body
        state["ready"] = True
        assert (await scrape(server, "/readyz"))[0] == 200
        state["alive"] = False
        status, _, body = await scrape(server, "/healthz")
        assert status == 503 and "not alive" in body
        server.readiness = lambda: False
        status, _, body = await scrape(server, "/readyz")
        assert status == 503 and "not ready" in body
        server.readiness = broken
        status, _, body = await scrape(server, "/readyz")
        assert status == 503 and "RuntimeError" in body and "boom" not in body
        assert (await scrape(server, "/nope"))[0] == 404
    finally:
        await server.stop()
    assert not server.running
    await server.stop()  # idempotent
    with pytest.raises(aiohttp.ClientConnectionError):
        await scrape(server, "/healthz")


async def test_defaults_without_callbacks_are_alive_and_ready() -> None:
    async with MetricsServer(SidecarMetrics().registry, host="127.0.0.1", port=0) as server:
        assert (await scrape(server, "/healthz"))[0] == 200
        assert (await scrape(server, "/readyz"))[0] == 200
