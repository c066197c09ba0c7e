"""What eval and the demo say about a judge: an outage's length spans its failed probes."""

from __future__ import annotations

from sidecar.app.judge_health import JudgeHealth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_lasts_from_the_circuit_opening_through_its_failed_probes() -> None:
    clock = Clock()
    health = JudgeHealth(clock=clock)
    health.judge_state_changed("openai/m", "open")
    for _ in range(3):  # a probe every 30 s, each failing
        clock.now += 30
        health.judge_state_changed("openai/m", "half_open")
        clock.now += 1
        health.judge_state_changed("openai/m", "open")
    clock.now += 5
    (line,) = health.explain(holding=False)
    assert "circuit open for 98s" in line
    # Closed again, then a new outage: counted from its own start.
    health.judge_state_changed("openai/m", "closed")
    clock.now += 100
    health.judge_state_changed("openai/m", "paused")
    clock.now += 7
    (line,) = health.explain(holding=False)
    assert "paused for 7s" in line
