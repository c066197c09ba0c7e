"""A backfill's progress: records of the window done (scored and handed to the exporters) out of the window's,
with their rate and the time left, drawn by tqdm: a bar on a terminal, a line every ``LINE_EVERY_S`` otherwise
(a Kubernetes Job's log)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from aiokafka import TopicPartition
from tqdm import tqdm

from sidecar.backfill.plan import WindowPlan
from sidecar.backfill.tally import BackfillTally
from sidecar.runtime.sources import AssignedPartitions

__all__ = ["LINE_EVERY_S", "WindowProgress"]

LINE_EVERY_S = 30.0
_TICK_S = 0.5
_LINE_FORMAT = "{n_fmt}/{total_fmt} records ({percentage:.0f}%), {rate_fmt}, elapsed {elapsed}, left {remaining}"


class WindowProgress:
    def __init__(
        self,
        plan: WindowPlan,
        source: AssignedPartitions,
        done_offsets: Callable[[], Mapping[TopicPartition, int]],
        tally: BackfillTally,
        *,
        out: TextIO,
        bar: bool,
    ) -> None:
        self._since = tally.judge  # the estimate's measurement is not the backfill's
        self._plan = plan
        self._source = source
        self._done_offsets = done_offsets
        self._tally = tally
        self._out = out
        self._bar = bar

    def done(self) -> int:
        """Records of the window done: before what this run's records are done up to, or what an earlier run
        committed (resumed), or nothing yet."""
        positions = self._done_offsets()
        total = 0
        for p in self._plan.partitions:
            tp = p.partition
            position = positions.get(tp, self._source.resumed.get(tp, p.start))
            total += min(max(position, p.start), p.end) - p.start
        return total

    def _postfix(self) -> str:
        runs = self._tally.runs
        judge = self._tally.judge - self._since
        failed = f", {runs['failed']} failed" if runs["failed"] else ""
        return f"{runs['scored']} scored{failed}, {judge.calls} judge calls, {judge.usd:.4f} USD"

    async def run(self, stop: asyncio.Event) -> None:
        """Report until ``stop`` (the service ended) is set or this task is cancelled."""
        while not self._source.ranges and not stop.is_set():  # the source attaches: resumed partitions are known
            await _wait(stop, _TICK_S)
        initial = self.done()
        total = self._plan.records
        if self._bar:
            await self._draw_bar(stop, initial, total)
        else:
            await self._print_lines(stop, initial, total)

    async def _draw_bar(self, stop: asyncio.Event, initial: int, total: int) -> None:
        bar = tqdm(total=total, initial=initial, unit="record", file=self._out, dynamic_ncols=True, smoothing=0.1)
        try:
            while True:
                bar.n = self.done()
                bar.set_postfix_str(self._postfix(), refresh=False)
                bar.refresh()
                if stop.is_set():
                    break
                await _wait(stop, _TICK_S)
        finally:
            bar.close()

    async def _print_lines(self, stop: asyncio.Event, initial: int, total: int) -> None:
        started = time.monotonic()
        while True:
            line = tqdm.format_meter(
                self.done(),
                total,
                time.monotonic() - started,
                unit="record",
                initial=initial,
                bar_format=_LINE_FORMAT,
            )
            print(f"progress: {line}; {self._postfix()}", file=self._out, flush=True)
            if stop.is_set():
                break
            await _wait(stop, LINE_EVERY_S)


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
