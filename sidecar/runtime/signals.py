"""Stop requests from the operating system, as an event the service and the supervisor wait on."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Sequence

__all__ = ["DEFAULT_STOP_SIGNALS", "stop_on_signals"]

DEFAULT_STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(signals: Sequence[signal.Signals] = DEFAULT_STOP_SIGNALS) -> asyncio.Event:
    """An event set when any of ``signals`` arrives (call it inside the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in signals:
        with contextlib.suppress(NotImplementedError):  # platforms without loop signal handlers
            loop.add_signal_handler(sig, stop.set)
    return stop
