"""Judge calls with one retry policy, whatever the transport, each call counted the moment it ends.

Transport retries (429 honouring Retry-After, 5xx, timeouts, connection errors) happen here, inside one
*attempt* of a prompt step, with exponential backoff and jitter. What a failed call tells decides whether
it uses up the attempt's retries:

- With the runtime's gate (``JudgeGate``), a failure counts against ``max_retries`` (and ``deadline_s``)
  only when the judge answered some other call since this one was sent: the judge works, this request
  does not. While the judge answers nobody (refused connections, a 5xx storm, every call timing out) the
  failure says nothing about the request: the call is *held* (retried after backoff, the gate's circuit
  breaker spacing the retries) as long as the outage lasts, so an outage delays scores instead of losing
  them. A 429 never uses up retries there: it only ever means "later".
- Without a gate (a scorer run from Python) every retryable failure counts: plain bounded retries.
- Non-retryable provider errors (4xx) end the attempt at once, except the fatal ones (401, 402, 403, 404:
  the judge cannot work until a human acts), which a gate that holds without bound pauses on: the call
  waits there and is sent again once the judge is resumed.
- A call trying a structured-output shape the server may refuse (``ChatRequest.shape_probe``, while
  ``structured_output: auto`` learns what the server takes: ``sidecar.scoring.judge.negotiation``) ends at the
  first answer that may be that refusal (400, 415, 422, 500, 501), unretried and marked so that the gate does
  not count it against the judge's health; the step tries the next shape.

Every HTTP call, whatever becomes of its run afterwards, is reported to the client's observers when it
ends (outcome, duration, usage, estimated and provider-reported cost), so metrics match the provider's
bill. Time spent waiting for the judge (the gate's queue and holds, held backoff) does not count against
the run's deadline (``sidecar.scoring.deadline``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sidecar.scoring.backoff import equal_jitter
from sidecar.scoring.deadline import deadline_paused
from sidecar.scoring.judge.errors import JudgeError, PromptTooLargeError, ProviderError, StructuredOutputError
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.negotiation import Settled, ShapeNegotiation, refuses_shape
from sidecar.scoring.judge.pricing import estimate_cost_usd
from sidecar.scoring.judge.protocol import ChatRequest, ChatResponse, Transport
from sidecar.scoring.types import JudgeCall

__all__ = [
    "MUST_WAIT",
    "CallGate",
    "CallResult",
    "JudgeCallObserver",
    "JudgeClient",
    "close_default_judge_clients",
    "default_judge_client",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CallResult:
    response: ChatResponse | None
    error: JudgeError | None  # the provider's, the gate's, or ``accept``'s format error
    calls: tuple[JudgeCall, ...]
    value: Any = None  # what ``accept`` made of the response
    # A shape probe the server answered with what may be a refusal of the shape (``error`` says how).
    shape_refused: bool = False


# What ``CallGate.admit_now`` returns when the call cannot go at once (it must ``await acquire``).
MUST_WAIT: object = object()


class JudgeCallObserver(Protocol):
    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        """One HTTP call ended (any outcome). Runs on the event loop: must not block."""
        ...


class CallGate:
    """Admission control around each model call (limits, breakers, spend caps plug in here).

    The default admits everything; the runtime installs a stricter one per judge
    (``sidecar.runtime.judge_gate.JudgeGate``). ``acquire`` may wait (the judge client stops the run's
    deadline meanwhile) and may refuse by raising a ``ProviderError`` (``JudgeUnavailableError``): then no
    call is made and nothing is released. What ``acquire`` returns (a permit) goes back to ``release``
    after the call, or to ``abandon`` when the call ended without an outcome (cancelled).
    """

    # Longest time a call may be held through an outage before it fails; None: as long as it lasts. The
    # default gate knows nothing of the judge's health and cannot hold.
    max_hold_s: float | None = 0.0

    def admit_now(self, request: ChatRequest | None = None) -> object:
        """A permit when the call may go at once (the common case, with no timer and no await), else
        ``MUST_WAIT``: then the caller awaits ``acquire``."""
        return None

    async def acquire(self, request: ChatRequest | None = None) -> object:
        return None

    def release(self, call: JudgeCall, permit: object = None) -> None:
        return None

    def abandon(self, permit: object = None) -> None:
        return None

    def mark(self) -> int:
        """An opaque position in the judge's history of answered calls (read back by ``is_own_failure``)."""
        return 0

    def is_own_failure(self, call: JudgeCall, mark: int) -> bool:
        """Whether a failed call (sent at ``mark``) used up one of the request's retries, or was held
        through a judge-wide fault. Without a gate nothing is known of the judge's health, so every failure
        counts (plain bounded retries)."""
        return True

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Marks a call waiting for the judge to recover (the gate counts it as held)."""
        yield


def _make_transport(model: JudgeModel) -> Transport:
    if model.uses_fast_path:
        from sidecar.scoring.judge.http_transport import OpenAICompatibleTransport

        return OpenAICompatibleTransport(model)
    from sidecar.scoring.judge.litellm_transport import LiteLLMTransport

    return LiteLLMTransport(model)


Accept = Callable[[ChatResponse], Any]


class JudgeClient:
    def __init__(
        self,
        model: JudgeModel,
        transport: Transport | None = None,
        *,
        gate: CallGate | None = None,
        observers: Sequence[JudgeCallObserver] = (),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_structured_output: Settled | None = None,
    ) -> None:
        self.model = model
        self.transport = transport if transport is not None else _make_transport(model)
        self.gate = gate or CallGate()
        self.observers = tuple(observers)
        self._sleep = sleep
        # What the judge's server takes as structured output (``on_structured_output`` hears of it once known).
        self.shapes = ShapeNegotiation(
            model.structured_output, judge=model.litellm_model, on_settled=on_structured_output
        )

    def _backoff(self, retry_index: int, error: ProviderError) -> float:
        if error.retry_after_s is not None:
            return error.retry_after_s
        return equal_jitter(retry_index, self.model.backoff_base_s, self.model.backoff_max_s)

    async def call(self, request: ChatRequest, accept: Accept | None = None) -> CallResult:
        """Call the judge until it answers, a failure is final, or the gate refuses.

        ``accept`` turns an answer into the caller's value; a ``StructuredOutputError`` from it makes the
        call an ``invalid_output`` (the judge answered, with nothing usable), returned as the error.
        """
        model = self.model
        size = sum(len(message.get("content") or "") for message in request.messages)
        if size > model.max_prompt_chars:
            # Traced content (or an eval dataset) larger than the judge should be sent: never sent, never billed.
            too_large = PromptTooLargeError(
                f"the prompt is {size} characters, over the judge's max_prompt_chars ({model.max_prompt_chars}): "
                "not sent"
            )
            return CallResult(None, too_large, ())
        if request.timeout_s != model.timeout_s:
            request = dataclasses.replace(request, timeout_s=model.timeout_s)
        calls: list[JudgeCall] = []
        retry_index = own_retries = 0
        own_s = held_s = 0.0
        while True:
            permit = self.gate.admit_now(request)
            if permit is MUST_WAIT:
                with deadline_paused():
                    try:
                        permit = await self.gate.acquire(request)
                    except ProviderError as refused:  # no call happened: nothing to record or release
                        return CallResult(None, refused, tuple(calls))
            mark = self.gate.mark()
            started = time.perf_counter()
            try:
                response = await self.transport.complete(request)
            except ProviderError as error:
                duration = time.perf_counter() - started
                shape_refused = request.shape_probe and refuses_shape(error)
                failed = self._ended(request, permit, _failed_call(error, duration, shape_probe=shape_refused))
                calls.append(failed)
                if shape_refused:  # maybe the shape, not the judge: the step tries the next shape at once
                    return CallResult(None, error, tuple(calls), shape_refused=True)
                if error.fatal and self.gate.max_hold_s is None:
                    # A bad key, no quota or no model: the gate pauses the judge and the call waits there for
                    # the fix (a gate that cannot hold without bound has no one to wait for: it fails).
                    continue
                if not error.retryable:
                    return CallResult(None, error, tuple(calls))
                delay = self._backoff(retry_index, error)
                retry_index += 1
                if self.gate.is_own_failure(failed, mark):
                    own_retries += 1
                    own_s += duration + delay
                    if own_retries > model.max_retries or own_s > model.attempt_deadline_s:
                        return CallResult(None, error, tuple(calls))
                    await self._sleep(delay)
                    continue
                max_hold = self.gate.max_hold_s
                if max_hold is not None and held_s + delay > max_hold:
                    return CallResult(None, error, tuple(calls))
                with deadline_paused(), self.gate.holding():
                    await self._sleep(delay)
                held_s += delay
                continue
            except BaseException:
                # Cancelled mid-call (shutdown, rebalance, the run's deadline): the request may have reached
                # the provider, so it is counted; the gate gets its permit back without an outcome.
                self._observe(request, JudgeCall(outcome="cancelled", duration_s=time.perf_counter() - started))
                self.gate.abandon(permit)
                raise
            duration = time.perf_counter() - started
            value: Any = None
            format_error: StructuredOutputError | None = None
            try:
                if accept is not None:
                    value = accept(response)
            except StructuredOutputError as exc:
                format_error = exc
            finally:
                call = JudgeCall(
                    outcome="ok" if format_error is None else "invalid_output",
                    duration_s=duration,
                    status_code=response.status_code,
                    error_name=format_error.name if format_error is not None else None,
                    usage=response.usage,
                    estimated_cost_usd=estimate_cost_usd(model.litellm_model, response.usage),
                    provider_cost=response.provider_cost,
                )
                calls.append(self._ended(request, permit, call))
            return CallResult(response, format_error, tuple(calls), value)

    def _ended(self, request: ChatRequest, permit: object, call: JudgeCall) -> JudgeCall:
        self.gate.release(call, permit)
        self._observe(request, call)
        return call

    def _observe(self, request: ChatRequest, call: JudgeCall) -> None:
        for observer in self.observers:
            try:
                observer.judge_call_finished(self.model, request, call)
            except Exception:
                log.exception("judge call observer %s failed", type(observer).__name__)

    async def aclose(self) -> None:
        await self.transport.aclose()


def _failed_call(error: ProviderError, duration_s: float, *, shape_probe: bool = False) -> JudgeCall:
    return JudgeCall(
        outcome=error.outcome,
        duration_s=duration_s,
        status_code=error.status_code,
        error_name=error.name,
        error_message=error.message[:500],
        shape_probe=shape_probe,
    )


_defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, JudgeClient]] = weakref.WeakKeyDictionary()


def default_judge_client(model: JudgeModel) -> JudgeClient:
    """The plain client an *unbound* scorer uses (a script calling ``scorer.run``): one per judge model and
    event loop, so its connections are pooled. No limits, no breaker, no metrics: the runtime never uses it
    (it binds every scorer to the clients it builds, ``Scorer.bind``)."""
    loop = asyncio.get_running_loop()
    per_loop = _defaults.setdefault(loop, {})
    key = model.cache_key()
    client = per_loop.get(key)
    if client is None:
        client = per_loop[key] = JudgeClient(model)
    return client


async def close_default_judge_clients() -> None:
    """Close the connections of the unbound scorers' clients on this loop."""
    loop = asyncio.get_running_loop()
    for client in _defaults.pop(loop, {}).values():
        await client.aclose()
