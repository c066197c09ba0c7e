"""Per-judge admission control: the ``CallGate`` the runtime installs in front of each judge.

One ``JudgeGate`` guards one judge model, around every HTTP call the judge client makes (retries and the
structured-output fallback included). Its rule under faults is **hold, don't shed**: a judge that cannot
answer delays work, it never throws it away (Kafka keeps the backlog; the runtime commits nothing past a
run that waits).

- **Concurrency**: at most ``max_concurrency`` calls in flight; others queue for a slot.
- **Rate limits**: RPM and TPM token buckets. A call reserves one request and an estimate of its tokens
  (prompt characters / 4 + the expected output); ``release`` reconciles the estimate with the usage the
  provider reported. Reservations are taken in arrival order and may run the bucket into debt, so calls
  are spaced evenly and a call bigger than the burst still goes (after the bucket has refilled).
- **Circuit breaker**: ``failure_threshold`` consecutive failed calls (5xx, timeouts, connection errors;
  *not* 429, which the buckets and the client's backoff handle, nor 4xx request errors, nor a server refusing a
  structured-output shape it does not take: ``JudgeCall.shape_probe``) open the circuit.
  While open, calls are **held**: they wait. After ``reset_after_s`` one probe call goes through
  (half-open) while the others wait for its verdict: success closes the circuit and every held call goes
  (at the judge's normal concurrency), failure opens it again and they keep waiting.
- **Auto-pause**: a fatal provider error (401, 402 / insufficient quota, 403, 404: a human must act) pauses
  the judge, logged once with what to do. Paused calls are held until ``resume()`` (``scoring-sidecar run``
  calls it on SIGUSR1), or until one probe call after ``pause_recheck_s`` (default 300 s) succeeds, so a
  fixed key or a topped-up account recovers on its own at the cost of one call per interval.
  ``pause_recheck_s=None`` waits for ``resume()``.
- **Spend cap**: estimated cost (``estimate_cost_usd`` of each call's usage) summed over a rolling
  ``spend_window_s``, plus the estimate of the calls in flight (so 256 concurrent calls cannot all be
  admitted under a nearly reached cap: the overshoot is about one call). At the cap the judge's policy
  applies: ``on_spend_cap="shed"`` refuses the call (``JudgeUnavailableError``, reason ``spend_cap``: the
  runtime counts the run as shed and moves on), ``"hold"`` holds it until older spend leaves the window.

Held time does not count against the run's deadline (the client stops it while it waits). ``max_hold_s``
bounds a hold for callers that cannot wait forever (``eval``): once the call has waited that long, or the
circuit has been open that long (however many probes failed), the call is refused with the state that held
it, and a paused judge refuses at once (no one will fix it within the bound). ``held`` counts the calls
waiting for the judge to recover (not the ones queued for a slot), ``oldest_hold_s()`` the longest current
wait; ``on_hold`` reports each finished hold's length.

Callbacks run synchronously on the event loop; their exceptions are logged and swallowed.

One module for one idea: every rule above decides the same thing (whether a call may go now, wait, or be
refused) from one shared state, so they are kept together rather than split across files.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
import typing
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field

from sidecar.core.observers import JudgePauseReason, JudgeState
from sidecar.runtime.slots import CallSlots
from sidecar.runtime.token_bucket import TokenBucket
from sidecar.scoring.judge.client import MUST_WAIT, CallGate
from sidecar.scoring.judge.errors import (
    AuthenticationError,
    JudgeUnavailableError,
    NotFoundError,
    PaymentRequiredError,
    PermissionDeniedError,
    ShedReason,
)
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.pricing import estimate_cost_usd, price_entry
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall, JudgeUsage

__all__ = [
    "PAUSE_REASONS",
    "GateConfig",
    "GateState",
    "JudgeGate",
    "PauseReason",
    "SpendCapPolicy",
]

logger = logging.getLogger(__name__)

# The states and pause reasons are declared with the events that report them (sidecar.core.observers).
GateState = JudgeState
# Why a judge is paused: the provider's fatal answer (401, 402 or insufficient_quota, 403, 404).
PauseReason = JudgePauseReason
PAUSE_REASONS: tuple[PauseReason, ...] = typing.get_args(JudgePauseReason)
SpendCapPolicy = Literal["shed", "hold"]
_HoldReason = Literal["circuit_open", "paused", "spend_cap"]

_PAUSE_REASON_BY_ERROR: dict[str, PauseReason] = {
    AuthenticationError.__name__: "authentication",
    PaymentRequiredError.__name__: "payment_required",
    PermissionDeniedError.__name__: "permission_denied",
    NotFoundError.__name__: "not_found",
}
_PAUSE_REASON_BY_STATUS: dict[int, PauseReason] = {
    401: "authentication",
    402: "payment_required",
    403: "permission_denied",
    404: "not_found",
}
# How an operator resumes a paused judge at once, without Python (the pause's log line says it).
RESUME_HINT = (
    "send SIGUSR1 to the sidecar's main process to resume at once (kill -USR1 <pid>; in a container: "
    "kubectl exec <pod> -- sh -c 'kill -USR1 1'; with runtime.workers > 1 the supervisor passes it on)"
)
# Failures that say the judge is unhealthy (not the request, not a rate limit).
_HEALTH_FAILURES: frozenset[str] = frozenset({"timeout", "connection_error"})

StateCallback = Callable[[str, GateState], None]
SpendCallback = Callable[[str, float, float | None], None]
ShedCallback = Callable[[str, ShedReason], None]
HoldCallback = Callable[[str, float], None]


class GateConfig(BaseModel):
    """Limits for one judge. ``None`` disables a limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_concurrency: int = Field(default=16, gt=0)
    rpm: float | None = Field(default=None, gt=0)  # requests per minute
    rpm_burst: int | None = Field(default=None, gt=0)  # default: one second's worth, at least 1
    tpm: float | None = Field(default=None, gt=0)  # tokens per minute (input + output)
    tpm_burst: int | None = Field(default=None, gt=0)  # default: one second's worth, at least 1
    # Output tokens reserved per call when the judge model sets no max_tokens.
    expected_output_tokens: int = Field(default=256, ge=0)
    failure_threshold: int = Field(default=5, gt=0)  # consecutive failed calls that open the circuit
    reset_after_s: float = Field(default=30.0, gt=0)  # open → half-open (one probe call)
    pause_recheck_s: float | None = Field(default=300.0, gt=0)  # paused → one probe call; None: resume() only
    spend_cap_usd: float | None = Field(default=None, gt=0)  # estimated USD per window
    spend_window_s: float = Field(default=3600.0, gt=0)
    on_spend_cap: SpendCapPolicy = "shed"
    max_hold_s: float | None = Field(default=None, gt=0)  # None: hold as long as the judge is unavailable


@dataclass(slots=True)
class _Permit:
    tokens: float = 0.0  # TPM reservation still held
    cost_usd: float = 0.0  # estimated cost counted against the spend cap while the call is in flight
    probe: bool = False  # the half-open (or pause re-check) probe
    done: bool = False


class JudgeGate(CallGate):
    def __init__(
        self,
        model: JudgeModel | str,
        config: GateConfig | None = None,
        *,
        on_state_change: StateCallback | None = None,
        on_spend: SpendCallback | None = None,
        on_shed: ShedCallback | None = None,
        on_hold: HoldCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config if config is not None else GateConfig()
        # The name in logs, callbacks and metrics: the ``judge_model`` label (provider/model, no secrets).
        self.name = model.litellm_model if isinstance(model, JudgeModel) else model
        self._max_output_tokens = model.max_tokens if isinstance(model, JudgeModel) else None
        self._on_state_change = on_state_change
        self._on_spend = on_spend
        self._on_shed = on_shed
        self._on_hold = on_hold
        self._clock = clock
        self._sleep = sleep
        cfg = self.config
        self.max_hold_s = cfg.max_hold_s
        self._slots = CallSlots(cfg.max_concurrency)
        self._rpm = TokenBucket(cfg.rpm, cfg.rpm_burst, clock) if cfg.rpm is not None else None
        self._tpm = TokenBucket(cfg.tpm, cfg.tpm_burst, clock) if cfg.tpm is not None else None
        self._state: GateState = "closed"
        self._state_since = clock()
        self._before_probe: GateState = "closed"
        self._before_probe_since = self._state_since
        self._failures = 0
        self._failed_probes = 0  # since the circuit last opened
        # Since when the judge has not answered (the circuit left closed; failed probes do not restart it).
        self._down_since: float | None = None
        self._pause_reason: PauseReason | None = None  # of the current pause
        self._answers = 0  # calls the judge answered (any HTTP answer with a completion)
        self._spend: deque[tuple[float, float]] = deque()
        self._spent = 0.0
        self._reserved_usd = 0.0  # estimated cost of the calls in flight (spend cap only)
        self._changed = asyncio.Event()  # set (and replaced) whenever a held call might now go
        self._holds: dict[int, float] = {}  # hold id -> when it started
        self._hold_ids = itertools.count()
        self.in_flight = 0
        self.shed: Counter[ShedReason] = Counter()
        if cfg.spend_cap_usd is not None and price_entry(self.name) is None:
            logger.warning("judge %s has no known price: its spend cap cannot be enforced", self.name)

    # -- observable state ---------------------------------------------------------------------------
    @property
    def state(self) -> GateState:
        return self._state

    @property
    def cap_usd(self) -> float | None:
        return self.config.spend_cap_usd

    @property
    def spent_usd(self) -> float:
        """Estimated spend within the current window."""
        self._expire_spend()
        return self._spent

    @property
    def held(self) -> int:
        """Calls waiting for the judge to recover (circuit open or probing, paused, held at the spend cap)."""
        return len(self._holds)

    def held_runs(self) -> int:
        return len(self._holds)

    def oldest_hold_s(self) -> float:
        """How long the longest current hold has lasted (0 without holds)."""
        return self._clock() - min(self._holds.values()) if self._holds else 0.0

    @property
    def pause_reason(self) -> PauseReason | None:
        """Why the judge is paused (also while its re-check call is in flight); ``None`` when it is not."""
        if self._state == "paused" or (self._state == "half_open" and self._before_probe == "paused"):
            return self._pause_reason
        return None

    def hold_reason(self) -> _HoldReason | None:
        """Why a call arriving now would be held (``None``: it would be let through, maybe after a queue)."""
        return self._check(claim=False)[0]

    def resume(self) -> None:
        """Close the circuit and lift a pause (an operator fixed the key, the quota or the model)."""
        if self._state != "closed":
            logger.info("judge %s resumed by an operator (was %s); held calls go now", self.name, self._state)
        self._failures = self._failed_probes = 0
        self._set_state("closed")

    # -- CallGate -------------------------------------------------------------------------------------
    def mark(self) -> int:
        return self._answers

    def is_own_failure(self, call: JudgeCall, mark: int) -> bool:
        # A 429 is the provider's "later", never the request's fault; any other failure is the request's own
        # only if the judge answered someone else meanwhile (else the judge is down: hold, don't count).
        return call.outcome != "rate_limited" and self._answers > mark

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        hold = next(self._hold_ids)
        self._holds[hold] = started = self._clock()
        try:
            yield
        finally:
            del self._holds[hold]
            self._notify(self._on_hold, self.name, self._clock() - started)

    def admit_now(self, request: ChatRequest | None = None) -> object:
        if self._state != "closed" or self._holds:
            return MUST_WAIT  # only a closed gate with nobody held admits without waiting
        estimate: JudgeUsage | None = None
        if self._tpm is not None or self.config.spend_cap_usd is not None:
            estimate = self._estimated_usage(request)
        if self._check(claim=False)[0] is not None or not self._slots.try_take():
            return MUST_WAIT
        permit = _Permit()
        if self._rpm is not None and not self._rpm.try_take(1):
            self._slots.give()
            return MUST_WAIT
        if self._tpm is not None and estimate is not None:
            tokens = float((estimate.input_tokens or 0) + (estimate.output_tokens or 0))
            if not self._tpm.try_take(tokens):
                self._return_reservations(permit)
                return MUST_WAIT
            permit.tokens = tokens
        self._reserve_spend(permit, estimate)
        self.in_flight += 1
        return permit

    async def acquire(self, request: ChatRequest | None = None) -> object:
        estimate: JudgeUsage | None = None
        if self._tpm is not None or self.config.spend_cap_usd is not None:
            estimate = self._estimated_usage(request)
        with contextlib.ExitStack() as hold:
            held_since: float | None = None
            while True:
                reason, _ = self._check(claim=False)
                if reason is not None:
                    if reason == "spend_cap" and self.config.on_spend_cap == "shed":
                        self._refuse("spend_cap")
                    if reason == "paused" and self.max_hold_s is not None:
                        self._refuse("paused", "a human must fix the judge; a bounded hold does not wait for it")
                    if held_since is None:
                        held_since = self._clock()
                        hold.enter_context(self.holding())
                    await self._wait_for_change(reason, held_since)
                    continue
                permit = await self._admit(estimate)
                if permit is not None:
                    return permit
                # The judge became unavailable while this call queued for a slot or tokens: hold it.

    def release(self, call: JudgeCall, permit: object = None) -> None:
        permit = self._give_back(permit)
        if permit is None:
            return
        if call.answered:
            self._answers += 1
        self._reconcile_tokens(call, permit)
        self._record_spend(call)
        self._record_outcome(call, permit)
        self._wake()

    def abandon(self, permit: object = None) -> None:
        permit = self._give_back(permit)
        if permit is None:
            return
        if permit.probe and self._state == "half_open":
            # The probe never finished: back to where it started, so a held call probes at once.
            self._state = self._before_probe
            self._state_since = self._before_probe_since
            self._notify(self._on_state_change, self.name, self._state)
        self._wake()

    # -- internals ------------------------------------------------------------------------------------
    async def _admit(self, estimate: JudgeUsage | None) -> _Permit | None:
        """Take a slot, rate-limit tokens and (when due) the probe; ``None`` when the judge became
        unavailable meanwhile (everything taken is given back)."""
        await self._slots.take()
        permit = _Permit()
        try:
            wait = self._rpm.reserve(1) if self._rpm is not None else 0.0
            if self._tpm is not None and estimate is not None:
                permit.tokens = float((estimate.input_tokens or 0) + (estimate.output_tokens or 0))
                wait = max(wait, self._tpm.reserve(permit.tokens))
            if wait > 0:
                await self._sleep(wait)
            # The state may have changed while waiting; a due probe is claimed here, right before the call.
            reason, permit.probe = self._check(claim=True)
        except BaseException:
            self._return_reservations(permit)
            raise
        if reason is not None:
            self._return_reservations(permit)
            return None
        self._reserve_spend(permit, estimate)
        self.in_flight += 1
        return permit

    def _reserve_spend(self, permit: _Permit, estimate: JudgeUsage | None) -> None:
        if self.config.spend_cap_usd is not None and estimate is not None:
            permit.cost_usd = estimate_cost_usd(self.name, estimate) or 0.0
            self._reserved_usd += permit.cost_usd

    def _return_reservations(self, permit: _Permit) -> None:
        self._slots.give()
        if self._rpm is not None:
            self._rpm.refund(1)
        if self._tpm is not None and permit.tokens:
            self._tpm.refund(permit.tokens)

    async def _wait_for_change(self, reason: _HoldReason, held_since: float) -> None:
        """Wait until something that could admit a held call happens (or the next probe is due)."""
        timeout = self._due_in(reason)
        if self.max_hold_s is not None:
            # Offline, an outage ends the run: the bound counts from when the judge stopped answering, so the
            # calls that queue up behind an outage are refused together instead of each waiting it out.
            since = held_since
            if reason == "circuit_open" and self._down_since is not None:
                since = min(since, self._down_since)
            left = self.max_hold_s - (self._clock() - since)
            if left <= 0:
                self._refuse(reason, f"held {self.max_hold_s:g}s")
            timeout = left if timeout is None else min(timeout, left)
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await changed.wait()

    def _due_in(self, reason: _HoldReason) -> float | None:
        """Seconds until a held call could go without any other event (``None``: only an event frees it)."""
        now = self._clock()
        if reason == "spend_cap":
            if not self._spend:
                return None  # only in-flight estimates fill the cap: their release wakes us
            return max(0.0, self._spend[0][0] + self.config.spend_window_s - now) + 0.001
        if self._state == "open":
            return max(0.0, self._state_since + self.config.reset_after_s - now)
        if self._state == "paused" and self.config.pause_recheck_s is not None:
            return max(0.0, self._state_since + self.config.pause_recheck_s - now)
        return None  # half-open (the probe's verdict wakes us), or paused until resume()

    def _wake(self) -> None:
        if self._holds:  # every waiter is inside a hold: without holds there is no one to wake
            self._changed.set()
            self._changed = asyncio.Event()

    def _give_back(self, permit: object) -> _Permit | None:
        """Return a permit's slot and spend reservation, once; ``None`` when there is nothing to return."""
        if not isinstance(permit, _Permit) or permit.done:
            return None
        permit.done = True
        self.in_flight -= 1
        self._slots.give()
        self._unreserve(permit)
        return permit

    def _check(self, *, claim: bool) -> tuple[_HoldReason | None, bool]:
        """Why a call now must be held, and whether it is the probe (only with ``claim``)."""
        cfg = self.config
        state = self._state
        probe_due = False
        if state in ("open", "paused"):
            due = cfg.reset_after_s if state == "open" else cfg.pause_recheck_s
            if due is None or self._clock() - self._state_since < due:
                return ("circuit_open" if state == "open" else "paused"), False
            probe_due = True
        elif state == "half_open":  # the probe is in flight: everyone else waits for its verdict
            return ("paused" if self._before_probe == "paused" else "circuit_open"), False
        if cfg.spend_cap_usd is not None and self.spent_usd + self._reserved_usd >= cfg.spend_cap_usd:
            return "spend_cap", False
        if probe_due and claim:
            self._before_probe = state
            self._before_probe_since = self._state_since
            self._set_state("half_open")
            return None, True
        return None, False

    def _refuse(self, reason: ShedReason, detail: str | None = None) -> NoReturn:
        self.shed[reason] += 1
        self._notify(self._on_shed, self.name, reason)
        message = f"judge {self.name} unavailable: {reason.replace('_', ' ')}"
        raise JudgeUnavailableError(f"{message} ({detail})" if detail else message, reason=reason)

    def _estimated_usage(self, request: ChatRequest | None) -> JudgeUsage:
        """A call's usage before it is known: prompt characters / 4 in, the output bound (or expectation) out."""
        chars = sum(len(m.get("content") or "") for m in request.messages) if request is not None else 0
        output = self._max_output_tokens if self._max_output_tokens is not None else self.config.expected_output_tokens
        return JudgeUsage(input_tokens=math.ceil(chars / 4), output_tokens=output)

    def _unreserve(self, permit: _Permit) -> None:
        self._reserved_usd = max(0.0, self._reserved_usd - permit.cost_usd) if self.in_flight else 0.0
        permit.cost_usd = 0.0

    def _reconcile_tokens(self, call: JudgeCall, permit: _Permit) -> None:
        if self._tpm is None or not permit.tokens:
            return
        usage = call.usage
        if call.outcome == "rate_limited":
            self._tpm.refund(permit.tokens)  # rejected before the provider counted anything
        elif usage is not None and not usage.is_empty:
            actual = usage.total_tokens or (usage.input_tokens or 0) + (usage.output_tokens or 0)
            delta = actual - permit.tokens
            if delta < 0:
                self._tpm.refund(-delta)
            else:
                self._tpm.level -= delta
        # Failures without usage keep the estimate: the provider may well have counted them.
        permit.tokens = 0.0

    def _expire_spend(self) -> None:
        horizon = self._clock() - self.config.spend_window_s
        while self._spend and self._spend[0][0] <= horizon:
            self._spent -= self._spend.popleft()[1]
        if not self._spend:
            self._spent = 0.0  # no float drift once the window is empty

    def _record_spend(self, call: JudgeCall) -> None:
        cost = call.estimated_cost_usd
        if cost is None:
            cost = estimate_cost_usd(self.name, call.usage)
        if cost is None or cost <= 0 or not math.isfinite(cost):
            return
        self._spend.append((self._clock(), cost))
        self._spent += cost
        self._notify(self._on_spend, self.name, self.spent_usd, self.cap_usd)

    def _record_outcome(self, call: JudgeCall, permit: _Permit) -> None:
        # A probe decides only if nothing (a pause, resume()) changed the state while it ran.
        probe = permit.probe and self._state == "half_open"
        reason = _pause_reason(call)
        if reason is not None:
            # A failed re-check (half-open from a pause) is not news: logged only if the reason changed.
            if self.pause_reason != reason:
                recheck = self.config.pause_recheck_s
                logger.error(
                    "judge %s paused (%s): %s (HTTP %s): %s. Calls are held (nothing is lost; their records stay "
                    "uncommitted) until the key, quota or model is fixed. %s",
                    self.name,
                    reason,
                    call.error_name,
                    call.status_code,
                    call.error_message or "no message",
                    f"A re-check call goes every {recheck:g}s; or {RESUME_HINT}."
                    if recheck is not None
                    else f"To resume, {RESUME_HINT}.",
                )
            self._pause_reason = reason
            self._set_state("paused", force=True)
            return
        if call.shape_probe:
            # The server refused a structured-output shape it may not take (structured_output: auto): no verdict
            # on the judge's health. A probe that ended so leaves the state as it found it, like an abandoned one.
            if probe:
                self._state, self._state_since = self._before_probe, self._before_probe_since
                self._notify(self._on_state_change, self.name, self._state)
            return
        failed = call.outcome in _HEALTH_FAILURES or (
            call.outcome == "error" and (call.status_code is None or call.status_code >= 500)
        )
        if probe:
            if failed:
                self._failed_probes += 1
                # The first failed probe, then every tenth: an outage of hours is a few lines, not thousands.
                if self._failed_probes % 10 == 1:
                    logger.warning(
                        "judge %s: probe call %d failed (%s); circuit open again, %d calls held, next probe in %gs",
                        self.name,
                        self._failed_probes,
                        _describe(call),
                        self.held,
                        self.config.reset_after_s,
                    )
                self._set_state("open", force=True)
            else:
                logger.info(
                    "judge %s: probe call succeeded after %d failed probes; circuit closed, %d held calls go",
                    self.name,
                    self._failed_probes,
                    self.held,
                )
                self._failures = self._failed_probes = 0
                self._set_state("closed")
            return
        if self._state != "closed":
            return  # admitted before the circuit opened (or the pause): its result changes nothing
        if not failed:
            self._failures = 0
            return
        self._failures += 1
        if self._failures >= self.config.failure_threshold:
            logger.warning(
                "judge %s: circuit open after %d consecutive failed calls (last: %s); calls are held "
                "(nothing is lost), probing in %gs",
                self.name,
                self._failures,
                _describe(call),
                self.config.reset_after_s,
            )
            self._set_state("open")

    def _set_state(self, state: GateState, *, force: bool = False) -> None:
        """Enter ``state``; ``force`` restarts its clock even when already in it (a failed probe, a new pause)."""
        if state == self._state and not force:
            return
        changed = state != self._state
        self._state = state
        self._state_since = self._clock()
        if state == "closed":
            self._down_since = None
        elif self._down_since is None:
            self._down_since = self._state_since
        if changed:
            self._notify(self._on_state_change, self.name, state)
        self._wake()

    def _notify(self, callback: Callable[..., None] | None, *args: object) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            logger.exception("judge gate callback failed for %s", self.name)


def _pause_reason(call: JudgeCall) -> PauseReason | None:
    """The pause a fatal provider answer calls for; ``None`` for any other outcome."""
    if call.error_name in _PAUSE_REASON_BY_ERROR:
        return _PAUSE_REASON_BY_ERROR[call.error_name]
    return _PAUSE_REASON_BY_STATUS.get(call.status_code) if call.status_code is not None else None


def _describe(call: JudgeCall) -> str:
    status = f"HTTP {call.status_code}" if call.status_code is not None else "no HTTP answer"
    message = f": {call.error_message}" if call.error_message else ""
    return f"{call.error_name or call.outcome}, {status}{message}"
