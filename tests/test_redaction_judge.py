"""Personal data never reaches the judge: runs holding every supported entity in every part a judge reads, scored
by configured scorers (settings → assembly → the bound scorer → the real judge client) against the scripted
judge server, whose request log is the evidence. The score records, the metrics and the logs hold no value either.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Iterable
from typing import Any

import pytest
from prometheus_client import generate_latest

from exporters.kafka_scores import score_record_json
from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import Assembly, assemble
from sidecar.conventions import Selection
from sidecar.conventions.trace_runs import group_by_trace, trace_runs
from sidecar.core.runs import ScorerRunRequest
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.ingest.decode import decode_traces
from sidecar.redaction.entities import ENTITIES
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.scoring.redaction import RedactedRun
from sidecar.scoring.steps import ScorerRun
from sidecar.settings import load_eval_settings
from sidecar.testing.judge_server import JudgeServer
from tests.support.personal_data import ALLOWED, VALUES, every_value, pii_text, pii_trace
from tests.support.session_runs import Turn, session_run

LABELS = ("System", "Request", "Answer", "Argument", "Result", "Document")

EVERY_VARIABLE = """Check the answer.
System: {{ system }}
Request: {{ input }}
Answer: {{ output }}
Tools:
{{ tool_calls }}
Documents:
{{ context }}
Customer: {{ span.attributes['enduser.id'] }}"""

CONVERSATION = "Instructions: {{ system }}\nConversation:\n{{ conversation }}"


def config(url: str, *, redact: str, judge_redact: str = "") -> str:
    return f"""
judges:
  default:
    model: openai/gpt-4o-mini
    api_base: {url}
    api_key: sk-test
    transport: http
    max_retries: 0
{judge_redact}
redact:
{redact}
scorers:
  - id: every-variable
    kind: llm-judge
    judge: default
    targets: {{scope: trace}}
    options:
      instructions: Decide whether the answer serves the customer.
      prompt: {json.dumps(EVERY_VARIABLE)}
      output: {{type: boolean}}
  - id: faithfulness
    kind: faithfulness
    judge: default
    targets: {{scope: trace}}
  - id: prompt-alignment
    kind: prompt-alignment
    judge: default
    targets: {{scope: trace}}
  - id: conversation
    kind: llm-judge
    judge: default
    targets: {{scope: session}}
    options:
      instructions: Decide whether the agent helped.
      prompt: {json.dumps(CONVERSATION)}
      output: {{type: boolean}}
  - id: completeness
    kind: conversation-completeness
    judge: default
    targets: {{scope: session}}
  - id: similarity
    kind: content-similarity
    targets: {{scope: trace}}
"""


EVERY_ENTITY = f"""  entities: [{", ".join(ENTITIES)}]
  allow: [{ALLOWED}]"""


def trace_request() -> ScorerRunRequest:
    """The whole-trace run of ``pii_trace``, assembled from its OTLP record as the service does."""
    traces = decode_traces(pii_trace().record, "otlp_proto")
    [spans] = group_by_trace(traces).values()
    [request] = trace_runs(spans, Selection(), ready_reason="root_idle", span_attributes={"enduser.id"}).runs
    return request


def conversation_request() -> ScorerRunRequest:
    return session_run(
        [
            Turn(pii_text("Request"), pii_text("Answer"), [("lookup_customer", {"q": pii_text("Argument")}, "ok")]),
            Turn(f"Thanks, write to {ALLOWED} too. {pii_text('Request')}", pii_text("Answer")),
        ],
        system=f"Escalate to {ALLOWED}. {pii_text('System')}",
    )


def request_for(configured: ConfiguredScorer) -> ScorerRunRequest:
    return conversation_request() if configured.scope == "session" else trace_request()


async def score_all(assembly: Assembly) -> dict[str, Any]:
    attempts = {}
    for configured in assembly.scorers:
        request = request_for(configured)
        attempt = await attempt_scorer(configured.scorer, request, timeout_s=30)
        assert attempt.outcome == "scored", (configured.scorer.id, attempt.error)
        attempts[configured.scorer.id] = (attempt, request, configured)
    return attempts


async def judged_prompt(server: JudgeServer, every_entity: Any, marker: str) -> str:
    """Every scorer scored on its run; the one prompt the judge received that holds ``marker``."""
    assembly, _ = every_entity
    await score_all(assembly)
    [prompt] = [r.user_prompt for r in server.requests if marker in r.user_prompt]
    return prompt


def sent(server: JudgeServer) -> list[str]:
    """Every message of every request the judge received."""
    return [json.dumps(r.body["messages"], ensure_ascii=False) for r in server.requests]


def leaked(texts: Iterable[str], values: Iterable[str]) -> list[str]:
    return sorted({value for value in values for text in texts if value in text})


def replacements_by_index(prompt: str, label: str) -> dict[int, str]:
    """What stands after ``<label> <i>: `` in a prompt, for each value index i (the placeholder that replaced it)."""
    marks = list(re.finditer(rf"{label} (\d+): ", prompt))
    found = {}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following is not None else len(prompt)
        replaced = re.match(r"(<[A-Z_]+_\d+>)+", prompt[mark.end() : end])
        found[int(mark.group(1))] = replaced.group(0) if replaced else prompt[mark.end() : end]
    return found


@pytest.fixture
async def every_entity(judge_server: JudgeServer) -> Any:
    judge_server.reset(heuristic_reply)
    metrics = SidecarMetrics()
    assembly = assemble(load_eval_settings(config(judge_server.url, redact=EVERY_ENTITY)), metrics=metrics)
    try:
        yield assembly, metrics
    finally:
        await assembly.aclose()


async def test_no_value_of_any_entity_reaches_the_judge_from_any_part_of_a_run(
    judge_server: JudgeServer, every_entity: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assembly, metrics = every_entity
    caplog.set_level(logging.DEBUG)
    attempts = await score_all(assembly)
    requests = sent(judge_server)
    assert len(requests) >= 6
    assert leaked(requests, every_value()) == []
    # The allow-listed address passes: the judge reads the company's own address as written.
    assert any(ALLOWED in text for text in requests)

    # The judge written in YAML read every part of the trace run: each holds the values, each was redacted.
    [every_variable] = [r.user_prompt for r in judge_server.requests if "Check the answer." in r.user_prompt]
    for label in LABELS:
        assert f"{label} 1: <EMAIL_ADDRESS_" in every_variable, label
    assert "Customer: <untrusted_span_attribute>\n<EMAIL_ADDRESS_1>\n" in every_variable

    # Nothing in the judged scores' records, the metrics or the logs either.
    for attempt, request, configured in attempts.values():
        if not configured.scorer.has_judge_steps:
            continue  # a code scorer's record is as it was (test_code_scorers_read_the_run_as_traced)
        scored = attempt.to_scored_run(request, configured.scorer, "support-bot")
        record = json.dumps(score_record_json(scored), ensure_ascii=False)
        assert leaked([record], every_value()) == [], configured.scorer.id
        assert attempt.result.redactions and set(attempt.result.redactions) <= set(ENTITIES)
        assert json.loads(record)["redactions"] == attempt.result.redactions
    exposition = generate_latest(metrics.registry).decode()
    assert leaked([exposition], every_value()) == []
    assert leaked([record.getMessage() for record in caplog.records], every_value()) == []
    assert 'scoring_sidecar_redactions_total{entity="EMAIL_ADDRESS",judge="default"}' in exposition


async def test_a_value_is_the_same_placeholder_everywhere_in_a_run(
    judge_server: JudgeServer, every_entity: Any
) -> None:
    prompt = await judged_prompt(judge_server, every_entity, "Check the answer.")
    seen = {label: replacements_by_index(prompt, label) for label in LABELS}
    values = every_value()
    for index in range(1, len(values) + 1):
        shown = {label: seen[label].get(index) for label in LABELS}
        assert len(set(shown.values())) == 1, (index, shown)  # one replacement for one value, in every part
        assert re.fullmatch(r"<[A-Z_]+_\d+>", str(shown["Request"])), shown
    # Distinct values, distinct placeholders: the judge can still tell two customers apart.
    emails = [seen["Request"][i] for i, v in enumerate(values, 1) if v in VALUES["EMAIL_ADDRESS"]]
    assert emails == ["<EMAIL_ADDRESS_1>", "<EMAIL_ADDRESS_2>"]


async def test_the_conversation_judges_read_placeholders_consistent_across_turns(
    judge_server: JudgeServer, every_entity: Any
) -> None:
    prompt = await judged_prompt(judge_server, every_entity, "Conversation:")
    assert prompt.count("Turn ") >= 2 and leaked([prompt], every_value()) == []
    assert prompt.count("Request 1: <EMAIL_ADDRESS_1>.") == 2  # the same customer in both turns
    assert f"Thanks, write to {ALLOWED} too." in prompt


async def test_code_scorers_read_the_run_as_traced(judge_server: JudgeServer, every_entity: Any) -> None:
    assembly, _ = every_entity
    attempts = await score_all(assembly)
    attempt, _, configured = attempts["similarity"]
    assert configured.scorer.redactor is None  # it sends nothing out of the process
    assert attempt.result.redactions is None
    processed = attempt.result.model_dump_json()
    assert "maria.lopez@example.com" in processed


async def test_a_judge_may_turn_the_default_off_or_set_its_own(judge_server: JudgeServer) -> None:
    judge_server.reset(heuristic_reply)
    off = config(judge_server.url, redact=EVERY_ENTITY, judge_redact="    redact: false")
    assembly = assemble(load_eval_settings(off))
    try:
        configured = next(c for c in assembly.scorers if c.scorer.id == "every-variable")
        assert configured.scorer.redactor is None
        await attempt_scorer(configured.scorer, trace_request(), timeout_s=30)
    finally:
        await assembly.aclose()
    assert "maria.lopez@example.com" in judge_server.requests[0].user_prompt

    judge_server.reset(heuristic_reply)
    own = config(judge_server.url, redact=EVERY_ENTITY, judge_redact="    redact: {entities: [CREDIT_CARD]}")
    assembly = assemble(load_eval_settings(own))
    try:
        configured = next(c for c in assembly.scorers if c.scorer.id == "every-variable")
        await attempt_scorer(configured.scorer, trace_request(), timeout_s=30)
    finally:
        await assembly.aclose()
    prompt = judge_server.requests[0].user_prompt
    assert "maria.lopez@example.com" in prompt  # e-mail is not among this judge's entities
    assert leaked([prompt], VALUES["CREDIT_CARD"]) == [] and "<CREDIT_CARD_1>" in prompt
    assert ALLOWED in prompt  # allow came from the top-level block (a judge's block is laid over it)


class FailingRedactor:
    """A redactor that cannot redact this run (Presidio raising on some input): its message quotes the run."""

    def redact(self, run: ScorerRun) -> RedactedRun:
        raise ValueError(f"cannot read {run.input!r}")


async def test_a_run_that_cannot_be_redacted_fails_and_nothing_is_sent(
    judge_server: JudgeServer, every_entity: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assembly, _ = every_entity
    configured = next(c for c in assembly.scorers if c.scorer.id == "every-variable")
    scorer = dataclasses.replace(configured.scorer, redactor=FailingRedactor())
    attempt = await attempt_scorer(scorer, trace_request(), timeout_s=30)
    assert attempt.outcome == "failed" and not attempt.shed
    assert judge_server.requests == []
    assert attempt.error is not None
    message = f"{attempt.error} {attempt.error.to_json()}"
    assert "redaction failed (ValueError); the run was not sent to the judge" in message
    assert leaked([message, *(r.getMessage() for r in caplog.records)], every_value()) == []
    assert "Traceback" not in caplog.text
