"""The scorer pipeline's contract: step order, context, snapshots on failure, not-scorable, input checks."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel, ValidationError

from sidecar.scoring import (
    JudgeExecutionFailure,
    JudgeExecutionSuccess,
    NotScorable,
    ScorerDefinitionError,
    ScorerInputError,
    ScorerRunError,
    StepContext,
    create_scorer,
    not_scorable,
)
from sidecar.testing.judge_server import JudgeServer, Reply


def word_count_scorer():  # type: ignore[no-untyped-def]
    # The reference's own example, step for step.
    return (
        create_scorer(id="quality", name="Quality Scorer", description="Evaluates response quality")
        .preprocess(lambda ctx: {"word_count": len(ctx.run.output.split(" "))})
        .analyze(lambda ctx: {"has_substance": ctx.results.preprocess_step_result["word_count"] > 10})
        .generate_score(lambda ctx: 1.0 if ctx.results.analyze_step_result["has_substance"] else 0.0)
        .generate_reason(
            lambda ctx: f"Score: {ctx.score}. Response has {ctx.results.preprocess_step_result['word_count']} words."
        )
    )


async def test_function_pipeline_matches_the_reference_example() -> None:
    output = "Machine learning is a subset of artificial intelligence that lets computers learn from data."
    result = await word_count_scorer().run(input="What is machine learning?", output=output)
    assert result.score == 1.0
    assert result.reason == "Score: 1.0. Response has 14 words."
    assert result.preprocess_step_result == {"word_count": 14}
    assert result.analyze_step_result == {"has_substance": True}
    assert result.judge is None  # function steps never create judge entries
    assert result.analyze_prompt is None and result.preprocess_prompt is None
    assert len(result.run_id) == 36  # a uuid4 when none is given


async def test_async_steps_and_given_run_identity() -> None:
    async def slow_score(ctx):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        return float(ctx.run.ground_truth == ctx.run.output and ctx.run.request_context["tenant"] == "a")

    scorer = create_scorer(id="exact").generate_score(lambda ctx: float(ctx.run.output == ctx.run.ground_truth))
    result = await scorer.run(input="q", output="x", ground_truth="x", run_id="r-1", request_context={"t": 1})
    assert (result.score, result.run_id, result.ground_truth, result.request_context) == (
        1.0,
        "r-1",
        "x",
        {"t": 1},
    )
    awaited = (
        await create_scorer(id="async")
        .generate_score(slow_score)
        .run(output="x", ground_truth="x", request_context={"tenant": "a"})
    )
    assert awaited.score == 1.0
    with pytest.raises(ScorerRunError, match="must return a number, got bool"):
        await create_scorer(id="bool").generate_score(lambda ctx: True).run(output="x")


async def test_builder_is_immutable() -> None:
    base = create_scorer(id="s")
    with_score = base.generate_score(lambda ctx: 0.5)
    assert base.steps == () and len(with_score.steps) == 1
    with pytest.raises(ScorerDefinitionError):
        with_score.generate_score(lambda ctx: 0.1)
    # Steps run in pipeline order whatever order they were added in.
    added_late = with_score.preprocess(lambda ctx: 2)
    assert [name for name, _ in added_late.steps] == ["preprocess", "generate_score"]
    result = await added_late.run(output="o")
    with pytest.raises(ValidationError):
        result.score = 1.0  # type: ignore[misc]


def test_definition_errors() -> None:
    with pytest.raises(ScorerDefinitionError, match="id"):
        create_scorer(id="")
    with pytest.raises(ScorerDefinitionError, match="output_schema"):
        create_scorer(id="x").analyze(description="d", create_prompt=lambda ctx: "p")
    assert create_scorer(id="x").name == "x"


async def test_run_without_generate_score_raises() -> None:
    with pytest.raises(ScorerDefinitionError, match="generate_score"):
        await create_scorer(id="x").preprocess(lambda ctx: 1).run(output="o")


async def test_bad_run_arguments_get_clear_errors() -> None:
    scorer = create_scorer(id="x").generate_score(lambda ctx: 1)
    with pytest.raises(ScorerInputError, match=r"needs output=\.\.\."):
        await scorer.run(input="q", output=None)
    with pytest.raises(ScorerInputError, match="run_id must be a string"):
        await scorer.run(output="o", run_id=42)  # type: ignore[arg-type]
    with pytest.raises(ScorerInputError, match="request_context must be a mapping"):
        await scorer.run(output="o", request_context=["a"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="output"):
        await scorer.run(input="q")  # type: ignore[call-arg]


async def test_non_numeric_score_fails_the_generate_score_step() -> None:
    scorer = create_scorer(id="x").preprocess(lambda ctx: "kept").generate_score(lambda ctx: "high")
    with pytest.raises(ScorerRunError) as caught:
        await scorer.run(output="o")
    error = caught.value
    assert (error.failed_step, error.completed_steps) == ("generate_score", ("preprocess",))
    assert isinstance(error.__cause__, TypeError)
    assert error.result is not None and error.result.preprocess_step_result == "kept"
    assert error.result.score is None


async def test_function_step_failing_first_leaves_no_result() -> None:
    def boom(ctx):  # type: ignore[no-untyped-def]
        raise RuntimeError("preprocess exploded")

    with pytest.raises(ScorerRunError) as caught:
        await create_scorer(id="x").preprocess(boom).generate_score(lambda ctx: 1).run(output="o")
    assert caught.value.result is None
    assert str(caught.value) == "Scorer Run Failed: preprocess exploded"
    assert isinstance(caught.value.__cause__, RuntimeError)


async def test_not_scorable_skips_the_rest_and_has_no_score(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = (
        create_scorer(id="needs-tools", judge=make_judge_model())
        .preprocess(lambda ctx: not_scorable("no tool calls in this run"))
        .analyze(description="a", create_prompt=lambda ctx: "p", output_schema=_Anything)
        .generate_score(lambda ctx: 1)
    )
    result = await scorer.run(input="q", output="o")
    assert result.not_scorable is not None
    assert (result.not_scorable.step, result.not_scorable.reason) == (
        "preprocess",
        "no tool calls in this run",
    )
    assert result.score is None and not result.is_scored
    assert result.judge is None and judge_server.requests == []
    assert json.loads(result.to_json())["notScorable"] == {
        "step": "preprocess",
        "reason": "no tool calls in this run",
    }


async def test_a_prompt_step_may_say_not_scorable_before_calling_the_judge(
    judge_server: JudgeServer, make_judge_model
) -> None:
    def extract_prompt(ctx: StepContext) -> str | NotScorable:
        return not_scorable("no ground truth") if ctx.run.ground_truth is None else "extract"

    scorer = (
        create_scorer(id="needs-truth", judge=make_judge_model())
        .preprocess(description="extract", create_prompt=extract_prompt, output_schema=_Anything)
        .generate_score(lambda ctx: 1)
    )
    result = await scorer.run(input="q", output="o")
    assert result.not_scorable is not None
    assert (result.not_scorable.step, result.not_scorable.reason) == ("preprocess", "no ground truth")
    assert result.judge is None and result.preprocess_prompt is None and judge_server.requests == []
    judge_server.script(Reply.json({"ok": True}))
    scored = await scorer.run(input="q", output="o", ground_truth="truth")
    assert scored.score == 1 and len(judge_server.requests) == 1


class _Anything(BaseModel):
    ok: bool = True


async def test_reason_failure_after_zero_score_keeps_the_snapshot(judge_server: JudgeServer, make_judge_model) -> None:
    scorer = (
        create_scorer(id="zero", judge=make_judge_model())
        .generate_score(description="score", create_prompt=lambda ctx: "score it")
        .generate_reason(description="reason", create_prompt=lambda ctx: f"explain {ctx.score}")
    )
    judge_server.script(Reply.json({"score": 0}), Reply.error(400, "content policy"))
    with pytest.raises(ScorerRunError) as caught:
        await scorer.run(input="q", output="o")
    error = caught.value
    assert (error.failed_step, error.completed_steps) == ("generate_reason", ("generate_score",))
    assert error.result is not None
    assert error.result.score == 0
    assert error.result.generate_score_prompt == "score it" and error.result.generate_reason_prompt is None
    assert isinstance(error.result.judge.generate_score.executions[0], JudgeExecutionSuccess)  # type: ignore[union-attr]
    failed = error.result.judge.generate_reason.executions[0]  # type: ignore[union-attr]
    assert isinstance(failed, JudgeExecutionFailure) and failed.prompt == "explain 0.0"
    # The error's JSON form omits the result: prompts and raw output must not leak through logs.
    wire = json.loads(error.to_json())
    assert "result" not in wire and "explain" not in error.to_json()
    assert wire["failedStep"] == "generateReason" and wire["completedSteps"] == ["generateScore"]


async def test_create_prompt_raising_records_no_judge_execution(judge_server: JudgeServer, make_judge_model) -> None:
    def bad_prompt(ctx):  # type: ignore[no-untyped-def]
        raise ValueError("cannot build the prompt")

    scorer = (
        create_scorer(id="bad-prompt", judge=make_judge_model())
        .analyze(description="a", create_prompt=bad_prompt, output_schema=_Anything)
        .generate_score(lambda ctx: 1)
    )
    with pytest.raises(ScorerRunError) as caught:
        await scorer.run(input="q", output="o")
    assert caught.value.failed_step == "analyze"
    assert caught.value.result is None
    assert judge_server.requests == []


async def test_concurrent_runs_share_nothing(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.reset(lambda body: Reply.json({"score": len(body["messages"][-1]["content"]) / 100}))
    scorer = create_scorer(id="len", judge=make_judge_model()).generate_score(
        description="s", create_prompt=lambda ctx: "x" * int(ctx.run.output)
    )
    results = await asyncio.gather(*(scorer.run(output=str(n)) for n in range(1, 40)))
    assert [r.score for r in results] == [n / 100 for n in range(1, 40)]
