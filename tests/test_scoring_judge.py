"""The judge record through the real client paths (fast HTTP and litellm) against a loopback server."""

from __future__ import annotations

import json
import time

import pytest
from pydantic import BaseModel

from sidecar.scoring import (
    JudgeExecutionFailure,
    JudgeExecutionSuccess,
    JudgeUsage,
    ScorerRunError,
    ScorerRunResult,
    create_scorer,
)
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import SECRET_KEY, JudgeModelFactory


class Verdict(BaseModel):
    verdict: str
    confidence: float


def analyze_scorer(make_judge_model: JudgeModelFactory, **model_overrides: object):  # type: ignore[no-untyped-def]
    return (
        create_scorer(
            id="verdict",
            description="test scorer",
            judge={"model": make_judge_model(**model_overrides), "instructions": "You are a strict judge."},
        )
        .analyze(
            description="judge the answer",
            create_prompt=lambda ctx: f"Judge this answer: {ctx.run.output}",
            output_schema=Verdict,
        )
        .generate_score(lambda ctx: ctx.results.analyze_step_result.confidence)
    )


GOOD = {"verdict": "yes", "confidence": 0.75}


async def test_valid_structured_output_is_one_attempt(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.json(GOOD, usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}))
    result = await analyze_scorer(make_judge_model).run(input="q", output="a")
    assert result.score == 0.75
    assert result.analyze_prompt == "Judge this answer: a"
    execution = result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionSuccess)
    assert (execution.attempt_count, execution.model_call_count) == (1, 1)
    assert execution.usage.input_tokens == 100 and execution.usage.output_tokens == 20
    assert execution.usage.total_tokens == 120
    assert execution.judge_model_id == "gpt-4o-mini" and execution.judge_provider == "openai"
    assert execution.output == Verdict(**GOOD)
    assert execution.cost is None  # the provider reported none: no estimate may stand in
    assert execution.estimated_cost_usd == pytest.approx(100 * 1.5e-07 + 20 * 6e-07)
    # Native schema mode on the first attempt; instructions as the system message.
    sent = judge_server.requests[0]
    assert sent.body["response_format"]["type"] == "json_schema"
    assert sent.body["response_format"]["json_schema"]["schema"]["required"] == ["verdict", "confidence"]
    assert sent.system_prompt == "You are a strict judge."
    assert sent.body["model"] == "gpt-4o-mini"


async def test_invalid_json_then_valid_uses_the_fallback(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(
        Reply(content="Sure! The verdict is yes.", usage={"prompt_tokens": 50, "completion_tokens": 7}),
        Reply.json(GOOD, usage={"prompt_tokens": 60, "completion_tokens": 9, "total_tokens": 69}),
    )
    result = await analyze_scorer(make_judge_model).run(input="q", output="a")
    execution = result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionSuccess)
    assert (execution.attempt_count, execution.model_call_count) == (2, 2)
    assert execution.usage.input_tokens == 110
    assert execution.usage.output_tokens == 16
    assert execution.usage.total_tokens == 57 + 69
    assert [c.outcome for c in execution.calls] == ["invalid_output", "ok"]
    # The fallback asks for JSON in the prompt and drops native schema mode.
    fallback = judge_server.requests[1]
    assert "response_format" not in fallback.body
    assert "JSON Schema" in fallback.user_prompt and fallback.user_prompt.startswith("Judge this answer: a")
    # The record keeps the prompt the step created, not the fallback's rewording.
    assert execution.prompt == "Judge this answer: a"


async def test_two_invalid_outputs_fail_with_raw_output_and_no_output(
    judge_server: JudgeServer, make_judge_model
) -> None:
    judge_server.script(Reply(content="not json"), Reply(content='{"verdict": "yes"}', finish_reason="length"))
    with pytest.raises(ScorerRunError) as caught:
        await analyze_scorer(make_judge_model).run(input="q", output="a")
    error = caught.value
    assert error.failed_step == "analyze" and error.completed_steps == ()
    assert str(error).startswith("Scorer Run Failed: ")
    assert error.result is not None
    execution = error.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionFailure)
    assert (execution.attempt_count, execution.model_call_count) == (2, 2)
    assert execution.error.name == "TypeValidationError"
    assert "confidence" in execution.error.message
    assert execution.raw_output == '{"verdict": "yes"}'
    assert execution.finish_reason == "length"
    assert execution.output is None
    assert execution.usage is not None and execution.usage.input_tokens == 20
    assert error.result.score is None and error.result.analyze_step_result is None


async def test_out_of_range_score_is_a_format_error(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = (
        create_scorer(id="ranged", judge=make_judge_model())
        .analyze(
            description="range",
            create_prompt=lambda ctx: "rate",
            output_schema=_Ranged,
        )
        .generate_score(lambda ctx: ctx.results.analyze_step_result.score)
    )
    judge_server.script(Reply.json({"score": 1.7}), Reply.json({"score": 0.4}))
    result = await scorer.run(input="q", output="a")
    assert result.score == 0.4
    assert result.judge.analyze.executions[0].attempt_count == 2  # type: ignore[union-attr]


class _Ranged(BaseModel):
    score: float

    @classmethod
    def __get_validators__(cls):  # type: ignore[no-untyped-def]
        yield from ()

    def model_post_init(self, _context: object) -> None:
        if not 0 <= self.score <= 1:
            raise ValueError("score must be between 0 and 1")


async def test_invalid_then_provider_error_on_the_fallback(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(
        Reply(content="{broken", usage={"prompt_tokens": 30, "completion_tokens": 3, "total_tokens": 33}),
        Reply.error(503, "overloaded"),
    )
    with pytest.raises(ScorerRunError) as caught:
        await analyze_scorer(make_judge_model, max_retries=0).run(input="q", output="a")
    execution = caught.value.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionFailure)
    assert (execution.attempt_count, execution.model_call_count) == (2, 1)
    assert execution.error.name == "ServiceUnavailableError" and execution.error.code == "503"
    assert execution.usage is not None and execution.usage.total_tokens == 33
    assert execution.raw_output == "{broken"


async def test_provider_error_on_first_attempt_never_falls_back(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.error(400, "unsupported parameter: response_format"))
    with pytest.raises(ScorerRunError) as caught:
        await analyze_scorer(make_judge_model).run(input="q", output="a")
    execution = caught.value.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionFailure)
    assert (execution.attempt_count, execution.model_call_count) == (1, 0)
    assert execution.usage is None and execution.raw_output is None
    assert execution.error.name == "BadRequestError" and execution.error.code == "400"
    assert len(judge_server.requests) == 1
    assert caught.value.result.input == "q"  # run identity and input only, plus the failed entry
    assert caught.value.result.score is None


async def test_5xx_is_retried_inside_one_attempt(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.error(500, "boom"), Reply.error(502, "bad gateway"), Reply.json(GOOD))
    result = await analyze_scorer(make_judge_model, max_retries=2).run(input="q", output="a")
    execution = result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert (execution.attempt_count, execution.model_call_count) == (1, 1)
    assert [c.outcome for c in execution.calls] == ["error", "error", "ok"]
    assert [c.status_code for c in execution.calls] == [500, 502, 200]


async def test_429_honours_retry_after(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.error(429, "slow down", retry_after=0.4), Reply.json(GOOD))
    started = time.monotonic()
    result = await analyze_scorer(make_judge_model).run(input="q", output="a")
    assert time.monotonic() - started >= 0.4
    execution = result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert execution.status == "success" and execution.attempt_count == 1
    assert [c.outcome for c in execution.calls] == ["rate_limited", "ok"]


async def test_retry_after_beyond_the_deadline_gives_up(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.error(429, "come back in a minute", retry_after=60))
    started = time.monotonic()
    with pytest.raises(ScorerRunError) as caught:
        await analyze_scorer(make_judge_model, deadline_s=1.0).run(input="q", output="a")
    assert time.monotonic() - started < 1.0
    execution = caught.value.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert execution.error.name == "RateLimitError" and execution.error.code == "429"  # type: ignore[union-attr]


async def test_timeouts_are_retried_then_fail(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(*(Reply.json(GOOD, delay_s=1.0) for _ in range(3)))
    with pytest.raises(ScorerRunError) as caught:
        await analyze_scorer(make_judge_model, timeout_s=0.2, max_retries=1).run(input="q", output="a")
    execution = caught.value.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionFailure)
    assert execution.error.name == "Timeout"
    assert (execution.attempt_count, execution.model_call_count) == (1, 0)
    assert [c.outcome for c in execution.calls] == ["timeout", "timeout"]


async def test_provider_reported_cost_is_recorded(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.json(GOOD, cost=0.00042))
    result = await analyze_scorer(make_judge_model).run(input="q", output="a")
    execution = result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionSuccess)
    assert execution.cost is not None
    assert (execution.cost.amount, execution.cost.unit, execution.cost.source) == (0.00042, "USD", "provider")
    record = json.loads(result.to_json())["judge"]["analyze"]["executions"][0]
    assert record["cost"] == {"amount": 0.00042, "unit": "USD", "source": "provider"}
    assert "estimatedCostUsd" not in record and "calls" not in record


async def test_judge_record_round_trips_with_camel_case_names(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(
        Reply.json(
            GOOD,
            usage={
                "prompt_tokens": 12,
                "completion_tokens": 8,
                "total_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 3},
            },
        )
    )
    result = await analyze_scorer(make_judge_model).run(input="q", output="a", run_id="run-1")
    wire = json.loads(result.to_json())
    execution = wire["judge"]["analyze"]["executions"][0]
    assert set(execution) == {
        "prompt", "judgeModelId", "judgeProvider", "attemptCount", "modelCallCount", "durationMs",
        "status", "output", "usage",
    }  # fmt: skip
    assert execution["usage"] == {
        "inputTokens": 12, "outputTokens": 8, "totalTokens": 20, "reasoningTokens": 3, "cachedInputTokens": 4,
    }  # fmt: skip
    assert wire["analyzeStepResult"] == GOOD and wire["runId"] == "run-1"
    again = ScorerRunResult.from_json(result.to_json())
    assert again.to_json() == result.to_json()


async def test_api_key_never_leaks_from_provider_errors(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.error(401, f"Incorrect API key provided: {SECRET_KEY}", code="invalid_api_key"))
    model = make_judge_model()
    with pytest.raises(ScorerRunError) as caught:
        await analyze_scorer(make_judge_model).run(input="q", output="a")
    error = caught.value
    execution = error.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert execution.error.name == "AuthenticationError"  # type: ignore[union-attr]
    texts = [str(error), error.to_json(), error.result.to_json(), repr(model), str(model.model_dump())]  # type: ignore[union-attr]
    for text in texts:
        assert SECRET_KEY not in text and SECRET_KEY[:12] not in text
    # …while the key really was sent to the provider.
    assert judge_server.requests[0].headers["Authorization"] == f"Bearer {SECRET_KEY}"


async def test_garbage_http_body_is_a_provider_error(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.reset(lambda _body: Reply(body=b"<html>502 upstream</html>", status=200))
    with pytest.raises(ScorerRunError) as caught:
        # A judge whose shape is known: while `auto` still learns it, a 500 may be a refused shape (then the next
        # shape is tried: tests/test_judge_structured_output.py).
        await analyze_scorer(make_judge_model, max_retries=1, structured_output="json_schema").run(
            input="q", output="a"
        )
    execution = caught.value.result.judge.analyze.executions[0]  # type: ignore[union-attr]
    assert isinstance(execution, JudgeExecutionFailure)
    assert execution.error.name == "InternalServerError" and execution.error.code == "500"
    assert (execution.attempt_count, execution.model_call_count) == (1, 0)
    assert len(judge_server.requests) == 2  # retried once as a transport failure, no fallback


async def test_generate_reason_is_free_text_with_one_attempt(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = (
        create_scorer(id="reasoned", judge=make_judge_model())
        .generate_score(lambda ctx: 0.5)
        .generate_reason(description="explain", create_prompt=lambda ctx: f"Explain {ctx.score}")
    )
    judge_server.script(Reply(content="  The score is 0.5 because reasons.  "))
    result = await scorer.run(input="q", output="a")
    assert result.reason == "The score is 0.5 because reasons."
    assert result.generate_reason_prompt == "Explain 0.5"
    assert "response_format" not in judge_server.requests[0].body


async def test_prompt_based_generate_score(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = create_scorer(id="prompted", judge=make_judge_model()).generate_score(
        description="score it", create_prompt=lambda ctx: "score"
    )
    judge_server.script(Reply.json({"score": 7}))
    result = await scorer.run(input="q", output="a")
    assert result.score == 7.0 and result.generate_score_prompt == "score"
    assert json.loads(result.to_json())["judge"]["generateScore"]["executions"][0]["output"] == {"score": 7.0}


async def test_step_judge_overrides_scorer_judge_field_by_field(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = (
        create_scorer(id="override", judge={"model": make_judge_model(), "instructions": "scorer instructions"})
        .analyze(
            description="a",
            create_prompt=lambda ctx: "p",
            output_schema=Verdict,
            judge={"model": make_judge_model(model="openai/gpt-4o")},
        )
        .generate_score(lambda ctx: 1)
    )
    judge_server.script(Reply.json(GOOD))
    result = await scorer.run(input="q", output="a")
    assert result.judge.analyze.executions[0].judge_model_id == "gpt-4o"  # type: ignore[union-attr]
    assert judge_server.requests[0].system_prompt == "scorer instructions"


def test_usage_is_empty_only_without_any_count() -> None:
    # is_empty names every field (pricing asks it on every call): a field added to JudgeUsage must join it.
    assert JudgeUsage().is_empty
    for name in JudgeUsage.model_fields:
        assert not JudgeUsage(**{name: 0}).is_empty, name
