"""Per-judge admission control through the real client path (fast HTTP) against the scripted judge server."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import SecretStr

from sidecar.runtime.judge_gate import GateConfig, GateState, JudgeGate
from sidecar.scoring import JudgeExecutionFailure, ScorerRunError, ScorerRunResult, create_scorer
from sidecar.scoring.deadline import deadline_paused, run_deadline
from sidecar.scoring.judge.client import JudgeClient
from sidecar.scoring.judge.errors import JudgeUnavailableError
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.steps import GeneratedScore
from sidecar.scoring.types import JudgeCall
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.judge import judge_client

JUDGE = "openai/gpt-4o-mini"
# Default Reply usage (10 in, 5 out) at gpt-4o-mini list prices.
COST_PER_CALL = 10 * 1.5e-07 + 5 * 6e-07


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Events:
    """Everything the gate reports through its callbacks."""

    def __init__(self) -> None:
        self.states: list[tuple[str, GateState]] = []
        self.spend: list[tuple[str, float, float | None]] = []
        self.shed: list[tuple[str, str]] = []
        self.holds: list[float] = []

    def kwargs(self) -> dict[str, Any]:
        return {
            "on_state_change": lambda judge, state: self.states.append((judge, state)),
            "on_spend": lambda judge, spent, cap: self.spend.append((judge, spent, cap)),
            "on_shed": lambda judge, reason: self.shed.append((judge, reason)),
            "on_hold": lambda judge, seconds: self.holds.append(seconds),
        }


def judge_model(judge_server: JudgeServer, request: pytest.FixtureRequest, **overrides: Any) -> JudgeModel:
    # A key per test: clients are shared per (model, key) on the session loop, so gates never leak across tests.
    settings: dict[str, Any] = {
        "model": JUDGE,
        "api_base": judge_server.url,
        "api_key": SecretStr(f"sk-gate-{request.node.name}-SECRET"),
        "transport": "http",
        "timeout_s": 2.0,
        "max_retries": 0,
        "backoff_base_s": 0.01,
        # The gate's rules for a judge whose structured-output shape is known: while `auto` still learns it, a
        # 500 to the first shape is tried as a refusal of that shape (tests/test_judge_structured_output.py).
        "structured_output": "json_schema",
    }
    settings.update(overrides)
    return JudgeModel(**settings)


# The gated client of each judge model a test made (scorers are bound to it, as the assembly binds them).
CLIENTS: dict[str, JudgeClient] = {}


def gated(
    judge_server: JudgeServer, request: pytest.FixtureRequest, config: GateConfig, **gate_kwargs: Any
) -> tuple[JudgeModel, JudgeGate]:
    model = judge_model(judge_server, request)
    gate = JudgeGate(model, config, **gate_kwargs)
    CLIENTS[model.cache_key()] = judge_client(model, gate=gate)
    return model, gate


def scorer(model: JudgeModel):  # type: ignore[no-untyped-def]
    return (
        create_scorer(id="gated", description="gate test", judge={"model": model})
        .generate_score(description="score it", create_prompt=lambda ctx: f"Score this answer: {ctx.run.output}")
        .bind(CLIENTS[model.cache_key()])
    )


async def run(model: JudgeModel) -> ScorerRunResult:
    result: ScorerRunResult = await scorer(model).run(input="q", output="a")
    return result


async def fails_with(model: JudgeModel) -> tuple[BaseException, JudgeExecutionFailure]:
    with pytest.raises(ScorerRunError) as caught:
        await run(model)
    assert caught.value.result is not None and caught.value.result.judge is not None
    record = caught.value.result.judge.generate_score
    assert record is not None
    execution = record.executions[-1]
    assert isinstance(execution, JudgeExecutionFailure)
    cause = caught.value.__cause__
    assert cause is not None
    return cause, execution


async def refused(model: JudgeModel, reason: str) -> None:
    cause, execution = await fails_with(model)
    assert isinstance(cause, JudgeUnavailableError) and cause.reason == reason
    assert not cause.retryable
    # The step fails with the gate's error (the runtime counts the run as shed); no call was made.
    assert execution.error.name == "JudgeUnavailableError" and execution.error.code == reason
    assert execution.calls == () and execution.model_call_count == 0


async def test_concurrency_limit_is_never_exceeded(judge_server: JudgeServer, request: pytest.FixtureRequest) -> None:
    current = peak = 0

    async def responder(body: dict[str, Any]) -> Reply:
        nonlocal current, peak
        current += 1
        peak = max(peak, current)
        await asyncio.sleep(0.05)
        current -= 1
        return Reply()

    judge_server.reset(responder)
    model, gate = gated(judge_server, request, GateConfig(max_concurrency=2))
    results = await asyncio.gather(*(run(model) for _ in range(8)))
    assert [r.score for r in results] == [1.0] * 8
    assert peak == 2 and len(judge_server.requests) == 8
    assert gate.in_flight == 0 and gate.state == "closed"


async def test_a_queued_call_waits_for_its_slot_outside_the_run_deadline(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    judge_server.reset(lambda body: Reply(delay_s=0.3))
    events = Events()
    model, gate = gated(judge_server, request, GateConfig(max_concurrency=1), **events.kwargs())
    slow = asyncio.ensure_future(run(model))
    await asyncio.sleep(0.05)  # the first call holds the only slot
    # The second run queues ~0.25 s for the slot and takes 0.3 s at the judge: over its 0.4 s deadline only if
    # the queue counted.
    async with run_deadline(0.4):
        assert (await run(model)).score == 1.0
    assert (await slow).score == 1.0
    assert len(judge_server.requests) == 2 and events.shed == [] and gate.in_flight == 0
    assert gate.held == 0  # a queue for a slot is not a hold


async def test_rpm_bucket_spaces_calls(judge_server: JudgeServer, request: pytest.FixtureRequest) -> None:
    arrivals: list[float] = []

    def responder(body: dict[str, Any]) -> Reply:
        arrivals.append(time.monotonic())
        return Reply()

    judge_server.reset(responder)
    model, _ = gated(judge_server, request, GateConfig(rpm=1200, rpm_burst=1))  # 20 calls/s, one at a time
    await asyncio.gather(*(run(model) for _ in range(5)))
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(gaps) == 4 and min(gaps) >= 0.04, gaps  # 50 ms apart, minus scheduling jitter
    assert arrivals[-1] - arrivals[0] >= 0.19


async def test_tpm_bucket_reconciles_with_reported_usage(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock()
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    # 100 tokens/s, burst 1000; a call reserves its prompt / 4 + 100 expected output tokens.
    config = GateConfig(tpm=6000, tpm_burst=1000, expected_output_tokens=100)
    model, _ = gated(judge_server, request, config, clock=clock, sleep=fake_sleep)
    # The usage reported was small: the estimate is refunded, the next calls go at once.
    for _ in range(3):
        assert (await run(model)).score == 1.0
    assert sleeps == []
    # A call that used 2000 tokens puts the bucket 1000 tokens in debt: the next call would wait > 10 s.
    judge_server.script(Reply(usage={"prompt_tokens": 1900, "completion_tokens": 100, "total_tokens": 2000}))
    await run(model)
    assert (await run(model)).score == 1.0  # waited for its tokens instead of failing
    assert len(sleeps) == 1 and sleeps[0] > 10
    clock.advance(20)  # refilled
    assert (await run(model)).score == 1.0
    assert len(sleeps) == 1 and len(judge_server.requests) == 6


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("status", "code", "error_name", "reason"),
    [
        (401, None, "AuthenticationError", "authentication"),
        (402, None, "PaymentRequiredError", "payment_required"),
        (403, None, "PermissionDeniedError", "permission_denied"),
        (404, "model_not_found", "NotFoundError", "not_found"),
        (429, "insufficient_quota", "PaymentRequiredError", "payment_required"),
    ],
)
async def test_fatal_error_pauses_the_judge_and_holds_runs_until_resume(
    judge_server: JudgeServer,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    status: int,
    code: str | None,
    error_name: str,
    reason: str,
) -> None:
    events = Events()
    model, gate = gated(judge_server, request, GateConfig(pause_recheck_s=None), **events.kwargs())
    assert gate.pause_reason is None
    judge_server.script(Reply.error(status, "nope", code=code))
    with caplog.at_level(logging.INFO, logger="sidecar.runtime.judge_gate"):
        # The run whose call met the error, and two later ones, wait; no further request reaches the provider.
        runs = [asyncio.ensure_future(run(model))]
        await until(lambda: gate.held == 1)
        runs += [asyncio.ensure_future(run(model)) for _ in range(2)]
        await until(lambda: gate.held == 3)
        assert gate.state == "paused" and events.states == [(JUDGE, "paused")]
        assert gate.hold_reason() == "paused" and gate.pause_reason == reason
        await asyncio.sleep(0.1)
        assert len(judge_server.requests) == 1 and not any(r.done() for r in runs)
        gate.resume()
        results = await asyncio.gather(*runs)
    assert [r.score for r in results] == [1.0] * 3
    assert gate.state == "closed" and events.states[-1] == (JUDGE, "closed") and gate.pause_reason is None
    assert len(judge_server.requests) == 4 and gate.held == 0 and events.shed == []
    assert len(events.holds) == 3 and all(seconds >= 0.1 for seconds in events.holds)
    first = results[0].judge.generate_score.executions[0]  # type: ignore[union-attr]
    assert [c.outcome for c in first.calls] == ["error", "ok"] and first.attempt_count == 1
    pauses = [r for r in caplog.records if f" paused ({reason}): " in r.getMessage()]
    assert len(pauses) == 1 and pauses[0].levelno == logging.ERROR
    assert error_name in pauses[0].getMessage() and JUDGE in pauses[0].getMessage()
    # It says how to resume without Python: the signal, and how to send it in a container.
    assert "SIGUSR1" in pauses[0].getMessage() and "kill -USR1 1" in pauses[0].getMessage()
    assert "SECRET" not in caplog.text


async def test_paused_judge_rechecks_with_one_probe(judge_server: JudgeServer, request: pytest.FixtureRequest) -> None:
    events = Events()
    model, gate = gated(judge_server, request, GateConfig(pause_recheck_s=0.3), **events.kwargs())
    judge_server.script(Reply.error(401, "bad key"), Reply.error(401, "still bad"))
    held = asyncio.ensure_future(run(model))
    await until(lambda: gate.state == "paused")
    await asyncio.sleep(0.1)
    assert len(judge_server.requests) == 1  # waiting for the re-check
    # First re-check fails (paused again, clock restarted); the second succeeds: closed, the run scored.
    assert (await held).score == 1.0
    assert gate.state == "closed"
    assert [s for _, s in events.states] == ["paused", "half_open", "paused", "half_open", "closed"]
    assert len(judge_server.requests) == 3


async def test_an_unreachable_judge_counts_every_refused_call_and_logs_its_cause_once_per_change(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    # A port bound then closed: every connection is refused, as for a judge whose server is gone.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    model = JudgeModel(
        model=JUDGE,
        api_base=f"http://127.0.0.1:{port}/v1",
        api_key=SecretStr(f"sk-gate-{request.node.name}-SECRET"),
        transport="http",
        timeout_s=2.0,
        max_retries=0,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
    )
    events = Events()
    gate = JudgeGate(model, GateConfig(failure_threshold=3, reset_after_s=0.02), **events.kwargs())
    outcomes: list[str] = []

    class Calls:
        def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
            outcomes.append(call.outcome)

    CLIENTS[model.cache_key()] = judge_client(model, gate=gate, observers=[Calls()])
    with caplog.at_level(logging.INFO, logger="sidecar.runtime.judge_gate"):
        held = asyncio.ensure_future(run(model))
        # Three refused calls open the circuit; then one probe every reset_after_s, each refused too.
        await until(lambda: outcomes.count("connection_error") >= 3 + 12, timeout_s=20)
        assert gate.state in ("open", "half_open") and gate.held == 1 and not held.done()
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
    # Every refused connection is a call with outcome connection_error (the metric counts them all).
    assert set(outcomes) == {"connection_error"}
    assert [s for _, s in events.states][:3] == ["open", "half_open", "open"]
    assert gate.pause_reason is None  # an outage is not a pause
    cause = f"cannot connect to 127.0.0.1:{port}: Connection refused"
    lines = [r.getMessage() for r in caplog.records]
    opened = [line for line in lines if "circuit open after 3 consecutive failed calls" in line]
    assert len(opened) == 1 and cause in opened[0]
    # Failed probes: the first, then every tenth, each with the cause; never the key.
    probes = [line for line in lines if "probe call" in line and "failed" in line]
    assert [line.split("probe call ")[1].split()[0] for line in probes] == ["1", "11"]
    assert all(cause in line for line in probes)
    assert "SECRET" not in caplog.text


async def test_circuit_opens_holds_and_closes_on_a_probe(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    events = Events()
    config = GateConfig(failure_threshold=3, reset_after_s=0.3)
    model, gate = gated(judge_server, request, config, **events.kwargs())
    # 429s say nothing about the judge's health: they never open the circuit (and never fail a gated run).
    judge_server.script(*[Reply.error(429, "slow down")] * 3)
    assert (await run(model)).score == 1.0
    assert gate.state == "closed" and len(judge_server.requests) == 4
    # A request error fails the run at once, and does not open the circuit either.
    judge_server.script(Reply.error(400, "bad request"))
    cause, _ = await fails_with(model)
    assert type(cause).__name__ == "BadRequestError" and gate.state == "closed"
    # An outage: the run is held through it (its retries do not count: nobody is answered), never failed.
    judge_server.reset()
    judge_server.script(*[Reply.error(500, "boom")] * 3, Reply.error(503, "still down"))
    started = time.monotonic()
    result = await run(model)
    assert result.score == 1.0
    assert time.monotonic() - started >= 0.6  # two reset_after_s waits: the first probe failed
    assert [s for _, s in events.states] == ["open", "half_open", "open", "half_open", "closed"]
    execution = result.judge.generate_score.executions[0]  # type: ignore[union-attr]
    assert [c.outcome for c in execution.calls] == ["error"] * 4 + ["ok"]
    assert execution.attempt_count == 1 and len(judge_server.requests) == 5
    assert events.shed == [] and gate.held == 0


async def test_a_request_that_fails_while_the_judge_answers_others_uses_up_its_retries(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    async def responder(body: dict[str, Any]) -> Reply:
        if "poison" in body["messages"][-1]["content"]:
            await asyncio.sleep(0.05)  # others are answered while it is in flight
            return Reply.error(500, "this request breaks the judge")
        return Reply()

    judge_server.reset(responder)
    model, gate = gated(judge_server, request, GateConfig(failure_threshold=100))
    model = model.model_copy(update={"max_retries": 2})
    CLIENTS[model.cache_key()] = judge_client(model, gate=gate)
    stop = asyncio.Event()

    async def healthy_traffic() -> None:
        while not stop.is_set():
            assert (await run(model)).score == 1.0

    traffic = asyncio.ensure_future(healthy_traffic())
    poisoned = scorer(model)
    with pytest.raises(ScorerRunError) as caught:
        await poisoned.run(input="q", output="poison")
    stop.set()
    await traffic
    assert type(caught.value.__cause__).__name__ == "InternalServerError"
    execution = caught.value.result.judge.generate_score.executions[-1]  # type: ignore[union-attr]
    assert [c.outcome for c in execution.calls] == ["error"] * 3  # max_retries + 1 tries
    assert gate.state == "closed" and gate.held == 0


async def test_held_calls_wait_for_the_probe_instead_of_failing(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    model, gate = gated(judge_server, request, GateConfig(failure_threshold=1, reset_after_s=0.2))
    judge_server.script(Reply.error(500, "boom"))
    first = asyncio.ensure_future(run(model))
    await until(lambda: gate.state == "open")
    probe_started = asyncio.Event()

    async def slow_probe(body: dict[str, Any]) -> Reply:
        probe_started.set()
        await asyncio.sleep(0.3)
        return Reply()

    judge_server.reset(slow_probe)
    others = [asyncio.ensure_future(run(model)) for _ in range(5)]
    await probe_started.wait()
    await asyncio.sleep(0.1)
    assert gate.state == "half_open" and gate.in_flight == 1 and gate.held == 5
    assert len(judge_server.requests) == 1  # the probe alone
    results = await asyncio.gather(first, *others)
    assert [r.score for r in results] == [1.0] * 6
    assert gate.state == "closed" and len(judge_server.requests) == 6 and gate.shed == {}


async def test_cancelled_probe_lets_the_next_call_probe(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    model, gate = gated(judge_server, request, GateConfig(max_concurrency=1, failure_threshold=1, reset_after_s=0.1))
    judge_server.script(Reply.error(500, "boom"), Reply(delay_s=1.0))
    probe = asyncio.ensure_future(run(model))
    await until(lambda: gate.state == "half_open" and gate.in_flight == 1)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    # The slot and the probe came back: the next call is the probe (no new reset_after_s wait).
    assert gate.in_flight == 0 and gate.state == "open"
    assert (await run(model)).score == 1.0
    assert gate.state == "closed"


async def test_a_bounded_hold_gives_up_with_the_state_that_held_it(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    config = GateConfig(failure_threshold=1, reset_after_s=30, max_hold_s=0.2)
    model, gate = gated(judge_server, request, config)
    judge_server.script(Reply.error(500, "boom"))
    started = time.monotonic()
    cause, _ = await fails_with(model)
    assert gate.state == "open"
    await refused(model, "circuit_open")
    assert 0.15 <= time.monotonic() - started < 2
    # A paused judge is refused at once by a bounded hold: nobody will fix the key within it.
    judge_server.reset()
    gate.resume()
    judge_server.script(Reply.error(401, "bad key"))
    cause, _ = await fails_with(model)
    assert type(cause).__name__ == "AuthenticationError"
    started = time.monotonic()
    await refused(model, "paused")
    assert time.monotonic() - started < 0.1


async def test_a_bounded_hold_counts_from_when_the_judge_stopped_answering(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    """Offline (eval), calls that queue up behind an outage give up together once the circuit has been open
    for max_hold_s, instead of each waiting the whole bound after it arrived."""
    config = GateConfig(failure_threshold=1, reset_after_s=30, max_hold_s=1.0)
    model, gate = gated(judge_server, request, config)
    judge_server.script(Reply.error(500, "boom"))
    started = time.monotonic()  # the circuit opens on the first call's failure
    await fails_with(model)
    assert gate.state == "open"
    await asyncio.sleep(max(0.0, started + 0.5 - time.monotonic()))
    # Arrived half-way into the outage: waits what is left of the bound (it would wait until ~1.5 s alone).
    await refused(model, "circuit_open")
    assert 0.9 <= time.monotonic() - started < 1.4
    at = time.monotonic()
    await refused(model, "circuit_open")  # past the bound: at once
    assert time.monotonic() - at < 0.2


async def test_spend_cap_sheds_until_the_window_rolls(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock()
    events = Events()
    config = GateConfig(spend_cap_usd=2.5 * COST_PER_CALL, spend_window_s=60)
    model, gate = gated(judge_server, request, config, clock=clock, **events.kwargs())
    assert gate.cap_usd == config.spend_cap_usd and gate.spent_usd == 0
    for _ in range(2):
        assert (await run(model)).score == 1.0
        clock.advance(10)
    assert gate.spent_usd == pytest.approx(2 * COST_PER_CALL)
    assert (await run(model)).score == 1.0  # under the cap when admitted; the cap is reached after it
    assert gate.spent_usd == pytest.approx(3 * COST_PER_CALL)
    assert [round(spent / COST_PER_CALL, 6) for _, spent, _ in events.spend] == [1, 2, 3]
    assert all(cap == config.spend_cap_usd for _, _, cap in events.spend)
    await refused(model, "spend_cap")
    assert gate.hold_reason() == "spend_cap" and len(judge_server.requests) == 3
    # Rolling window: the first call's spend leaves it at t+60, taking the total under the cap.
    clock.advance(35)
    await refused(model, "spend_cap")
    clock.advance(6)
    assert gate.spent_usd == pytest.approx(2 * COST_PER_CALL)
    assert (await run(model)).score == 1.0
    assert gate.shed["spend_cap"] == 2 and events.shed == [(JUDGE, "spend_cap")] * 2
    assert gate.state == "closed"  # the spend cap is not a circuit state


async def test_spend_cap_hold_policy_waits_for_the_window(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    events = Events()
    config = GateConfig(spend_cap_usd=2.5 * COST_PER_CALL, spend_window_s=0.5, on_spend_cap="hold")
    model, gate = gated(judge_server, request, config, **events.kwargs())
    started = time.monotonic()
    results = [await run(model) for _ in range(4)]  # the fourth waits for the first call's spend to expire
    assert [r.score for r in results] == [1.0] * 4
    assert time.monotonic() - started >= 0.45
    assert events.shed == [] and len(events.holds) == 1 and events.holds[0] >= 0.3
    assert len(judge_server.requests) == 4 and gate.held == 0


async def test_callback_errors_do_not_break_the_gate(
    judge_server: JudgeServer, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(*args: object) -> None:
        raise RuntimeError("metrics are down")

    model, gate = gated(
        judge_server,
        request,
        GateConfig(failure_threshold=1, reset_after_s=0.05),
        on_state_change=explode,
        on_spend=explode,
        on_hold=explode,
    )
    assert (await run(model)).score == 1.0
    judge_server.script(Reply.error(500, "boom"))
    assert (await run(model)).score == 1.0  # held through the open circuit, then scored
    assert gate.state == "closed"
    assert "judge gate callback failed" in caplog.text


class CallLog:
    """A ``JudgeCallObserver``: every call the client reports."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, JudgeCall]] = []

    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        self.calls.append((request.scorer, request.step, call))


async def test_every_call_is_reported_once_whatever_becomes_of_its_run(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    served = {"requests": 0, "input": 0, "output": 0}
    replies = itertools.cycle(
        [
            Reply.error(429, "slow down"),
            Reply.error(500, "boom"),
            Reply(content="not json at all", usage={"prompt_tokens": 7, "completion_tokens": 3}),
            Reply(usage={"prompt_tokens": 11, "completion_tokens": 2}),
        ]
    )

    def responder(body: dict[str, Any]) -> Reply:
        reply = next(replies)
        served["requests"] += 1
        if reply.status == 200 and reply.usage:
            served["input"] += reply.usage["prompt_tokens"]
            served["output"] += reply.usage["completion_tokens"]
        return reply

    judge_server.reset(responder)
    log = CallLog()
    model = judge_model(judge_server, request, max_retries=5)
    gate = JudgeGate(model, GateConfig(failure_threshold=100))
    analyzer = (
        create_scorer(id="counted", judge={"model": model})
        .analyze(
            description="verdict", create_prompt=lambda ctx: f"judge {ctx.run.output}", output_schema=GeneratedScore
        )
        .generate_score(lambda ctx: ctx.results.analyze_step_result.score)
        .bind(judge_client(model, gate=gate, observers=[log]))
    )
    # Some runs fail (two unusable answers in a row); their calls count all the same.
    await asyncio.gather(*(analyzer.run(input="q", output=f"a{i}") for i in range(12)), return_exceptions=True)
    assert len(judge_server.requests) == served["requests"]
    # A run cancelled mid-call (a rebalance, shutdown) still reports its call.
    judge_server.reset(lambda body: Reply(delay_s=1.0))
    cancelled = asyncio.ensure_future(analyzer.run(input="q", output="late"))
    await until(lambda: len(judge_server.requests) == 1)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    outcomes = [call.outcome for _, _, call in log.calls]
    assert len(outcomes) == served["requests"] + 1
    assert outcomes[-1] == "cancelled" and {"rate_limited", "error", "invalid_output", "ok"} <= set(outcomes)
    assert sum((c.usage.input_tokens or 0) for _, _, c in log.calls if c.usage) == served["input"]
    assert sum((c.usage.output_tokens or 0) for _, _, c in log.calls if c.usage) == served["output"]
    assert {(scorer_id, step) for scorer_id, step, _ in log.calls} == {("counted", "analyze")}
    assert all(c.estimated_cost_usd for _, _, c in log.calls if c.usage)
    assert gate.in_flight == 0


async def test_the_run_deadline_does_not_count_time_held(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    model, gate = gated(judge_server, request, GateConfig(failure_threshold=1, reset_after_s=0.5))
    judge_server.script(Reply.error(503, "down"))
    async with run_deadline(0.3):  # shorter than the hold
        assert (await run(model)).score == 1.0
    assert gate.state == "closed"


async def test_calls_in_flight_count_against_the_spend_cap(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    # 20 runs arrive at once under a cap worth a few calls: without counting what is in flight, all 20
    # would be admitted (nothing is spent yet) and the cap overshot twentyfold.
    judge_server.reset(lambda body: Reply(delay_s=0.2))
    model, gate = gated(judge_server, request, GateConfig(max_concurrency=64, spend_cap_usd=3 * COST_PER_CALL))
    results = await asyncio.gather(*(run(model) for _ in range(20)), return_exceptions=True)
    admitted = [r for r in results if isinstance(r, ScorerRunResult)]
    shed = [r for r in results if isinstance(r, ScorerRunError)]
    assert len(admitted) + len(shed) == 20
    assert 1 <= len(admitted) <= 3 and len(judge_server.requests) == len(admitted)
    assert gate.shed["spend_cap"] == len(shed)
    assert gate.spent_usd <= 3 * COST_PER_CALL + 1e-12  # admitted on estimates, charged on actual usage
    assert gate.in_flight == 0


async def test_a_cancelled_queued_call_gives_its_turn_to_the_next(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    judge_server.reset(lambda body: Reply(delay_s=0.1))
    model, gate = gated(judge_server, request, GateConfig(max_concurrency=1))
    first = asyncio.ensure_future(run(model))
    await until(lambda: gate.in_flight == 1)
    queued = [asyncio.ensure_future(run(model)) for _ in range(3)]
    await asyncio.sleep(0.02)
    queued[1].cancel()  # leaves the queue without ever holding the slot
    results = await asyncio.gather(first, queued[0], queued[2])
    with pytest.raises(asyncio.CancelledError):
        await queued[1]
    assert [r.score for r in results] == [1.0] * 3
    assert len(judge_server.requests) == 3 and gate.in_flight == 0
    assert (await run(model)).score == 1.0  # the one slot is free again, not lost or doubled


async def test_the_run_deadline_ends_own_work_past_it_and_not_time_paused() -> None:
    with pytest.raises(TimeoutError):
        async with run_deadline(0.05):
            await asyncio.sleep(1)  # the run's own work
    async with run_deadline(0.2):
        with deadline_paused():
            await asyncio.sleep(0.3)  # waiting for the judge: not counted
        await asyncio.sleep(0.05)  # own work after the wait: within what is left
