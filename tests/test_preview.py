"""``scoring-sidecar preview``: the newest runs of the topic through the real judge client, read without joining
the group or committing and with nothing exported; a file of OTLP records; a dataset; its errors."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry.trace import Tracer

from sidecar.cli import main
from sidecar.core import names as n
from sidecar.embedded.traffic import TrafficGenerator
from sidecar.preview import PreviewOptions, preview
from sidecar.settings import load_eval_settings
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import quoted
from tests.support.otel import otlp_json, otlp_proto, record_spans
from tests.support.sidecar_process import produce_traces, read_topic

ROOT = Path(__file__).resolve().parents[1]

JUDGE = """\
judges:
  default: {{model: openai/gpt-4o-mini, api_base: "{judge}", api_key: sk-test-preview}}
scorers:
  - id: on-topic
    kind: llm-judge
    judge: default
    options:
      instructions: Decide whether the agent answered what the user asked.
      prompt: |
        Agent: {{{{ span.attributes['gen_ai.agent.name'] }}}}
        Request: {{{{ input }}}}
        Answer: {{{{ output }}}}
      output: {{type: boolean}}
  - id: tone
    kind: tone
"""


def live_config(bootstrap: str, spans: str, scores: str, group: str, judge: str) -> str:
    kafka = f"kafka:\n  bootstrap_servers: {bootstrap}\n  topics: [{spans}]\n  group_id: {group}\n"
    exporters = f"exporters:\n  kafka_scores: {{enabled: true, topic: {scores}}}\n"
    return kafka + exporters + JUDGE.format(judge=judge)


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets, read without joining it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


async def commit(bootstrap: str, group: str, positions: dict[TopicPartition, int]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(positions))
        await consumer.commit(positions)
    finally:
        await consumer.stop()


def on_topic(body: dict[str, Any]) -> Reply:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    passed = "Have a nice trip" not in quoted(prompt, "output")
    return Reply.json({"reason": "answers the request" if passed else "does not answer", "passed": passed})


async def test_preview_from_the_topic_commits_nothing_and_exports_nothing(
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    spans = await new_topic("spans", partitions=2)
    scores = await new_topic("scores")
    traces = list(TrafficGenerator(seed=11).traces(30))
    await produce_traces(kafka_bootstrap, spans, traces)
    group = unique_name("preview")
    await commit(kafka_bootstrap, group, {TopicPartition(spans, 0): 2, TopicPartition(spans, 1): 1})
    assert await committed(kafka_bootstrap, group, spans, 2) == {0: 2, 1: 1}
    judge_server.reset(on_topic)

    settings = load_eval_settings(live_config(kafka_bootstrap, spans, scores, group, judge_server.url))
    out = io.StringIO()
    code = await preview(settings, PreviewOptions(config=Path("preview.yaml"), scorer="on-topic", n=6), out)
    printed = out.getvalue()
    assert code == 0, printed
    # The six newest agent runs of the topic, one judge call each through the configured judge.
    newest = {t.trace_id for t in traces[-6:]}
    shown = {line.split()[4] for line in printed.splitlines() if line.startswith("── run ")}
    assert shown == newest, printed
    assert len(judge_server.requests) == 6
    for request in judge_server.requests:
        prompt = request.user_prompt
        assert quoted(prompt, "span_attribute") in {"coding-assistant", "support-bot", "(not set)"}  # OI: agent.name
        assert quoted(prompt, "output")
    poor = sum(1 for t in traces[-6:] if t.agent == "travel-agent" and t.quality == "poor")
    assert "6 runs: 6 scored, 0 failed, 0 not scorable" in printed
    [labels] = [line for line in printed.splitlines() if line.startswith("labels: ")]
    assert (f"pass {6 - poor} (" in labels) == (poor < 6) and (f"fail {poor} (" in labels) == (poor > 0), labels
    assert "   score 1 · label pass" in printed and "judge answered: {" in printed
    assert "nothing exported, nothing committed" in printed
    # The group's offsets and the score topic are as they were.
    assert await committed(kafka_bootstrap, group, spans, 2) == {0: 2, 1: 1}
    assert await read_topic(kafka_bootstrap, scores, expect=1, timeout_s=2) == []


def _agent_over_llm_child(tracer: Tracer) -> None:
    with tracer.start_as_current_span(
        "support agent",
        attributes={
            n.OPENINFERENCE_SPAN_KIND: "AGENT",
            n.OI_AGENT_NAME: "refunds-bot",
            n.INPUT_VALUE: "A refund after 40 days?",
            n.OUTPUT_VALUE: "Yes, refunded in full.",
        },
    ):
        with tracer.start_as_current_span(
            "retrieve",
            attributes={
                n.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
                "retrieval.documents.0.document.content": "Refunds within 30 days only.",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "llm",
            attributes={
                n.OPENINFERENCE_SPAN_KIND: "LLM",
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "Follow the refund policy.",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": "A refund after 40 days?",
            },
        ):
            pass


TRACE_SCOPE = """\
judges:
  default: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:9/v1", api_key: sk-unused}
scorers:
  - id: policy
    kind: llm-judge
    judge: default
    targets: {scope: trace}
    options:
      instructions: Check the answer against the policy the agent was given.
      prompt: "System: {{ system }}\\nDocuments: {{ context }}\\nAnswer: {{ output }}"
      output: {type: categories, labels: {kept: 1, broken: 0}}
"""


def test_preview_from_files_renders_without_a_judge_and_scores_with_the_stand_in(tmp_path: Path, capsys: Any) -> None:
    config = tmp_path / "judges.yaml"
    config.write_text(JUDGE.format(judge="http://127.0.0.1:9/v1"))  # no judge there: rendering calls none
    traces = list(TrafficGenerator(seed=3).traces(5))
    lines = tmp_path / "traces.jsonl"
    lines.write_bytes(b"\n".join(otlp_json(t.request) for t in traces) + b"\n")
    base = ["preview", "--config", str(config), "--scorer", "on-topic", "--file", str(lines), "-n", "3"]
    assert main([*base, "--show-prompt-only"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("── run ") == 3 and printed.count("(--show-prompt-only: no judge called)") == 3
    assert "3 prompts rendered; no judge called, no cost" in printed
    assert {line.split()[4] for line in printed.splitlines() if line.startswith("── run ")} == {
        t.trace_id for t in traces[-3:]
    }
    assert main([*base, "--stand-in-judge"]) == 0
    printed = capsys.readouterr().out
    assert "3 runs: 3 scored, 0 failed" in printed and "labels: " in printed

    # A whole-trace judge over one OTLP protobuf export: the system instructions of the LLM child, the document.
    whole = tmp_path / "trace.pb"
    whole.write_bytes(otlp_proto(record_spans(_agent_over_llm_child)))
    config.write_text(TRACE_SCOPE)
    assert (
        main(["preview", "--config", str(config), "--scorer", "policy", "--file", str(whole), "--show-prompt-only"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "(trace scope)" in printed
    assert "<untrusted_system>\n     │ Follow the refund policy.\n     │ </untrusted_system>" in printed
    assert "[1] Refunds within 30 days only." in printed


def test_preview_of_a_dataset_and_what_it_refuses(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("JUDGE_API_BASE", raising=False)
    config = ROOT / "examples" / "eval-custom-judges.yaml"
    dataset = ROOT / "examples" / "eval-custom-judges-dataset.jsonl"
    base = ["preview", "--config", str(config), "--dataset", str(dataset)]
    assert main([*base, "--scorer", "language-match", "-n", "2", "--show-prompt-only", "--max-chars", "20"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("── run ") == 2 and "(refund-in-window-en)" in printed
    assert "I received the headp… (+66 chars)" in printed  # traced content shortened, the template whole
    assert main([*base, "--scorer", "language-mach"]) == 2
    err = capsys.readouterr().err
    assert "no scorer 'language-mach'" in err and "did you mean 'language-match'?" in err
    assert main([*base, "--scorer", "language-match"]) == 2  # a real judge without its key: said before any call
    err = capsys.readouterr().err
    assert "has no API key" in err and "--show-prompt-only" in err
    assert main(["preview", "--config", str(config), "--scorer", "language-match"]) == 2  # no kafka section
    assert "--from-topic needs a kafka section" in capsys.readouterr().err
    missing = ["preview", "--config", str(config), "--scorer", "language-match", "--file", str(tmp_path / "none")]
    assert main(missing) == 2
    assert "no such file" in capsys.readouterr().err


def test_terminal_escapes_in_traced_content_are_shown_not_obeyed(tmp_path: Path, capsys: Any) -> None:
    """A span's text may hold escape sequences that would erase or rewrite what the operator reads."""
    dataset = tmp_path / "escapes.jsonl"
    item = {"id": "esc", "input": "Refund?\u001b[2K\u001b]0;pwned\u0007", "output": "Yes\u001b[1A\u009b2J."}
    dataset.write_text(json.dumps(item) + "\n", encoding="utf-8")
    config = ROOT / "examples" / "eval-custom-judges.yaml"
    argv = ["preview", "--config", str(config), "--dataset", str(dataset), "--scorer", "refund-policy"]
    assert main([*argv, "--stand-in-judge"]) == 0
    printed = capsys.readouterr().out
    assert "\u001b" not in printed and "\u0007" not in printed and "\u009b" not in printed
    assert "Refund?\\x1b[2K\\x1b]0;pwned\\x07" in printed and "Yes\\x1b[1A\\x9b2J." in printed
