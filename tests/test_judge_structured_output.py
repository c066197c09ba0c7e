"""Structured-output negotiation (``structured_output: auto``) and the prompt shape's repair, through the real
judge client (both transports) against the scripted judge server taught to refuse shapes as real servers do.

The slow counterpart against a real ``llama_cpp.server`` is tests/test_judge_llama_cpp.py.
"""

from __future__ import annotations

import json
import logging
import textwrap
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import assemble
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.judge_gate import GateConfig, JudgeGate
from sidecar.scoring import AgentRunInput, JudgeExecutionFailure, JudgeExecutionSuccess, ScorerRunError, create_scorer
from sidecar.scoring.agent import assistant_message
from sidecar.scoring.judge.client import JudgeClient
from sidecar.scoring.judge.errors import StructuredOutputError
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.negotiation import Shape
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.judge.structured import parse_structured
from sidecar.scoring.types import JudgeCall
from sidecar.settings import load_eval_settings
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import JudgeModelFactory, judge_client

NEGOTIATION_LOG = "sidecar.scoring.judge.negotiation"


class Verdict(BaseModel):
    verdict: str
    confidence: float


GOOD = {"verdict": "yes", "confidence": 0.75}


class Calls:
    """Every call the client reports (a ``JudgeCallObserver``)."""

    def __init__(self) -> None:
        self.calls: list[JudgeCall] = []

    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        self.calls.append(call)


class Judge:
    """A judge client as the assembly makes one (its own gate when given), with what it reports."""

    def __init__(self, model: JudgeModel, gate: JudgeGate | None = None) -> None:
        self.settled: list[tuple[str, Shape]] = []
        self.observed = Calls()
        self.client: JudgeClient = judge_client(
            model,
            gate=gate,
            observers=[self.observed],
            on_structured_output=lambda judge, shape: self.settled.append((judge, shape)),
        )

    async def run(self, output: str = "a") -> Any:
        scorer = (
            create_scorer(id="verdict", judge={"model": self.client.model})
            .analyze(
                description="judge the answer",
                create_prompt=lambda ctx: f"Judge this answer: {ctx.run.output}",
                output_schema=Verdict,
            )
            .generate_score(lambda ctx: ctx.results.analyze_step_result.confidence)
            .bind(self.client)
        )
        return await scorer.run(input="q", output=output)


def formats(server: JudgeServer) -> list[str | None]:
    return [(r.body.get("response_format") or {}).get("type") for r in server.requests]


async def test_a_server_that_refuses_json_schema_settles_on_json_object_after_two_refusals(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp's server: json_schema answered HTTP 500, json_object with the schema taken."""
    judge_server.reset(lambda body: Reply.json(GOOD))
    judge_server.refuse_formats = frozenset({"json_schema"})
    judge = Judge(make_judge_model(max_retries=3))
    caplog.set_level(logging.INFO, logger=NEGOTIATION_LOG)

    first = await judge.run()
    assert first.score == 0.75
    # The refusal is not retried (max_retries 3): the next shape goes at once.
    assert formats(judge_server) == ["json_schema", "json_object"]
    json_object = judge_server.requests[1].body["response_format"]
    assert json_object["schema"]["required"] == ["verdict", "confidence"]
    assert json_object["value"] == json_object["schema"]  # the key TGI reads
    assert "JSON Schema" in judge_server.requests[1].user_prompt  # JSON mode needs the word in the messages
    refused, answered = judge.observed.calls
    assert (refused.outcome, refused.status_code, refused.shape_probe) == ("error", 500, True)
    assert (answered.outcome, answered.shape_probe) == ("ok", False)
    execution = first.judge.analyze.executions[0]
    assert isinstance(execution, JudgeExecutionSuccess)
    assert (execution.attempt_count, execution.model_call_count) == (2, 1)  # two attempts, one answer (billed)
    assert judge.client.shapes.settled is None and judge.settled == []  # one refusal could be a passing fault

    await judge.run()
    assert formats(judge_server)[2:] == ["json_schema", "json_object"]
    assert judge.client.shapes.settled == "json_object"
    assert judge.settled == [("openai/gpt-4o-mini", "json_object")]
    lines = [r.getMessage() for r in caplog.records if r.name == NEGOTIATION_LOG]
    assert len(lines) == 1 and r"refused structured output as json_schema (json_schema: HTTP 500" in lines[0]
    assert "answers json_object" in lines[0] and "structured_output: json_object" in lines[0]

    for _ in range(3):
        await judge.run()
    assert formats(judge_server)[4:] == ["json_object"] * 3  # settled: no probe any more
    assert len([r for r in caplog.records if r.name == NEGOTIATION_LOG]) == 1  # said once


async def test_a_server_that_takes_json_schema_settles_on_it_at_its_first_answer(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory, caplog: pytest.LogCaptureFixture
) -> None:
    judge_server.reset(lambda body: Reply.json(GOOD))
    judge = Judge(make_judge_model())
    caplog.set_level(logging.INFO, logger=NEGOTIATION_LOG)
    for _ in range(3):
        assert (await judge.run()).score == 0.75
    assert formats(judge_server) == ["json_schema"] * 3
    assert judge.settled == [("openai/gpt-4o-mini", "json_schema")]
    lines = [r.getMessage() for r in caplog.records if r.name == NEGOTIATION_LOG]
    assert lines == ["judge openai/gpt-4o-mini: the server takes structured output as json_schema"]


@pytest.mark.parametrize(("status", "refused"), [(400, {"json_schema"}), (422, {"json_schema", "json_object"})])
async def test_refusals_in_other_servers_words_step_down_too(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory, status: int, refused: set[str]
) -> None:
    """vLLM answers an unknown response_format 400; TGI 422, json_schema and (without its `value`) json_object."""
    judge_server.reset(lambda body: Reply(content=f"Here you go: {json.dumps(GOOD)}"))
    judge_server.refuse_formats, judge_server.refusal_status = frozenset(refused), status
    judge = Judge(make_judge_model())
    for _ in range(2):
        assert (await judge.run()).score == 0.75
    expected: Shape = "json_object" if refused == {"json_schema"} else "prompt"
    assert judge.client.shapes.settled == expected
    before = len(judge_server.requests)
    await judge.run()
    assert formats(judge_server)[before] == (None if expected == "prompt" else expected)  # no probe any more


async def test_refused_shapes_never_open_the_circuit_nor_hold_a_run(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    """A breaker that opens on the first failed call stays closed through the refusals: they say nothing of
    the judge's health, and no run waits for a recovery."""
    model = make_judge_model(max_retries=0)
    gate = JudgeGate(model, GateConfig(failure_threshold=1, reset_after_s=30))
    judge_server.reset(lambda body: Reply.json(GOOD))
    judge_server.refuse_formats = frozenset({"json_schema"})
    judge = Judge(model, gate)
    for _ in range(4):
        assert (await judge.run()).score == 0.75
    assert gate.state == "closed" and gate.held == 0
    assert [c.shape_probe for c in judge.observed.calls] == [True, False, True, False, False, False]


async def test_a_judge_failing_every_request_is_an_outage_not_a_refused_shape(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    """500 to every shape: the probes move on, the last shape is retried and counted as any call is, the breaker
    opens, and nothing is settled."""
    model = make_judge_model(max_retries=2)
    gate = JudgeGate(model, GateConfig(failure_threshold=3, reset_after_s=30, max_hold_s=0.5))
    judge_server.reset(lambda body: Reply.error(500, "the model crashed"))
    judge = Judge(model, gate)
    with pytest.raises(ScorerRunError) as caught:
        await judge.run()
    execution = caught.value.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    # The breaker opened on the prompt shape's failures and held the call (here for max_hold_s, as eval does).
    assert isinstance(execution, JudgeExecutionFailure) and execution.error.code == "circuit_open"
    shapes = formats(judge_server)
    assert shapes == ["json_schema", "json_object", None, None, None]  # the last shape: 1 call + max_retries 2
    assert [c.shape_probe for c in judge.observed.calls] == [True, True, False, False, False]
    assert gate.state == "open"
    assert judge.client.shapes.settled is None and judge.settled == []


async def test_an_explicit_shape_is_used_from_the_first_call_without_probes(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    judge_server.reset(lambda body: Reply.json(GOOD))
    judge = Judge(make_judge_model(structured_output="json_object"))
    assert judge.settled == [("openai/gpt-4o-mini", "json_object")]  # known from the start: the metric too
    await judge.run()
    assert formats(judge_server) == ["json_object"]
    assert judge.observed.calls[0].shape_probe is False


async def test_an_unusable_answer_to_json_object_gets_the_one_prompt_fallback(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    judge_server.reset()
    judge_server.script(Reply(content="yes"), Reply(content=f"```json\n{json.dumps(GOOD)}\n```"))
    judge = Judge(make_judge_model(structured_output="json_object"))
    assert (await judge.run()).score == 0.75
    assert formats(judge_server) == ["json_object", None]


async def test_the_prompt_shape_repairs_json_wrapped_in_prose(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    judge_server.reset()
    prose = "Sure! Here is my verdict: {'verdict': 'yes', 'confidence': 0.75,} Hope it helps."
    judge_server.script(Reply(content=prose))
    judge = Judge(make_judge_model(structured_output="prompt"))
    assert (await judge.run()).score == 0.75
    assert formats(judge_server) == [None]


async def test_an_answer_without_json_is_still_a_format_error_after_the_repair(
    judge_server: JudgeServer, make_judge_model: JudgeModelFactory
) -> None:
    judge_server.reset(lambda body: Reply(content="The answer is fine, I would say yes."))
    judge = Judge(make_judge_model(structured_output="prompt"))
    with pytest.raises(ScorerRunError) as caught:
        await judge.run()
    execution = caught.value.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionFailure) and execution.error.name == "JSONParseError"
    assert execution.raw_output == "The answer is fine, I would say yes."


# -- the repair, as a parser ------------------------------------------------------------------------------------

_PROSE = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="{}[]\"'\\`"), max_size=80)


@settings(max_examples=200, deadline=None)
@given(
    verdict=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30),
    confidence=st.floats(allow_nan=False, allow_infinity=False, width=32),
    before=_PROSE,
    after=_PROSE,
)
def test_the_repair_finds_the_object_in_any_prose_around_it(
    verdict: str, confidence: float, before: str, after: str
) -> None:
    body = json.dumps({"verdict": verdict, "confidence": confidence}, ensure_ascii=False)
    parsed = parse_structured(f"{before} {body} {after}", Verdict, "stop", repair=True)
    assert parsed == Verdict(verdict=verdict, confidence=confidence)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_without_repair_only_json_passes(text: str) -> None:
    """Strict parsing (the json_schema and json_object shapes) never mends: what is not JSON fails as a format
    error, whatever the text."""
    try:
        parsed = parse_structured(text, Verdict, "stop")
    except StructuredOutputError:  # not JSON, no object, not the schema: a format error, nothing else
        return
    assert parsed == Verdict.model_validate_json(text.strip())


async def test_the_service_judge_learns_the_shape_and_its_metric_says_which(judge_server: JudgeServer) -> None:
    """As the service assembles a judge: a scorer on a server that refuses json_schema; the gauge
    names the shape once learnt, the calls are counted (refusals as errors), the breaker never moved."""
    judge_server.reset(lambda body: Reply.json({"score": 0.5}))
    judge_server.refuse_formats = frozenset({"json_schema"})
    text = textwrap.dedent(
        f"""
        kafka: {{bootstrap_servers: localhost:9092}}
        judges:
          default: {{model: openai/gpt-4o-mini, api_base: "{judge_server.url}", api_key: sk-shape-test,
                     circuit_breaker: {{failure_threshold: 1}}}}
        scorers:
          - {{id: strict, kind: "python: tests.support.custom_scorer:create_strictness_scorer", judge: default}}
        """
    )
    metrics = SidecarMetrics()
    assembly = assemble(load_eval_settings(text), metrics=metrics)
    [configured] = assembly.scorers

    def gauge(shape: str) -> float | None:
        labels = {"judge_model": "openai/gpt-4o-mini", "shape": shape}
        return metrics.registry.get_sample_value("scoring_sidecar_judge_structured_output", labels)

    assert gauge("json_object") is None  # auto: nothing known yet
    for i in range(3):
        target = SpanTarget(trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}")
        request = ScorerRunRequest(target=target, input=AgentRunInput(), output=(assistant_message(f"answer {i}"),))
        await attempt_scorer(configured.scorer, request, timeout_s=10)
    await assembly.aclose()
    assert (gauge("json_schema"), gauge("json_object"), gauge("prompt")) == (0, 1, 0)
    assert assembly.judges["default"].gate.state == "closed"
    errors = metrics.registry.get_sample_value(
        "scoring_sidecar_judge_calls_total", {"judge_model": "openai/gpt-4o-mini", "outcome": "error"}
    )
    assert errors == 2  # the two refusals it took to settle, counted as what they were: HTTP errors
