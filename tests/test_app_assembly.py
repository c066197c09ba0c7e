"""One assembly: scorers call only declared judges, through their gates; kinds and options from the registry."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import assemble
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.runtime.attempt import attempt_scorer
from sidecar.scorers.catalog import kinds_table
from sidecar.scoring import AgentRunInput
from sidecar.scoring.agent import assistant_message
from sidecar.settings import SettingsError, load_eval_settings, load_settings
from sidecar.testing.judge_server import JudgeServer

ROOT = Path(__file__).resolve().parent.parent


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,  # so that `python: tests.support...` imports
        timeout=120,
        check=False,
    )


def config(judge_url: str, scorer: str, *, judge_extra: str = "") -> str:
    """A configuration whose only scorer (``scorer``: YAML list item text) starts on line 9."""
    head = (
        "kafka:\n"
        "  bootstrap_servers: localhost:9092\n"
        "judges:\n"
        "  default:\n"
        "    model: openai/gpt-4o-mini\n"
        f"    api_base: {judge_url}\n"
        f"    api_key: sk-assembly-test{judge_extra}\n"
        "scorers:\n"
    )
    return head + textwrap.indent(scorer, "  ")


@pytest.mark.parametrize(
    ("factory", "options", "expected"),
    [
        # Another model altogether.
        (
            "create_sneaky_scorer",
            "{}",
            "step generate_score calls judge model 'openai/gpt-4o', which is not a declared judge "
            "(declared judges: default = openai/gpt-4o-mini)",
        ),
        # The declared model, but without the declared judge's endpoint and key: another client, ungated.
        (
            "create_sneaky_scorer",
            "{model: openai/gpt-4o-mini}",
            "same model as judges.default but different api_base, api_key",
        ),
        # One step on the declared judge, the other not: the step is named.
        ("create_half_sneaky_scorer", "{}", "step generate_score calls judge model 'openai/gpt-4o'"),
    ],
)
def test_a_scorer_calling_an_undeclared_judge_fails_validate_with_its_key_and_line(
    tmp_path: Path, factory: str, options: str, expected: str
) -> None:
    scorer = (
        f"- id: sneaky\n  kind: 'python: tests.support.custom_scorer:{factory}'\n  judge: default\n"
        f"  options: {options}\n"
    )
    path = tmp_path / "sidecar.yaml"
    path.write_text(config("http://judge.internal/v1", scorer))
    done = validate(path)
    assert done.returncode == 2, done.stdout
    assert "scorers[0].kind (line 10): " in done.stderr and expected in done.stderr, done.stderr
    assert "sk-assembly-test" not in done.stderr


def test_validate_accepts_an_eval_configuration(tmp_path: Path) -> None:
    done = validate(ROOT / "examples" / "eval.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "config OK for eval: 2 scorers (prompt-alignment, similarity), 1 judge (default); "
        "no kafka section, which `run` needs"
    )
    # The same file is not a live configuration: `run` says what is missing, with no fake Kafka block.
    with pytest.raises(SettingsError) as caught:
        load_settings(ROOT / "examples" / "eval.yaml")
    assert [str(p) for p in caught.value.problems] == ["kafka: required key is missing"]


def test_an_option_typo_gets_did_you_mean_with_its_line() -> None:
    text = config(
        "http://judge.internal/v1",
        "- id: pa\n  kind: prompt-alignment\n  judge: default\n  options:\n    evaluation_mod: user\n",
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(text)
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ("scorers[0].options.evaluation_mod", 13)
    assert "unknown option of kind 'prompt-alignment' (did you mean 'evaluation_mode'?" in problem.message
    # Mastra's camelCase spelling is accepted too.
    ok = config(
        "http://judge.internal/v1",
        "- id: pa\n  kind: prompt-alignment\n  judge: default\n  options: {evaluationMode: user}\n",
    )
    assert load_settings(ok).scorers[0].options == {"evaluationMode": "user"}


def test_a_python_factory_declared_as_a_kind_gets_its_options_checked() -> None:
    text = config(
        "http://judge.internal/v1",
        "- id: strict\n  kind: 'python: tests.support.custom_scorer:create_strictness_scorer'\n"
        "  judge: default\n  options: {threshhold: 0.9}\n",
    )
    settings = load_eval_settings(text)
    with pytest.raises(SettingsError) as caught:
        assemble(settings)
    [problem] = caught.value.problems
    assert problem.path == "scorers[0].kind" and problem.line == 10
    assert "options of tests.support.custom_scorer:create_strictness_scorer ('test-strictness')" in problem.message
    assert "threshhold" in problem.message


async def test_a_python_scorer_cannot_step_around_its_judges_spend_cap(judge_server: JudgeServer) -> None:
    """A user's scorer on the declared judge: every call goes through that judge's gate, so a spend cap of
    ~0 admits at most the first call; the others are shed and counted, not sent."""
    text = config(
        judge_server.url,
        "- id: strict\n  kind: 'python: tests.support.custom_scorer:create_strictness_scorer'\n  judge: default\n",
        judge_extra="\n    spend_cap_usd_per_hour: 0.000000001",
    )
    settings = load_eval_settings(text)
    metrics = SidecarMetrics()
    assembly = assemble(settings, metrics=metrics)
    [configured] = assembly.scorers
    judge = assembly.judges["default"]
    assert set(configured.scorer.clients.values()) == {judge.client}  # type: ignore[union-attr]
    assert judge.client.gate is judge.gate

    def request(i: int) -> ScorerRunRequest:
        target = SpanTarget(trace_id=f"{i:032x}", span_id=f"{i:016x}")
        return ScorerRunRequest(target=target, input=AgentRunInput(), output=(assistant_message(f"answer {i}"),))

    attempts = await asyncio.gather(*(attempt_scorer(configured.scorer, request(i), timeout_s=10) for i in range(10)))
    await assembly.aclose()
    shed = [a for a in attempts if a.shed_reason == "spend_cap"]
    sent = len(judge_server.requests)
    assert sent <= 1 and len(shed) == 10 - sent
    assert judge.gate.shed["spend_cap"] == len(shed)
    calls = metrics.registry.get_sample_value(
        "scoring_sidecar_judge_calls_total", {"judge_model": "openai/gpt-4o-mini", "outcome": "ok"}
    )
    assert calls == sent  # the call that went out was counted, by the judge's own client


def test_the_docs_list_every_prebuilt_kind_as_the_registry_declares_it() -> None:
    page = (ROOT / "docs" / "scorers.md").read_text()
    table = page.split("<!-- kinds:begin (generated by `scoring-sidecar kinds`) -->\n", 1)[1].split("\n<!-- kinds:end")[
        0
    ]
    assert table == kinds_table(), "regenerate the table in docs/scorers.md with `scoring-sidecar kinds`"
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "kinds"], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.startswith(kinds_table())


def test_validate_estimates_judge_load_and_cost_for_a_traffic_rate() -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "sidecar.cli", "validate", "--config", str(ROOT / "examples" / "sidecar.yaml"),
            "--traffic", "3000/min", "--call-tokens", "1000/200",
        ],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # prompt-alignment: 2 judge calls per run, sampling 0.25 → 500 calls per 1,000 traces; at 50 traces/s and
    # gpt-4o-mini list prices (0.15 / 0.60 USD per million tokens): 25 calls/s × 0.00027 USD × 3600.
    row = next(line for line in lines if line.strip().startswith("prompt-alignment"))
    assert row.split()[-4:] == ["2", "0.25", "500", "24.30"], row
    assert "total: 25.0 judge calls/s, about 24.30 USD/hour" in done.stdout
    assert "over its cap of 5: about 79 % of its runs would be shed" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(ROOT / "examples" / "sidecar.yaml"),
         "--traffic", "lots"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "write a rate such as 50/s" in bad.stderr


def test_validate_estimates_a_conversation_scorer_once_per_conversation_with_every_turn_in_its_prompt() -> None:
    def validate(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "validate", "--config",
             str(ROOT / "examples" / "eval-conversations.yaml"), "--traffic", "60/s", "--call-tokens", "1000/200",
             *extra],
            capture_output=True, text=True, cwd=ROOT, check=False,
            env={**os.environ, "OPENAI_API_KEY": "sk-test", "JUDGE_MODEL": "openai/gpt-4o-mini"},
        )  # fmt: skip

    done = validate("--turns-per-conversation", "4")
    assert done.returncode == 0, done.stderr
    assert "once per conversation of 4 traces (turns), its prompt quoting every turn" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.strip().startswith("frustration"))
    # One judge call per conversation: 1,000 traces are 250 conversations of 4 turns, each call quoting the
    # 4 turns (4 × 1,000 input tokens). At 60 traces/s, 15 calls/s × (4,000 × 0.15 + 200 × 0.60) / 1e6 USD
    # × 3,600 s = 38.88 USD/hour at gpt-4o-mini's list prices.
    assert row.split()[1:] == ["(*)", "openai/gpt-4o-mini", "4000", "1", "1", "250", "38.88"], row
    assert validate("--turns-per-conversation", "4").stdout == done.stdout  # the same answer twice
    refused = validate("--turns-per-conversation", "0.5")
    assert refused.returncode == 2 and "a conversation has at least one turn" in refused.stderr


def test_the_live_sinks_follow_the_exporters_settings() -> None:
    """Phoenix and OTLP sinks from settings: annotator kinds by scorer kind, the copied resource attributes,
    the exporters' series (dropped items per reason at 0, a disabled-signal series only for an optional
    signal that is on), and a refusal as a readiness problem."""
    from prometheus_client import generate_latest

    from exporters.otlp import OtlpTraceSink
    from exporters.phoenix import PhoenixAnnotationSink

    text = textwrap.dedent(
        """
        kafka: {bootstrap_servers: localhost:9092}
        judges:
          default: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:9/v1", api_key: sk-x}
        scorers:
          - {id: prompt-alignment, kind: prompt-alignment, judge: default}
          - {id: similarity, kind: content-similarity}
        exporters:
          otlp: {endpoint: "http://127.0.0.1:4318", protocol: http/protobuf, events: both}
          phoenix: {base_url: "http://127.0.0.1:6006/", api_key: px-secret}
        """
    )
    metrics = SidecarMetrics()
    assembly = assemble(load_settings(text), metrics=metrics, sinks=True)
    by_name = {sink.name: sink for sink in assembly.sinks}
    assert sorted(by_name) == ["kafka_scores", "otlp", "phoenix"]
    phoenix = by_name["phoenix"]
    assert isinstance(phoenix, PhoenixAnnotationSink)
    assert phoenix.url == "http://127.0.0.1:6006/v1/span_annotations"
    assert phoenix._kinds == {"prompt-alignment": "LLM", "similarity": "CODE"}
    assert "px-secret" not in repr(phoenix)
    otlp = by_name["otlp"]
    assert isinstance(otlp, OtlpTraceSink) and otlp.sends_logs
    assert "openinference.project.name" in otlp.resource_attributes and "service.name" not in otlp.resource_attributes

    exposition = generate_latest(metrics.registry).decode()
    assert 'scoring_sidecar_exporter_signal_disabled{exporter="otlp",signal="logs"} 0.0' in exposition
    for reason in ("rejected", "span_not_found"):
        assert f'scoring_sidecar_exporter_dropped_total{{exporter="phoenix",reason="{reason}"}} 0.0' in exposition
    assert 'scoring_sidecar_exporter_dropped_total{exporter="kafka_scores",reason="rejected"} 0.0' in exposition

    assert assembly.exporters_refused() is None
    phoenix._problem = "Phoenix at http://127.0.0.1:6006 refuses the API key (HTTP 401)"
    assert assembly.exporters_refused() == "phoenix: Phoenix at http://127.0.0.1:6006 refuses the API key (HTTP 401)"


def test_langfuse_datadog_and_the_dead_letters_are_assembled_and_ingest_keeps_what_they_read() -> None:
    """Both new exporters from settings (keys from the block, never in repr), the score dead letters
    checkpointed after the sinks with their own series, and ingest keeping the deployment environment for
    them whether or not OTLP is on."""
    from prometheus_client import generate_latest

    from exporters.datadog import DatadogEvaluationSink
    from exporters.dead_letters import ScoreDeadLetters
    from exporters.langfuse import LangfuseScoreSink
    from sidecar.app.serve import kept_resource_attributes

    text = textwrap.dedent(
        """
        kafka: {bootstrap_servers: localhost:9092}
        judges:
          default: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:9/v1", api_key: sk-x}
        scorers:
          - {id: prompt-alignment, kind: prompt-alignment, judge: default}
        exporters:
          kafka_scores: {topic: scores}
          langfuse: {base_url: "http://127.0.0.1:3000", public_key: pk-lf, secret_key: sk-lf-secret}
          datadog: {enabled: true, site: datadoghq.eu, api_key: dd-secret, thresholds: {prompt-alignment: {min: 0.5}}}
        """
    )
    settings = load_settings(text)
    metrics = SidecarMetrics()
    assembly = assemble(settings, metrics=metrics, sinks=True)
    by_name = {sink.name: sink for sink in assembly.sinks}
    assert sorted(by_name) == ["datadog", "kafka_scores", "langfuse"]
    langfuse, datadog = by_name["langfuse"], by_name["datadog"]
    assert isinstance(langfuse, LangfuseScoreSink) and langfuse.url == "http://127.0.0.1:3000/api/public/scores"
    assert isinstance(datadog, DatadogEvaluationSink)
    assert datadog.url == "https://api.datadoghq.eu/api/intake/llm-obs/v2/eval-metric"
    assert "sk-lf-secret" not in repr(langfuse) and "dd-secret" not in repr(datadog)
    [letters] = assembly.publishers
    assert isinstance(letters, ScoreDeadLetters) and letters.topic == "scores.dead_letter"
    exposition = generate_latest(metrics.registry).decode()
    for exporter in ("langfuse", "datadog", "dead_letters"):
        assert f'scoring_sidecar_exporter_dropped_total{{exporter="{exporter}",reason="rejected"}} 0.0' in exposition
        assert f'scoring_sidecar_exporter_up{{exporter="{exporter}"}} 1.0' in exposition
    kept = kept_resource_attributes(settings, assembly.scorers)
    assert kept == frozenset({"deployment.environment.name", "deployment.environment"})


def test_a_judge_without_a_price_shows_its_cost_and_spend_at_zero_from_the_start() -> None:
    # The demo's stand-in has no price: its calls cost nothing, and the cost panels read 0, not "no data".
    settings = load_eval_settings(
        "judges:\n  standin: {model: openai/scoring-sidecar-stand-in, api_key: x}\n"
        "scorers:\n  - {id: tox, kind: toxicity, judge: standin}\n  - {id: sim, kind: content-similarity}\n"
    )
    metrics = SidecarMetrics()
    assemble(settings, metrics=metrics)
    value = metrics.registry.get_sample_value
    judge = "openai/scoring-sidecar-stand-in"
    for source in ("estimated", "provider"):
        labels = {"judge_model": judge, "scorer": "tox", "source": source}
        assert value("scoring_sidecar_judge_cost_usd_total", labels) == 0
        assert value("scoring_sidecar_judge_cost_usd_total", {**labels, "scorer": "sim"}) is None  # no judge
    assert value("scoring_sidecar_judge_spend_usd", {"judge_model": judge}) == 0
