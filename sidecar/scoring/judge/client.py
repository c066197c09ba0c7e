"""Judge calls with one retry policy, whatever the transport.

Transport retries (429 honouring Retry-After, 5xx, timeouts, connection errors) happen here, inside
one *attempt* of a prompt step, with exponential backoff and jitter, bounded by the attempt's
deadline. Non-retryable provider errors end the attempt at once.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sidecar.scoring.judge.errors import ProviderError
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest, ChatResponse, Transport
from sidecar.scoring.types import JudgeCall

__all__ = [
    "CallGate",
    "CallResult",
    "JudgeClient",
    "close_judge_clients",
    "install_judge_client",
    "judge_client",
]


@dataclass(frozen=True, slots=True)
class CallResult:
    response: ChatResponse | None
    error: ProviderError | None
    calls: tuple[JudgeCall, ...]


class CallGate:
    """Admission control around each model call (limits, breakers, spend caps plug in here).

    The default admits everything; the runtime installs a stricter one per judge
    (``sidecar.runtime.judge_gate.JudgeGate``). ``acquire`` may wait at most ``max_wait_s`` and may refuse by
    raising a ``ProviderError`` (``JudgeUnavailableError``): then no call is made and nothing is released.
    What ``acquire`` returns (a permit) goes back to ``release`` after the call, or to ``abandon`` when the
    call ended without an outcome (cancelled, or an unexpected exception).
    """

    async def acquire(self, request: ChatRequest | None = None, *, max_wait_s: float | None = None) -> object:
        return None

    def release(self, call: JudgeCall, permit: object = None) -> None:
        return None

    def abandon(self, permit: object = None) -> None:
        return None


def _make_transport(model: JudgeModel) -> Transport:
    if model.uses_fast_path:
        from sidecar.scoring.judge.http_transport import OpenAICompatibleTransport

        return OpenAICompatibleTransport(model)
    from sidecar.scoring.judge.litellm_transport import LiteLLMTransport

    return LiteLLMTransport(model)


class JudgeClient:
    def __init__(
        self,
        model: JudgeModel,
        transport: Transport | None = None,
        *,
        gate: CallGate | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.model = model
        self.transport = transport if transport is not None else _make_transport(model)
        self.gate = gate or CallGate()
        self._sleep = sleep

    def _backoff(self, retry_index: int, error: ProviderError) -> float:
        if error.retry_after_s is not None:
            return error.retry_after_s
        ceiling = min(self.model.backoff_max_s, self.model.backoff_base_s * (2**retry_index))
        # Equal jitter: at least half the ceiling, so herds spread without collapsing to zero.
        return float(ceiling / 2 + random.random() * ceiling / 2)

    async def call(self, request: ChatRequest) -> CallResult:
        deadline = time.monotonic() + self.model.attempt_deadline_s
        calls: list[JudgeCall] = []
        retry_index = 0
        while True:
            try:
                permit = await self.gate.acquire(request, max_wait_s=max(deadline - time.monotonic(), 0.0))
            except ProviderError as refused:
                # Refused by the gate (shed): no call happened, so nothing is recorded or released.
                return CallResult(None, refused, tuple(calls))
            remaining = deadline - time.monotonic()
            timeout = min(self.model.timeout_s, max(remaining, 0.001))
            started = time.perf_counter()
            try:
                response = await self.transport.complete(
                    ChatRequest(request.messages, request.response_format, timeout_s=timeout)
                )
            except ProviderError as error:
                call = JudgeCall(
                    outcome=error.outcome,
                    duration_s=time.perf_counter() - started,
                    status_code=error.status_code,
                    error_name=error.name,
                )
                calls.append(call)
                self.gate.release(call, permit)
                if not error.retryable or retry_index >= self.model.max_retries:
                    return CallResult(None, error, tuple(calls))
                delay = self._backoff(retry_index, error)
                if time.monotonic() + delay >= deadline:
                    # Waiting (even as long as Retry-After asks) would overrun the attempt's deadline.
                    return CallResult(None, error, tuple(calls))
                retry_index += 1
                await self._sleep(delay)
                continue
            except BaseException:
                # Cancelled (or a bug) mid-call: no outcome to report, but the gate gets its permit back.
                self.gate.abandon(permit)
                raise
            call = JudgeCall(
                outcome="ok", duration_s=time.perf_counter() - started, status_code=200, usage=response.usage
            )
            calls.append(call)
            self.gate.release(call, permit)
            return CallResult(response, None, tuple(calls))

    async def aclose(self) -> None:
        await self.transport.aclose()


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, JudgeClient]] = weakref.WeakKeyDictionary()


def judge_client(model: JudgeModel) -> JudgeClient:
    """The shared client for a judge on the running loop (connections are pooled per judge)."""
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    key = model.cache_key()
    client = per_loop.get(key)
    if client is None:
        client = per_loop[key] = JudgeClient(model)
    return client


def install_judge_client(client: JudgeClient) -> None:
    """Let the runtime register a client with its own gate before scorers first use the judge."""
    loop = asyncio.get_running_loop()
    _clients.setdefault(loop, {})[client.model.cache_key()] = client


async def close_judge_clients() -> None:
    loop = asyncio.get_running_loop()
    for client in _clients.pop(loop, {}).values():
        await client.aclose()
