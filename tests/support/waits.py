"""Waiting on a condition, with a deadline (never a fixed sleep)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]], *, timeout_s: float = 30, every_s: float = 0.05
) -> None:
    """Return once ``condition()`` holds; ``TimeoutError`` (naming the condition) if not within ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if loop.time() >= deadline:
            raise TimeoutError(f"{getattr(condition, '__name__', condition)!s} did not hold within {timeout_s:g} s")
        await asyncio.sleep(every_s)
