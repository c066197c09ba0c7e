"""``kind: llm-judge`` as a configured scorer: `validate` errors with their line, its fingerprint and score ids,
its facts (direction, what ingest keeps, the cost estimate), and its label in every destination."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import Tracer

from exporters.kafka_scores import score_record_json
from exporters.otlp.mapping import GEN_AI_EVALUATION_SCORE_LABEL, evaluation_attributes, run_span_attributes
from exporters.phoenix import span_annotation
from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import assemble
from sidecar.app.cost_estimate import estimate_costs
from sidecar.app.scorer_factory import build_scorers
from sidecar.app.serve import ingest_for, kept_resource_attributes, kept_span_attributes
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.core import names as n
from sidecar.core.scored import score_id_of
from sidecar.ingest import decode_traces
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.stages import OfflineRecord, offline_runs
from sidecar.scorers.custom.llm_judge_variables import variables_table
from sidecar.settings import SettingsError, load_eval_settings, load_settings
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import agent_run
from tests.support.otel import otlp_proto, record_spans

ROOT = Path(__file__).resolve().parent.parent

HEAD = """\
kafka:
  bootstrap_servers: localhost:9092
judges:
  default: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:9/v1", api_key: sk-test}
scorers:
"""


def judge_yaml(prompt: str, *, extra: str = "", output: str = "{type: boolean}", head: str = HEAD) -> str:
    """One llm-judge scorer; its prompt is a block scalar (the key on file line 12)."""
    body = f"""\
- id: policy
  kind: llm-judge
  judge: default
{textwrap.indent(extra, "  ")}  options:
    instructions: Decide whether the answer keeps the refund policy.
    output: {output}
    prompt: |
{textwrap.indent(prompt, "      ")}
"""
    return head + textwrap.indent(body, "  ")


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


# -- validate ----------------------------------------------------------------------------------------------------


def test_an_unknown_variable_fails_validate_with_its_line_and_a_did_you_mean(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(judge_yaml("The answer:\n{{ ouput }}\nThe agent: {{ span.attrs['x'] }}"))
    assert path.read_text().splitlines()[11].strip() == "prompt: |"
    done = validate(path)
    assert done.returncode == 2
    assert "scorers[0].options.prompt (line 12): template line 2: unknown variable 'ouput' (did you mean 'output'?" in (
        done.stderr
    )
    assert "template line 3: span offers its attributes by a written-out key: span.attributes['KEY']" in done.stderr


def test_a_template_syntax_error_and_a_filter_that_changes_a_value_fail_validate(tmp_path: Path) -> None:
    for prompt, expected in (
        ("{{ output }}\n{% if input %}\nno end", "template line 3: Unexpected end of template"),
        ("{{ output | upper }}", "changes a variable's text"),
        ("No variable at all.", "the template names no variable"),
    ):
        path = tmp_path / "sidecar.yaml"
        path.write_text(judge_yaml(prompt))
        done = validate(path)
        assert done.returncode == 2 and expected in done.stderr, (prompt, done.stderr)


def test_variables_a_live_run_cannot_fill_at_its_scope_are_errors_with_their_line(tmp_path: Path) -> None:
    prompt = "Answer: {{ output }}\nDocuments: {{ context }}\nExpected: {{ ground_truth }}"
    with pytest.raises(SettingsError) as raised:
        load_settings(judge_yaml(prompt))
    messages = [str(p) for p in raised.value.problems]
    assert messages == [
        "scorers[0].options.prompt (line 12): template line 2: context is never filled at scope span: retrieved "
        "documents come from the retriever spans under an agent span: set targets.scope: trace (eval datasets fill "
        "it from their context field)",
        "scorers[0].options.prompt (line 12): template line 3: ground_truth is never filled in live traffic: a live "
        "trace carries no expected answer: only eval datasets fill it (score it with `eval`)",
    ]
    # At scope trace the documents are there; ground truth still is not.
    with pytest.raises(SettingsError) as raised:
        load_settings(judge_yaml(prompt, extra="targets: {scope: trace}\n"))
    assert [p.message.split(":")[1].strip() for p in raised.value.problems] == [
        "ground_truth is never filled in live traffic"
    ]
    # An eval configuration (no kafka) fills both from its dataset.
    eval_head = HEAD.split("judges:", 1)[1]
    settings = load_eval_settings(judge_yaml(prompt, head="judges:" + eval_head))
    assert build_scorers(settings)["policy"].id == "policy"


def test_instructions_are_plain_text_and_categories_need_their_own_scores() -> None:
    with pytest.raises(SettingsError, match="instructions are sent as written, without variables"):
        load_eval_settings(judge_yaml("{{ output }}").replace("Decide whether", "Read {{ output }} and decide whether"))
    categories = "{type: categories, labels: {ok: 1, bad: 0}}"
    with pytest.raises(SettingsError, match=r"options.scale .*categories score as their labels say"):
        load_eval_settings(
            judge_yaml("{{ output }}", output=categories).replace("      output:", "      scale: 10\n      output:")
        )
    with pytest.raises(SettingsError, match=r"options\.output\.categories\.labels"):
        load_eval_settings(judge_yaml("{{ output }}", output="{type: categories, labels: {only: 1}}"))


# -- identity --------------------------------------------------------------------------------------------------

FINGERPRINT = (
    "from sidecar.app.scorer_factory import build_scorers; from sidecar.settings import load_eval_settings; "
    "import sys; print(build_scorers(load_eval_settings(sys.stdin.read()))['policy'].fingerprint)"
)


def fingerprint(text: str) -> str:
    return build_scorers(load_eval_settings(text))["policy"].fingerprint


def test_the_same_yaml_gives_the_same_score_ids_and_what_decides_a_score_changes_them() -> None:
    base = judge_yaml("Answer: {{ output }}", output="{type: categories, labels: {ok: 1, bad: 0}}")
    first = fingerprint(base)
    # Another process (another hash seed) reading the same file: the same fingerprint, so the same score ids.
    other = subprocess.run(
        [sys.executable, "-c", FINGERPRINT], input=base, capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert other.stdout.strip() == first
    assert score_id_of(first, "a" * 32 + ":" + "b" * 16) == score_id_of(fingerprint(base), "a" * 32 + ":" + "b" * 16)
    changed = {
        "instructions": base.replace("keeps the refund policy", "keeps the privacy policy"),
        "template": base.replace("Answer: {{ output }}", "The answer: {{ output }}"),
        "output type": base.replace("{type: categories, labels: {ok: 1, bad: 0}}", "{type: boolean}"),
        "a label's score": base.replace("bad: 0}", "bad: 0.2}"),
        "the labels' order": base.replace("{ok: 1, bad: 0}", "{bad: 0, ok: 1}"),
        # The judge reads which way is better (and the labels ordered by it): another prompt, another scorer.
        "the direction": base.replace("  options:", "  options:\n      better: lower"),
    }
    prints = {what: fingerprint(text) for what, text in changed.items()}
    assert first not in prints.values() and len(set(prints.values())) == len(prints), prints


# -- facts -------------------------------------------------------------------------------------------------------


def test_better_lower_sets_the_scorers_direction_for_metrics_and_alerts() -> None:
    text = judge_yaml("{{ output }}").replace("  options:", "  options:\n      better: lower")
    metrics = SidecarMetrics()
    assembly = assemble(load_eval_settings(text), metrics=metrics)
    [configured] = assembly.scorers
    assert configured.facts.direction == "lower" and configured.kind == "llm-judge"
    info = metrics.registry.get_sample_value(
        "scoring_sidecar_scorer_info", {"scorer": "policy", "kind": "llm-judge", "direction": "lower", "scope": "span"}
    )
    assert info == 1
    assert configured.needs == frozenset({"output"})


def _agent_with_tenant(tracer: Tracer) -> None:
    with tracer.start_as_current_span(
        "invoke_agent refunds",
        attributes={
            n.GEN_AI_OPERATION_NAME: "invoke_agent",
            n.GEN_AI_AGENT_NAME: "refunds",
            "app.tenant": "acme",
            "app.secret_note": "not for judges",
            n.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        },
    ):
        pass


def test_ingest_keeps_only_the_attributes_the_configured_judges_name() -> None:
    text = judge_yaml("{{ output }} {{ span.attributes['app.tenant'] }} {{ resource.attributes['service.version'] }}")
    settings = load_settings(text)
    assembly = assemble(settings)
    assert kept_span_attributes(assembly.scorers) == {"app.tenant"}
    assert kept_resource_attributes(settings, assembly.scorers) == {"service.version"}
    record = otlp_proto(record_spans(_agent_with_tenant))
    other_settings = load_settings(HEAD + "  - {id: tone, kind: tone}\n")
    other = assemble(other_settings)
    [run] = offline_runs(
        assembly.scorers,
        [OfflineRecord(decode_traces(record), record, "test")],
        ingest=ingest_for(settings, assembly.scorers),
    )
    assert run.request.target.span_attributes == (("app.tenant", "acme"),)
    # A configuration without such a judge keeps nothing of the span's attributes.
    [plain] = offline_runs(
        other.scorers,
        [OfflineRecord(decode_traces(record), record, "test")],
        ingest=ingest_for(other_settings, other.scorers),
    )
    assert plain.request.target.span_attributes == () and plain.request.target.resource_attributes == ()
    assert kept_span_attributes(other.scorers) == frozenset()


def test_the_cost_estimate_counts_the_judges_own_prompt() -> None:
    short = load_eval_settings(judge_yaml("{{ output }}"))
    policy = "Refunds are allowed within 30 days of purchase, with a receipt. " * 40
    long = load_eval_settings(judge_yaml(f"Policy: {policy}\n{{{{ output }}}}"))
    [short_row] = estimate_costs(short, build_scorers(short), traces_per_s=1.0)
    [long_row] = estimate_costs(long, build_scorers(long), traces_per_s=1.0)
    assert 1500 < short_row.input_tokens_per_call < 1800
    assert long_row.input_tokens_per_call - short_row.input_tokens_per_call == pytest.approx(len(policy) / 4, abs=3)
    assert long_row.usd_per_hour is not None and short_row.usd_per_hour is not None
    assert long_row.usd_per_hour > short_row.usd_per_hour


# -- the label in every destination ------------------------------------------------------------------------------


async def test_the_label_reaches_the_score_record_the_otlp_event_and_the_phoenix_annotation(
    judge_server: JudgeServer,
) -> None:
    text = judge_yaml("{{ output }}", output="{type: categories, labels: {compliant: 1, violation: 0}}").replace(
        "http://127.0.0.1:9/v1", judge_server.url
    )
    assembly = assemble(load_eval_settings(text))
    [configured] = assembly.scorers
    judge_server.script(Reply.json({"reason": "It promises a refund after 40 days.", "label": "violation"}))
    run_input, run_output = agent_run("Refund after 40 days?", "Sure, always.")
    request = ScorerRunRequest(
        target=SpanTarget(trace_id="1" * 32, span_id="2" * 16), input=run_input, output=run_output
    )
    attempt = await attempt_scorer(configured.scorer, request, timeout_s=10)
    await assembly.aclose()
    run = attempt.to_scored_run(request, configured.scorer, "refunds", needs=configured.needs)
    record: dict[str, Any] | None = score_record_json(run)
    assert record is not None
    assert (record["score"], record["label"], record["reason"]) == (
        0.0,
        "violation",
        "It promises a refund after 40 days.",
    )
    assert json.loads(json.dumps(record))["label"] == "violation"
    assert evaluation_attributes(run)[GEN_AI_EVALUATION_SCORE_LABEL] == "violation"
    assert run_span_attributes(run)[GEN_AI_EVALUATION_SCORE_LABEL] == "violation"
    annotation = span_annotation(run)
    assert annotation is not None and annotation["result"]["label"] == "violation"
    assert annotation["name"] == "policy"


def test_the_guide_lists_every_variable_as_the_code_declares_it() -> None:
    page = (ROOT / "docs" / "custom-judges.md").read_text()
    table = page.split("<!-- variables:begin (generated from sidecar/scorers/custom/llm_judge_variables.py) -->\n", 1)[
        1
    ]
    assert table.split("\n<!-- variables:end", 1)[0] == variables_table()
