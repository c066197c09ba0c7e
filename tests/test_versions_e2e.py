"""Agent versions through the broker and a process (docs/versions.md): a real ``scoring-sidecar run`` scores a canary
of support-bot 3.2.0 beside 3.1.0, worse by 0.15 on helpfulness and equal on tone, with two judges written in YAML
answered by a scripted judge; a real Prometheus scrapes it with the project's rules. The verdict gauge reaches -1 for
helpfulness and stays 0 for tone, AgentVersionRegression fires, and ``scoring-sidecar compare`` over the same window
prints the same verdicts.

Needs the ``prometheus`` binary (Debian: ``apt-get install prometheus``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.backfill.window import utc_text
from sidecar.embedded.traffic import AgentProfile, Conversation, GeneratedTrace, agent_trace
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY
from tests.support.prometheus_server import PrometheusServer, prometheus_binary, rules_with_short_for
from tests.support.sidecar_process import SidecarProcess, free_port, produce_traces, sidecar_config

pytestmark = [
    pytest.mark.skipif(prometheus_binary() is None, reason="the prometheus binary is not installed"),
    pytest.mark.slow,
]

RULE_FILES = sorted((Path(__file__).resolve().parent.parent / "deploy" / "prometheus").glob("*.yml"))
AGENT = "support-bot"
STABLE, CANARY = "3.1.0", "3.2.0"
# The judged qualities ride in each answer (the scripted judge reads them back): a drop of 0.15 on helpfulness for
# the canary, the same tone. Scores on 0-100, sd about 8 points.
MEANS = {STABLE: {"helpfulness": 80, "tone": 70}, CANARY: {"helpfulness": 65, "tone": 70}}
TAG = re.compile(r"\[helpfulness=(\d+) tone=(\d+)\]")


def judge(scorer: str) -> dict[str, Any]:
    return {
        "id": scorer,
        "kind": "llm-judge",
        "judge": "default",
        "options": {
            "instructions": f"You rate the {scorer} of a support agent's answer.",
            "prompt": "The customer wrote: {{ input }}\nThe agent answered: {{ output }}",
            "output": {"type": "number", "min": 0, "max": 100},
            "better": "higher",
        },
    }


def traces(n: int, *, stable_only: int, seed: int = 3) -> list[GeneratedTrace]:
    """support-bot traces: ``stable_only`` of 3.1.0 alone, then 3.1.0 and 3.2.0 at half the traffic each."""
    rng = random.Random(seed)
    made = []
    for i in range(n):
        version = STABLE if i < stable_only or rng.random() < 0.5 else CANARY
        helpfulness, tone = (round(min(100, max(0, rng.gauss(MEANS[version][s], 8)))) for s in ("helpfulness", "tone"))
        answer = f"Here is how to reset it. [helpfulness={helpfulness} tone={tone}]"
        profile = AgentProfile(AGENT, "helpdesk", "Be polite.", "genai", (), version=version)
        trace_id, span_id, request = agent_trace(
            profile, Conversation("excellent", "How do I reset my password?", answer)
        )
        made.append(GeneratedTrace(trace_id, span_id, AGENT, "excellent", request, version=version))
    return made


async def scripted(body: dict[str, Any]) -> Reply:
    messages = body.get("messages", [])
    system = next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")
    user = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    found = TAG.search(user)
    assert found is not None, user
    score = int(found[1]) if "helpfulness" in system else int(found[2])
    return Reply.json({"reason": "read from the answer", "score": score})


async def compare(config: Path, scorer: str, start: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecar.cli",
        "compare",
        "--config",
        str(config),
        "--agent",
        AGENT,
        "--scorer",
        scorer,
        "--from",
        start,
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "JUDGE_API_KEY": SECRET_KEY},  # the same file as `run`, its ${VAR}s set
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


async def test_a_worse_canary_pages_and_compare_agrees(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    started = time.monotonic()
    judge_server.reset(scripted)
    spans = await new_topic("spans", partitions=2)
    scores, dead = await new_topic("scores", partitions=2), await new_topic("dead", partitions=1)
    window_start = utc_text(int(time.time() * 1000) - 1000)
    await produce_traces(kafka_bootstrap, spans, traces(700, stable_only=60))
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
            scorers=[judge("helpfulness"), judge("tone")],
        ),
        tmp_path / "sidecar",
        env={"JUDGE_API_KEY": SECRET_KEY},
    )
    sidecar.workdir.mkdir()
    rules = rules_with_short_for(RULE_FILES, tmp_path / "rules", 2)
    prometheus = PrometheusServer(tmp_path / "prometheus", targets=[f"127.0.0.1:{metrics_port}"], rule_files=rules)
    sidecar.start()
    prometheus.start()
    compared = {"agent": AGENT, "version": CANARY, "reference": STABLE}
    try:
        await asyncio.gather(sidecar.wait_ready(), prometheus.wait_ready())

        async def values(expr: str) -> list[float]:
            body = await prometheus.query(expr)
            return [float(r["value"][1]) for r in body["data"]["result"]]

        # Every trace scored by both judges, and the alert firing with the comparison's labels.
        fired: dict[str, Any] = {}
        deadline = time.monotonic() + 150
        while True:
            assert time.monotonic() < deadline, (fired, sidecar.log_path.read_text()[-3000:])
            assert sidecar.process is not None and sidecar.process.poll() is None, sidecar.log_path.read_text()
            alerts = (await prometheus.api("alerts"))["data"]["alerts"]
            fired = next(
                (a for a in alerts if a["labels"]["alertname"] == "AgentVersionRegression" and a["state"] == "firing"),
                fired,
            )
            scored = await values("sum(scoring_sidecar_version_runs)")
            if fired and scored == [1400.0]:
                break
            await asyncio.sleep(0.5)
        assert {k: fired["labels"][k] for k in ("agent", "scorer", "version", "reference", "severity")} == {
            **compared,
            "scorer": "helpfulness",
            "severity": "page",
        }
        assert (
            fired["annotations"]["summary"] == f"Version {CANARY} of agent {AGENT} is worse than {STABLE} (helpfulness)"
        )

        # The gauges: -1 for helpfulness, and tone never anything but 0 while Prometheus watched.
        selector = ",".join(f'{k}="{v}"' for k, v in compared.items())
        assert await values(f'scoring_sidecar_version_verdict{{{selector},scorer="helpfulness"}}') == [-1.0]
        assert await values(f'max_over_time(scoring_sidecar_version_verdict{{{selector},scorer="tone"}}[5m])') == [0.0]
        assert await values(f'min_over_time(scoring_sidecar_version_verdict{{{selector},scorer="tone"}}[5m])') == [0.0]
        window = await values(f'scoring_sidecar_version_comparison{{{selector},reference_window="concurrent"}}')
        assert window == [1.0, 1.0]
        gauges = {}
        for scorer in ("helpfulness", "tone"):
            gauges[scorer] = {
                name: (await values(f'scoring_sidecar_version_{name}{{{selector},scorer="{scorer}"}}'))[0]
                for name in ("delta", "delta_lower", "delta_upper", "verdict")
            }
        assert gauges["helpfulness"]["delta"] == pytest.approx(-0.15, abs=0.03)
        assert gauges["helpfulness"]["delta_upper"] < -0.05
        assert gauges["tone"]["delta_lower"] < 0 < gauges["tone"]["delta_upper"]
        assert not [a for a in alerts if a["labels"]["alertname"] == "AgentVersionImprovement"]

        # compare over the same window, from the score topic: the same verdicts, the same comparison.
        config = sidecar.workdir / "sidecar.yaml"
        for scorer in ("helpfulness", "tone"):
            result = (await compare(config, scorer, window_start))["comparison"]
            assert (result["version"], result["reference"], result["referenceWindow"]) == (CANARY, STABLE, "concurrent")
            assert result["verdict"] == gauges[scorer]["verdict"]
            assert result["delta"] == pytest.approx(gauges[scorer]["delta"], abs=1e-6)
            assert result["lower"] == pytest.approx(gauges[scorer]["delta_lower"], abs=0.01)
            assert result["upper"] == pytest.approx(gauges[scorer]["delta_upper"], abs=0.01)
        assert sidecar.terminate() == 0
    finally:
        prometheus.stop()
        sidecar.kill()
    assert time.monotonic() - started < 240
