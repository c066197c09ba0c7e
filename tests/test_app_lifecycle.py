"""The stop watchdog's rules, with a fake clock and a fake exit (the real processes: test_worker_lifecycle)."""

from __future__ import annotations

import logging
import os

import pytest

from sidecar.app.lifecycle import EXIT_STOP_OVERRUN, StopWatchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watchdog(clock: Clock, exits: list[int], **kwargs: object) -> StopWatchdog:
    return StopWatchdog(10.0, grace_s=2.0, exit=exits.append, clock=clock, **kwargs)  # type: ignore[arg-type]


def test_an_armed_stop_ends_the_process_with_3_past_the_budget_and_its_grace(capfd: pytest.CaptureFixture[str]) -> None:
    clock, exits = Clock(), []
    dog = watchdog(clock, exits)
    dog.phase_source = lambda: "closing: leaving the consumer group"
    dog.check()
    assert exits == [] and dog.deadline is None  # not armed: nothing to enforce
    assert dog.arm("the stop was asked for")
    assert not dog.arm("again")  # the first stop counts
    clock.now += 11.9
    dog.check()
    assert exits == []
    clock.now += 0.2
    dog.check()
    assert exits == [EXIT_STOP_OVERRUN]
    line = capfd.readouterr().err
    assert "stop overran its deadline: 12.1 s since the stop was asked for" in line
    assert "runtime.shutdown_timeout_s 10 s + 2 s" in line
    assert "still closing: leaving the consumer group" in line and "status 3" in line


def test_a_phase_that_fails_to_describe_itself_does_not_keep_the_process_alive(
    capfd: pytest.CaptureFixture[str],
) -> None:
    clock, exits = Clock(), []
    dog = watchdog(clock, exits)
    dog.phase = "draining"

    def broken() -> str:
        raise RuntimeError("the service is half torn down")

    dog.phase_source = broken
    dog.arm("the stop was asked for")
    clock.now += 13
    dog.check()
    assert exits == [EXIT_STOP_OVERRUN]
    assert "still draining" in capfd.readouterr().err


def test_a_new_parent_means_the_supervisor_is_gone_said_once(caplog: pytest.LogCaptureFixture) -> None:
    clock, exits, calls = Clock(), [], []
    dog = watchdog(clock, exits, parent_pid=os.getppid() + 1_000_000)  # not this process's parent
    dog.on_parent_gone = lambda: calls.append("stop")
    with caplog.at_level(logging.WARNING, logger="sidecar.app.lifecycle"):
        dog.check()
        dog.check()
        dog.supervisor_gone("its stdin pipe closed")  # the loop's path, later: nothing more
    assert calls == ["stop"]
    assert dog.deadline == 100.0 + 12.0
    assert [r.getMessage() for r in caplog.records] == [
        f"the supervisor (pid {os.getppid() + 1_000_000}) is gone (this worker's parent is now pid {os.getppid()}): "
        "stopping within runtime.shutdown_timeout_s (10 s)"
    ]
    clock.now += 12
    dog.check()
    assert exits == [EXIT_STOP_OVERRUN]


def test_the_same_parent_is_left_alone() -> None:
    clock, exits = Clock(), []
    dog = watchdog(clock, exits, parent_pid=os.getppid())
    dog.on_parent_gone = lambda: pytest.fail("the parent is still there")
    clock.now += 1000
    dog.check()
    assert dog.deadline is None and exits == []


def test_the_thread_watches_until_closed() -> None:
    exits: list[int] = []
    dog = StopWatchdog(0.05, grace_s=0.0, poll_s=0.01, exit=exits.append).start()
    dog.arm("the stop was asked for")
    dog._finished.wait(5)  # the overrun ends the watch
    dog.close()
    assert exits == [EXIT_STOP_OVERRUN]
