"""``run``'s periodic intake line (``sidecar.app.intake_log``): the last period is logged at the stop."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from sidecar.app.intake_log import IntakeTally, log_intake


async def test_the_stop_logs_what_the_last_period_counted_the_drain_included(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sidecar.app.intake_log")
    tally = IntakeTally()
    stop = asyncio.Event()
    task = asyncio.create_task(log_intake(tally, 60, stop))
    tally.record_consumed("spans", 4)
    tally.runs_skipped("similarity", "a", "filtered", 1)
    await asyncio.sleep(0.2)
    stop.set()  # SIGTERM: no more periodic lines, the service drains
    await asyncio.sleep(0.1)
    assert not task.done()
    tally.record_consumed("spans", 4)  # what the drain finishes still counts
    tally.runs_skipped("similarity", "a", "filtered", 1)
    task.cancel()  # the service has stopped
    with pytest.raises(asyncio.CancelledError):
        await task
    (line,) = [r.getMessage() for r in caplog.records]
    assert re.match(r"intake in the last 0\.\d s: 2 records, 8 spans; runs: similarity filtered 2;", line), line


async def test_a_quiet_stop_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sidecar.app.intake_log")
    stop = asyncio.Event()
    task = asyncio.create_task(log_intake(IntakeTally(), 60, stop))
    stop.set()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not caplog.records
