"""deploy/ against a real Prometheus: it scrapes a running sidecar fed with traffic, loads the recording and
alert rules, and every dashboard panel query and every rule expression is evaluated through its HTTP API.

Needs the ``prometheus`` binary (Debian: ``apt-get install prometheus``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import DEMO_ROLLOUT, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.conversations import Turn, turn_trace
from tests.support.feedback import VERDICT, create_feedback_topics, send_feedback
from tests.support.judge import SECRET_KEY
from tests.support.prometheus_server import PrometheusServer, prometheus_binary, rules_with_short_for
from tests.support.sessions import create_session_topic, produce_turns
from tests.support.sidecar_process import SidecarProcess, free_port, produce_traces, sidecar_config
from tests.support.trace_scope import openinference_agent_with_llm_child, produce_records

pytestmark = pytest.mark.skipif(
    prometheus_binary() is None,
    reason="the prometheus binary is not installed (apt-get install prometheus; .ci/run installs it)",
)

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "scoring-sidecar.json"
RULE_FILES = sorted((DEPLOY / "prometheus").glob("*.yml"))
POISON = b"\x0a\xff\xff\xff\xff not OTLP"

# Dashboard variables as Grafana sends them with "All" selected; interval macros at a test-sized window.
SUBSTITUTIONS = {
    "$__rate_interval": "30s",
    "$__interval": "5s",
    "$__range": "5m",
    "$scorer": ".*",
    "$agent": ".*",
    "$judge_model": ".*",
    "$version_agent": ".*",
    "$version_scorer": ".*",
}

# Panel targets allowed to return no data in this test, each with its reason. Keep it empty if you can.
NO_DATA_EXPECTED: dict[str, str] = {}


def dashboard_targets() -> Iterator[tuple[str, str, str]]:
    """(panel title, refId, expr) for every query of every panel, rows' nested panels included."""
    dashboard = json_load(DASHBOARD)

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    for panel in walk(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield panel["title"], target["refId"], target["expr"]


def json_load(path: Path) -> Any:
    return json.loads(path.read_text())


def substitute(expr: str) -> str:
    for name, value in sorted(SUBSTITUTIONS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name[1:] + "}", value).replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def rule_expressions() -> Iterator[tuple[str, str]]:
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                yield rule.get("record") or rule["alert"], rule["expr"]


def finite_samples(body: dict[str, Any]) -> list[float]:
    result = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        result = [{"value": result}]
    return [float(r["value"][1]) for r in result if not math.isnan(float(r["value"][1]))]


async def test_dashboard_and_rules_against_a_real_prometheus_scraping_the_sidecar(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    started = time.monotonic()

    async def judge(body: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.01)
        return dataclasses.replace(heuristic_reply(body), cost=0.0001)  # provider-reported cost, as OpenRouter

    judge_server.reset(judge)
    spans = await new_topic("spans", partitions=2)
    scores, dead = await new_topic("scores", partitions=1), await new_topic("dead", partitions=1)
    feedback = await create_feedback_topics(kafka_bootstrap, unique_name, new_topic, partitions=1)
    # support-bot's second version beside its first from the start: the version comparisons have runs to compare.
    generator = TrafficGenerator(seed=17, rollout=dataclasses.replace(DEMO_ROLLOUT, after=0))
    await produce_traces(kafka_bootstrap, spans, list(generator.traces(20)), poison={3: POISON})
    # An agent span without its instructions (they are on its LLM child): prompt alignment judges it degraded.
    degraded = openinference_agent_with_llm_child()
    await produce_records(kafka_bootstrap, spans, [(degraded.key, r) for r in degraded.records])
    metrics_port = free_port()
    sidecar = SidecarProcess(
        sidecar_config(
            bootstrap=kafka_bootstrap,
            spans_topic=spans,
            scores_topic=scores,
            dead_topic=dead,
            group=unique_name("group"),
            judge_url=judge_server.url,
            metrics_port=metrics_port,
            scorers=[
                {"id": "prompt-alignment", "kind": "prompt-alignment", "judge": "default"},
                {"id": "similarity", "kind": "content-similarity", "sampling": 0.5},  # sampled_out skips
                {"id": "alignment-capped", "kind": "prompt-alignment", "judge": "capped"},
                # Whole traces: buffered, ready by reason, assembly wait, late spans (at 0).
                {"id": "whole", "kind": "content-similarity", "targets": {"scope": "trace"}},
                # Conversations: turns through the internal topic, windows closed after a second of quiet.
                {"id": "frustration", "kind": "user-frustration", "judge": "default", "targets": {"scope": "session"}},
                # Can the scores be trusted: a boolean judge in YAML with a canary, and human feedback on it and on
                # prompt alignment (numbers) joined to their scores.
                {**VERDICT, "canary": {"dataset": str(canary_dataset(tmp_path)), "every_s": 1}},
            ],
            runtime={"trace_buffer": {"idle_s": 0.5}},
        ),
        tmp_path / "sidecar",
        env={"JUDGE_API_KEY": SECRET_KEY},
    )
    # A second judge with a tiny hourly cap: its first runs are judged, later ones shed (spend, cap, shed and
    # paused series), while the default judge keeps being called (latency, tokens).
    internal = unique_name("turns")
    await create_session_topic(kafka_bootstrap, internal, 1)
    sidecar.config["sessions"] = {"topic": internal, "idle_s": 1}
    sidecar.config["versions"] = {"min_runs": 2}  # a comparison decides its reference window after a few runs
    sidecar.config["feedback"] = feedback.config()
    judges = sidecar.config["judges"]
    judges["capped"] = {**judges["default"], "model": "openai/gpt-4o", "spend_cap_usd_per_hour": 0.002}
    sidecar.workdir.mkdir()
    prometheus = PrometheusServer(tmp_path / "prometheus", targets=[f"127.0.0.1:{metrics_port}"], rule_files=RULE_FILES)
    sidecar.start()
    prometheus.start()
    try:
        await asyncio.gather(sidecar.wait_ready(), prometheus.wait_ready())

        async def traffic() -> None:  # keeps flowing while Prometheus scrapes, so every rate has data
            said = 0
            while True:
                traces = list(generator.traces(6))
                await produce_traces(kafka_bootstrap, spans, traces)
                # People label them as they arrive (their feedback waits for the scores): half disagree.
                await send_feedback(
                    kafka_bootstrap,
                    feedback.feedback,
                    [
                        {"traceId": t.trace_id, "spanId": t.agent_span_id, "name": name, "value": value}
                        for i, t in enumerate(traces)
                        for name, value in (("verdict", i % 2 == 0), ("prompt-alignment", 0.9 if i % 2 else 0.2))
                    ],
                )
                # A new two-turn conversation every round: each closes a second after its last turn.
                conversation = f"conv-{said}"
                turns = [Turn("my order is late", "it ships today"), Turn("still late, this is annoying", "sorry")]
                await produce_turns(kafka_bootstrap, spans, [turn_trace(conversation, turn) for turn in turns])
                said += 1
                await asyncio.sleep(0.5)

        feeder = asyncio.create_task(traffic())
        try:
            needed = [
                "scoring_sidecar_score_count",
                "scoring_sidecar_judge_shed_total",
                'scoring_sidecar_judge_cost_usd_total{source="provider"}',
                "scoring_sidecar_judge_spend_cap_usd",
                'scoring_sidecar_score_count{scorer="frustration"}',
                "scoring_sidecar_version_delta_upper",
                "scoring_sidecar_judge_human_kappa >= -1",  # finite: both verdicts given and judged
                "scoring_sidecar_judge_human_mae >= 0",
                "scoring_sidecar_canary_agreement",
            ]
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                found = [bool((await prometheus.query(f"count({m})"))["data"]["result"]) for m in needed]
                if all(found):
                    break
                await asyncio.sleep(0.5)
            else:
                pytest.fail(f"series never scraped: {[m for m, f in zip(needed, found, strict=True) if not f]}")
            await asyncio.sleep(4)  # a few more scrapes and rule evaluations with traffic flowing
        finally:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder

        # The scrape itself: the target is up, scraped in OpenMetrics (exemplars kept).
        targets = (await prometheus.api("targets"))["data"]["activeTargets"]
        assert [t["health"] for t in targets] == ["up"], targets

        # Every panel query: valid, and returns data (a finite value) unless listed in NO_DATA_EXPECTED.
        problems: list[str] = []
        panel_count = 0
        for title, ref, expr in dashboard_targets():
            panel_count += 1
            body = await prometheus.query(substitute(expr))
            if body.get("status") != "success":
                problems.append(f"{title} [{ref}]: {body.get('errorType')}: {body.get('error')}")
            elif not finite_samples(body) and f"{title} [{ref}]" not in NO_DATA_EXPECTED:
                problems.append(f"{title} [{ref}]: no data")
        assert panel_count >= 20
        assert not problems, "\n".join(problems)

        # Template variables: each label_values() query finds values.
        for variable in json_load(DASHBOARD)["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
            assert match, variable
            body = await prometheus.api(f"label/{match[2]}/values", [("match[]", substitute(match[1]))])
            assert body["status"] == "success" and body["data"], (variable["name"], body)

        # Every rule expression is valid as a query, and Prometheus evaluates every loaded rule without error.
        for name, expr in rule_expressions():
            body = await prometheus.query(expr)
            assert body.get("status") == "success", (name, body)
        groups = (await prometheus.api("rules"))["data"]["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        assert set(loaded) == {name for name, _ in rule_expressions()}
        for name, rule in loaded.items():
            assert rule["health"] == "ok", (name, rule.get("lastError"))
        # The recording rules the alignment alert reads have data from the live sidecar.
        for record in (
            "scorer_agent:scoring_sidecar_score:mean30m",
            "scorer_agent:scoring_sidecar_score_count:increase30m",
        ):
            assert finite_samples(await prometheus.query(record)), record
        # Exemplars: scores carry their trace ids.
        now = time.time()
        exemplars = await prometheus.api(
            "query_exemplars", {"query": "scoring_sidecar_score_bucket", "start": str(now - 120), "end": str(now)}
        )
        assert exemplars["status"] == "success"
        assert any(
            re.fullmatch(r"[0-9a-f]{32}", e["labels"]["trace_id"]) for s in exemplars["data"] for e in s["exemplars"]
        )
        assert sidecar.terminate() == 0
    finally:
        prometheus.stop()
        sidecar.kill()
    assert time.monotonic() - started < 60


def canary_dataset(workdir: Path, n: int = 6) -> Path:
    """A labelled set for a canary: one-turn runs, each with the verdict a person gave it (every other one true)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "canary.jsonl"
    rows = [{"input": f"question {i} [{'yes' if i % 2 else 'no'}]", "output": f"answer {i}", "expected": i % 2 == 1}
            for i in range(n)]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def dead_port() -> int:
    """A loopback port nobody listens on: bound, then closed (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_judge_fires_judge_paused_in_a_real_prometheus(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
) -> None:
    started = time.monotonic()
    port = dead_port()
    judge_model = "openai/gpt-4o-mini"
    spans = await new_topic("spans", partitions=2)
    scores, dead = await new_topic("scores", partitions=1), await new_topic("dead", partitions=1)
    await produce_traces(kafka_bootstrap, spans, list(TrafficGenerator(seed=31).traces(8)))
    metrics_port = free_port()
    sidecar = SidecarProcess(
        sidecar_config(
            bootstrap=kafka_bootstrap,
            spans_topic=spans,
            scores_topic=scores,
            dead_topic=dead,
            group=unique_name("group"),
            judge_url=f"http://127.0.0.1:{port}/v1",
            metrics_port=metrics_port,
            judge={"timeout_s": 2, "circuit_breaker": {"failure_threshold": 5, "reset_after_s": 1}},
            scorers=[{"id": "prompt-alignment", "kind": "prompt-alignment", "judge": "default"}],
        ),
        tmp_path / "sidecar",
        env={"JUDGE_API_KEY": SECRET_KEY},
    )
    sidecar.workdir.mkdir()
    # The project's rules, with every `for:` cut to 3 s (the real JudgePaused waits 5 min): pending, then firing.
    rules = rules_with_short_for(RULE_FILES, tmp_path / "rules", 3)
    prometheus = PrometheusServer(tmp_path / "prometheus", targets=[f"127.0.0.1:{metrics_port}"], rule_files=rules)
    sidecar.start()
    prometheus.start()
    try:
        await prometheus.wait_ready()

        # /api/v1/alerts, polled: the judge alert must be seen pending, then firing.
        seen: list[str] = []
        alert: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while "firing" not in seen:
            assert time.monotonic() < deadline, f"ScoringSidecarJudgePaused never fired (seen: {seen})"
            assert sidecar.process is not None and sidecar.process.poll() is None, sidecar.log_path.read_text()
            alerts = (await prometheus.api("alerts"))["data"]["alerts"]
            for each in alerts:
                if each["labels"]["alertname"] == "ScoringSidecarJudgePaused":
                    alert = each
                    if not seen or seen[-1] != each["state"]:
                        seen.append(each["state"])
            await asyncio.sleep(0.2)
        assert seen == ["pending", "firing"], seen
        assert alert["labels"]["judge_model"] == judge_model and alert["labels"]["severity"] == "page"
        assert alert["annotations"]["summary"] == f"Judge {judge_model} is not answering: its scorers' runs are held"
        assert alert["annotations"]["runbook_url"].endswith("#runbook-scoringsidecarjudgepaused")

        # The state behind it, as Prometheus scraped it: held by the circuit breaker, not paused for a reason.
        async def value(expr: str) -> list[float]:
            return finite_samples(await prometheus.query(expr))

        assert await value(f'scoring_sidecar_judge_paused{{judge_model="{judge_model}"}}') == [1.0]
        assert await value('scoring_sidecar_judge_state{state=~"open|half_open"} == 1') == [1.0]
        assert await value("sum(scoring_sidecar_judge_pause_reason)") == [0.0]
        assert (await value("sum(scoring_sidecar_judge_held_runs)"))[0] > 0
        # Every refused connection is a failed call: connection_error is all there is.
        refused = (await value('sum(scoring_sidecar_judge_calls_total{outcome="connection_error"})'))[0]
        assert refused >= 5
        assert await value("sum(scoring_sidecar_judge_calls_total)") == [refused]
        # JudgeErrorRate's ratio counts them: 100 % of the calls fail. (Whether that alert also fires depends on
        # its >= 20 calls in 5 min guard, i.e. on reset_after_s; Alertmanager inhibits it under JudgePaused.)
        ratio = "judge_model:scoring_sidecar_judge_call_errors:rate5m / judge_model:scoring_sidecar_judge_calls:rate5m"
        assert await value(ratio) == [1.0]
        assert sidecar.terminate() == 0  # held runs are left uncommitted, the stop is clean
    finally:
        prometheus.stop()
        sidecar.kill()
    # The root cause, logged once when the circuit opened (then the first failed probe, and every tenth); no key.
    log = sidecar.log_path.read_text()
    cause = f"cannot connect to 127.0.0.1:{port}: Connection refused"
    opened = [line for line in log.splitlines() if "circuit open after 5 consecutive failed calls" in line]
    assert len(opened) == 1 and cause in opened[0], opened
    assert [line for line in log.splitlines() if "probe call 1 failed" in line and cause in line]
    assert "SECRET" not in log
    assert time.monotonic() - started < 60


async def test_a_judge_whose_answers_change_fires_judge_drift_in_a_real_prometheus_and_a_steady_one_does_not(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    """Two judges written in YAML, each with a canary scored every second: the scripted judge answers both as their
    labels say, then (once the drifting one's baseline is scraped) answers the drifting one the other way round.
    The project's rules (``for:`` cut to 3 s) fire JudgeDrift for it, never for the steady one."""
    drifted = asyncio.Event()

    def judge(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        system = next(m["content"] for m in messages if m["role"] == "system")
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        passed = "[yes]" in prompt
        if system.startswith("DRIFTING") and drifted.is_set():
            passed = not passed
        return Reply.json({"reason": "as it reads", "passed": passed})

    judge_server.reset(judge)
    spans = await new_topic("spans", partitions=1)
    scores, dead = await new_topic("scores", partitions=1), await new_topic("dead", partitions=1)
    dataset = str(canary_dataset(tmp_path / "canary", n=8))
    canary = {"dataset": dataset, "every_s": 1, "min_agreement": 0.8, "max_drift": 0.1}
    judges = [
        {**VERDICT, "id": name, "options": {**VERDICT["options"], "instructions": f"{name.upper()}: is it right?"},
         "canary": canary}
        for name in ("steady", "drifting")
    ]  # fmt: skip
    metrics_port = free_port()
    sidecar = SidecarProcess(
        sidecar_config(
            bootstrap=kafka_bootstrap,
            spans_topic=spans,
            scores_topic=scores,
            dead_topic=dead,
            group=unique_name("group"),
            judge_url=judge_server.url,
            metrics_port=metrics_port,
            scorers=judges,
        ),
        tmp_path / "sidecar",
        env={"JUDGE_API_KEY": SECRET_KEY},
    )
    sidecar.workdir.mkdir()
    rules = rules_with_short_for(RULE_FILES, tmp_path / "rules", 3)
    prometheus = PrometheusServer(tmp_path / "prometheus", targets=[f"127.0.0.1:{metrics_port}"], rule_files=rules)
    sidecar.start()
    prometheus.start()
    try:
        await asyncio.gather(sidecar.wait_ready(), prometheus.wait_ready())

        async def value(expr: str) -> list[float]:
            return finite_samples(await prometheus.query(expr))

        deadline = time.monotonic() + 30
        while await value('scoring_sidecar_canary_baseline_agreement{scorer="drifting"}') != [1.0]:
            assert time.monotonic() < deadline, "the drifting judge's canary baseline was never scraped"
            await asyncio.sleep(0.2)
        assert await value('scoring_sidecar_canary_agreement{scorer="steady"}') == [1.0]
        drifted.set()

        seen: dict[str, list[str]] = {"steady": [], "drifting": []}
        alert: dict[str, Any] = {}
        deadline = time.monotonic() + 45
        while "firing" not in seen["drifting"]:
            assert time.monotonic() < deadline, f"JudgeDrift never fired (seen: {seen})"
            for each in (await prometheus.api("alerts"))["data"]["alerts"]:
                if each["labels"]["alertname"] == "JudgeDrift":
                    states = seen[each["labels"]["scorer"]]
                    if not states or states[-1] != each["state"]:
                        states.append(each["state"])
                    alert = each
            await asyncio.sleep(0.2)
        assert seen == {"steady": [], "drifting": ["pending", "firing"]}, seen
        assert alert["labels"]["severity"] == "page"
        assert alert["annotations"]["summary"] == "Judge drifting drifted: its canary agrees on 0% of the labels"
        # The state behind it: the drifting judge now disagrees with every label, the steady one agrees with all.
        assert await value('scoring_sidecar_canary_agreement{scorer="drifting"}') == [0.0]
        assert await value('scoring_sidecar_canary_agreement{scorer="steady"}') == [1.0]
        assert await value('scoring_sidecar_canary_baseline_agreement{scorer="drifting"}') == [1.0]
        # Canary runs are kept out of the score and run series the alignment alerts read.
        assert await value("count(scoring_sidecar_score_count)") == []
        assert (await value('sum(scoring_sidecar_canary_items_total{outcome="scored"})'))[0] >= 32
        assert sidecar.terminate() == 0
    finally:
        prometheus.stop()
        sidecar.kill()
