"""Per-judge admission control through the real client path (fast HTTP) against the scripted judge server."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import pytest
from pydantic import SecretStr

from sidecar.runtime.judge_gate import GateConfig, GateState, JudgeGate, install_gates
from sidecar.scoring import JudgeExecutionFailure, ScorerRunError, ScorerRunResult, create_scorer
from sidecar.scoring.judge.client import JudgeClient, install_judge_client, judge_client
from sidecar.scoring.judge.errors import JudgeUnavailableError
from sidecar.scoring.judge.model import JudgeModel
from sidecar.testing.judge_server import JudgeServer, Reply

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

    def kwargs(self) -> dict[str, Any]:
        return {
            "on_state_change": lambda judge, state: self.states.append((judge, state)),
            "on_spend": lambda judge, spent, cap: self.spend.append((judge, spent, cap)),
            "on_shed": lambda judge, reason: self.shed.append((judge, reason)),
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
    }
    settings.update(overrides)
    return JudgeModel(**settings)


def gated(
    judge_server: JudgeServer, request: pytest.FixtureRequest, config: GateConfig, **gate_kwargs: Any
) -> tuple[JudgeModel, JudgeGate]:
    model = judge_model(judge_server, request)
    gate = JudgeGate(model, config, **gate_kwargs)
    install_judge_client(JudgeClient(model, gate=gate))
    return model, gate


def scorer(model: JudgeModel):  # type: ignore[no-untyped-def]
    return create_scorer(id="gated", description="gate test", judge={"model": model}).generate_score(
        description="score it", create_prompt=lambda ctx: f"Score this answer: {ctx.run.output}"
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


async def test_waiting_for_a_slot_past_max_wait_is_shed_as_backpressure(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    judge_server.reset(lambda body: Reply(delay_s=0.3))
    events = Events()
    model, gate = gated(judge_server, request, GateConfig(max_concurrency=1, max_wait_s=0.05), **events.kwargs())
    slow = asyncio.ensure_future(run(model))
    await asyncio.sleep(0.05)  # the first call holds the only slot
    await refused(model, "backpressure")
    assert (await slow).score == 1.0
    assert len(judge_server.requests) == 1
    assert gate.shed["backpressure"] == 1 and events.shed == [(JUDGE, "backpressure")]
    assert gate.in_flight == 0


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
    config = GateConfig(tpm=6000, tpm_burst=1000, expected_output_tokens=100, max_wait_s=5)
    model, _ = gated(judge_server, request, config, clock=clock, sleep=fake_sleep)
    # The usage reported was small: the estimate is refunded, the next calls go at once.
    for _ in range(3):
        assert (await run(model)).score == 1.0
    assert sleeps == []
    # A call that used 2000 tokens puts the bucket 1000 tokens in debt: the next call would wait > 10 s.
    judge_server.script(Reply(usage={"prompt_tokens": 1900, "completion_tokens": 100, "total_tokens": 2000}))
    await run(model)
    await refused(model, "backpressure")
    clock.advance(20)  # refilled
    assert (await run(model)).score == 1.0
    assert sleeps == [] and len(judge_server.requests) == 5


@pytest.mark.parametrize(
    ("status", "code", "error_name"),
    [
        (401, None, "AuthenticationError"),
        (402, None, "PaymentRequiredError"),
        (403, None, "PermissionDeniedError"),
        (404, "model_not_found", "NotFoundError"),
        (429, "insufficient_quota", "PaymentRequiredError"),
    ],
)
async def test_fatal_error_pauses_the_judge_until_resume(
    judge_server: JudgeServer,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    status: int,
    code: str | None,
    error_name: str,
) -> None:
    events = Events()
    model, gate = gated(judge_server, request, GateConfig(pause_recheck_s=None), **events.kwargs())
    judge_server.script(Reply.error(status, "nope", code=code))
    with caplog.at_level(logging.INFO, logger="sidecar.runtime.judge_gate"):
        cause, execution = await fails_with(model)
        assert type(cause).__name__ == error_name and execution.error.name == error_name
        assert gate.state == "paused" and events.states == [(JUDGE, "paused")]
        assert gate.refusal_reason() == "paused"
        # Paused: the next runs fail fast, and no request reaches the provider.
        await refused(model, "paused")
        await refused(model, "paused")
        assert len(judge_server.requests) == 1
        assert gate.shed["paused"] == 2
        gate.resume()
        assert gate.state == "closed" and events.states[-1] == (JUDGE, "closed")
        assert (await run(model)).score == 1.0
    assert len(judge_server.requests) == 2
    pauses = [r for r in caplog.records if " paused: " in r.getMessage()]
    assert len(pauses) == 1 and pauses[0].levelno == logging.ERROR
    assert error_name in pauses[0].getMessage() and JUDGE in pauses[0].getMessage()
    assert "SECRET" not in caplog.text


async def test_paused_judge_rechecks_with_one_probe(judge_server: JudgeServer, request: pytest.FixtureRequest) -> None:
    clock = FakeClock()
    events = Events()
    model, gate = gated(judge_server, request, GateConfig(pause_recheck_s=60), clock=clock, **events.kwargs())
    judge_server.script(Reply.error(401, "bad key"))
    await fails_with(model)
    clock.advance(59)
    await refused(model, "paused")
    clock.advance(2)
    judge_server.script(Reply.error(401, "still bad"))
    cause, _ = await fails_with(model)  # the re-check call went out, and failed: paused again
    assert type(cause).__name__ == "AuthenticationError"
    assert gate.state == "paused"
    await refused(model, "paused")  # the pause clock restarted
    clock.advance(61)
    assert (await run(model)).score == 1.0  # re-check succeeded: closed
    assert gate.state == "closed"
    assert [s for _, s in events.states] == ["paused", "half_open", "paused", "half_open", "closed"]
    assert len(judge_server.requests) == 3


async def test_circuit_opens_after_consecutive_failures_then_probes(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock()
    events = Events()
    config = GateConfig(failure_threshold=3, reset_after_s=10)
    model, gate = gated(judge_server, request, config, clock=clock, **events.kwargs())
    # 429s and request errors say nothing about the judge's health: they never open the circuit.
    judge_server.script(*[Reply.error(429, "slow down")] * 3, Reply.error(400, "bad request"))
    for _ in range(4):
        await fails_with(model)
    assert gate.state == "closed"
    judge_server.script(*[Reply.error(500, "boom")] * 3)
    for _ in range(3):
        cause, _ = await fails_with(model)
        assert type(cause).__name__ == "InternalServerError"
    assert gate.state == "open"
    await refused(model, "circuit_open")
    assert len(judge_server.requests) == 7
    # Half-open: one probe; it fails, the circuit opens again for another reset_after_s.
    clock.advance(10)
    judge_server.script(Reply.error(503, "still down"))
    await fails_with(model)
    assert gate.state == "open"
    clock.advance(5)
    await refused(model, "circuit_open")
    # The next probe succeeds: closed, and calls flow again.
    clock.advance(5)
    assert (await run(model)).score == 1.0
    assert gate.state == "closed"
    assert (await run(model)).score == 1.0
    assert [s for _, s in events.states] == ["open", "half_open", "open", "half_open", "closed"]
    assert len(judge_server.requests) == 10
    assert gate.shed["circuit_open"] == 2


async def test_only_one_probe_while_half_open(judge_server: JudgeServer, request: pytest.FixtureRequest) -> None:
    clock = FakeClock()
    model, gate = gated(judge_server, request, GateConfig(failure_threshold=1, reset_after_s=10), clock=clock)
    judge_server.script(Reply.error(500, "boom"))
    await fails_with(model)
    assert gate.state == "open"
    clock.advance(10)
    judge_server.reset(lambda body: Reply(delay_s=0.2))
    probe = asyncio.ensure_future(run(model))
    await asyncio.sleep(0.05)
    assert gate.state == "half_open" and gate.in_flight == 1
    await refused(model, "circuit_open")  # everyone else waits for the probe's verdict
    assert (await probe).score == 1.0
    assert gate.state == "closed" and len(judge_server.requests) == 1


async def test_cancelled_probe_lets_the_next_call_probe(
    judge_server: JudgeServer, request: pytest.FixtureRequest
) -> None:
    clock = FakeClock()
    model, gate = gated(
        judge_server, request, GateConfig(max_concurrency=1, failure_threshold=1, reset_after_s=10), clock=clock
    )
    judge_server.script(Reply.error(500, "boom"))
    await fails_with(model)
    clock.advance(10)
    judge_server.script(Reply(delay_s=1.0))
    probe = asyncio.ensure_future(run(model))
    await asyncio.sleep(0.05)
    assert gate.state == "half_open" and gate.in_flight == 1
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    # The slot and the probe came back: the next call is the probe (no new reset_after_s wait).
    assert gate.in_flight == 0 and gate.state == "open"
    assert (await run(model)).score == 1.0
    assert gate.state == "closed"


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
    assert gate.refusal_reason() == "spend_cap" and len(judge_server.requests) == 3
    # Rolling window: the first call's spend leaves it at t+60, taking the total under the cap.
    clock.advance(35)
    await refused(model, "spend_cap")
    clock.advance(6)
    assert gate.spent_usd == pytest.approx(2 * COST_PER_CALL)
    assert (await run(model)).score == 1.0
    assert gate.shed["spend_cap"] == 2 and events.shed == [(JUDGE, "spend_cap")] * 2
    assert gate.state == "closed"  # the spend cap is not a circuit state


async def test_install_gates_registers_gated_clients(judge_server: JudgeServer, request: pytest.FixtureRequest) -> None:
    clock_free = judge_model(judge_server, request)
    other = judge_model(judge_server, request, model="openai/gpt-4o")
    events = Events()
    gates = install_gates(
        {"default": (clock_free, GateConfig(max_concurrency=4)), "big": (other, GateConfig(spend_cap_usd=1.0))},
        **events.kwargs(),
    )
    assert set(gates) == {"default", "big"}
    assert judge_client(clock_free).gate is gates["default"]
    assert judge_client(other).gate is gates["big"]
    assert gates["big"].name == "openai/gpt-4o" and gates["big"].cap_usd == 1.0
    assert (await run(other)).score == 1.0
    assert gates["big"].spent_usd > 0 and events.spend[0][0] == "openai/gpt-4o"
    assert gates["default"].spent_usd == 0


async def test_callback_errors_do_not_break_the_gate(
    judge_server: JudgeServer, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(*args: object) -> None:
        raise RuntimeError("metrics are down")

    model, gate = gated(
        judge_server, request, GateConfig(failure_threshold=1), on_state_change=explode, on_spend=explode
    )
    assert (await run(model)).score == 1.0
    judge_server.script(Reply.error(500, "boom"))
    await fails_with(model)
    assert gate.state == "open"
    assert "judge gate callback failed" in caplog.text


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
