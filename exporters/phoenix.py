"""Scores as Arize Phoenix span annotations, over Phoenix's REST API (docs/phoenix.md).

:func:`span_annotation` is the format: one annotation per scored run, on the scored span. Its name is the
scorer id, its annotator kind ``LLM`` (a judged scorer) or ``CODE``, its result the score and the reason as
explanation, its metadata the score id, the scorer's fingerprint, the judge models, tokens and cost. Its
``identifier`` is the deterministic score id, and Phoenix keeps one annotation per (name, span,
identifier): a redelivered run updates the annotation instead of adding one.

:class:`PhoenixAnnotationSink` is the exporter, with the delivery contract of the other sinks:

* ``submit`` queues; one sender task posts batches of ``batch_size`` to ``POST /v1/span_annotations`` with
  ``sync=true``, so Phoenix answers only once the annotations are stored (its default, asynchronous mode
  answers 200 before anything is stored, and silently drops an annotation whose span it does not know);
* bounded: at ``max_pending`` unconfirmed annotations ``submit`` waits (backpressure), nothing is dropped;
* ``flush`` is ``True`` only when every annotation submitted before it is stored; it never confirms past a
  failure, so nothing is committed past an unexported score;
* 429, 5xx, timeouts and refused connections are retried with exponential backoff (``Retry-After``
  honoured) and again at every flush; 401/403 (the API key) and a 404 that is not about spans or a 405 (no
  Phoenix REST API at that URL) are retried the same way and reported as the sink's ``problem`` (``/readyz``);
* an annotation Phoenix rejects for good (400, 413, 422: Phoenix says why) is sent alone to find it, then
  logged with its score id and Phoenix's reason, counted (``rejected``) and not retried.

A span Phoenix does not know yet (the trace reaches Phoenix after the score, or never): Phoenix answers 404
naming the span ids. Those annotations wait, and are tried again with a short backoff, for up to
``span_wait_s`` after the first such answer (default 300 s, the OpenTelemetry Collector's own retry limit
for an export, so spans a Collector is still retrying into a restarted Phoenix are waited for). Meanwhile
they are unconfirmed: records after them are not committed (a flush waits for them within its timeout, so
a trace a few seconds late costs nothing). Past ``span_wait_s`` the annotation is dropped with an ERROR line
naming the span and score, and counted (``span_not_found``): the score stays in Kafka and on the OTLP
spans. The other annotations of a batch with an unknown span are sent again at once.

The API key goes in an ``Authorization: Bearer`` header and is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import aiohttp

from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver
from sidecar.scoring.types import STEP_NAMES, JudgeExecution, JudgeStepRecord

__all__ = [
    "ANNOTATIONS_PATH",
    "DROP_REASONS",
    "MAX_EXPLANATION_CHARS",
    "AnnotatorKind",
    "PhoenixAnnotationSink",
    "span_annotation",
]

log = logging.getLogger(__name__)

ANNOTATIONS_PATH: Final = "/v1/span_annotations"
MAX_EXPLANATION_CHARS: Final = 4096
AnnotatorKind = Literal["LLM", "CODE"]
DropReason = Literal["rejected", "span_not_found"]
DROP_REASONS: Final[tuple[DropReason, ...]] = ("rejected", "span_not_found")

# Phoenix's answer to a sync insert naming spans it does not have (phoenix/server/api/routers/v1/spans.py).
_MISSING_SPANS = re.compile(r"Spans with IDs (?P<ids>[0-9a-fA-F, ]+) do not exist")
_SPAN_WAIT_BACKOFF_MAX_S: Final = 2.0
_WAIT_LOG_EVERY_S: Final = 30.0


def _clip(text: str, limit: int = MAX_EXPLANATION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _executions(run: ScoredRun) -> list[JudgeExecution]:
    judge = run.result.judge if run.result is not None else None
    if judge is None:
        return []
    out: list[JudgeExecution] = []
    for step in STEP_NAMES:
        record: JudgeStepRecord | None = getattr(judge, step)
        if record is not None:
            out.extend(record.executions)
    return out


def span_annotation(run: ScoredRun, annotator_kind: AnnotatorKind | None = None) -> dict[str, Any] | None:
    """The run's annotation as Phoenix's ``SpanAnnotationData`` JSON, or ``None`` for a run without a score
    (failed, not scorable: those are in the OTLP spans and the metrics). ``annotator_kind`` ``None``: ``LLM``
    when the run called a judge, else ``CODE``."""
    result = run.result
    if run.outcome != "scored" or result is None or result.score is None or not math.isfinite(result.score):
        return None
    target = run.request.target
    executions = _executions(run)
    outcome: dict[str, Any] = {"score": float(result.score)}
    if result.reason:
        outcome["explanation"] = _clip(result.reason)
    if result.label:  # a custom judge's category, pass/fail; Mastra's scorers give a bare number
        outcome["label"] = result.label
    metadata: dict[str, Any] = {
        "score_id": run.score_id,
        "scorer_id": run.scorer_id,
        "scorer_name": run.scorer_name,
        "scorer_fingerprint": run.scorer_fingerprint,
        "run_id": result.run_id,
        "trace_id": target.trace_id,
        "agent_name": target.agent_name,
        "source": "scoring-sidecar",
        "sidecar_version": __version__,
    }
    if executions:
        models = dict.fromkeys(
            f"{e.judge_provider}/{e.judge_model_id}" if e.judge_provider else e.judge_model_id for e in executions
        )
        metadata["judge_model"] = ", ".join(models)
        metadata["judge_calls"] = sum(e.model_call_count for e in executions)
        usages = [e.usage for e in executions if e.usage is not None]
        metadata["judge_input_tokens"] = sum(u.input_tokens or 0 for u in usages)
        metadata["judge_output_tokens"] = sum(u.output_tokens or 0 for u in usages)
        estimates = [e.estimated_cost_usd for e in executions if e.estimated_cost_usd is not None]
        if estimates:
            metadata["judge_estimated_cost_usd"] = float(sum(estimates))
        reported = [
            e.cost.amount
            for e in executions
            if e.status == "success" and e.cost is not None and e.cost.unit.upper() == "USD"
        ]
        if reported:
            metadata["judge_cost_usd"] = float(sum(reported))
    kind: AnnotatorKind = annotator_kind or ("LLM" if executions else "CODE")
    return {
        "span_id": target.span_id,
        "name": run.scorer_id,
        "annotator_kind": kind,
        "identifier": run.score_id,
        "result": outcome,
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }


@dataclass(slots=True)
class _Item:
    seq: int
    body: dict[str, Any]
    score_id: str
    span_id: str
    not_before: float = 0.0  # monotonic: not sent before
    retry_after: bool = False  # not_before was set by Retry-After: a flush does not bring it forward
    failures: int = 0  # failed attempts in a row (backoff)
    failed_in: int = -1  # the flush generation of the last failure
    missing_since: float | None = None  # Phoenix's first "no such span"
    alone: bool = False  # rejected within a batch: sent alone to find the culprit


@dataclass(frozen=True, slots=True)
class _Outcome:
    kind: Literal["stored", "missing", "refused", "transient", "rejected"]
    detail: str = ""
    missing: frozenset[str] = frozenset()
    retry_after_s: float | None = None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: the backoff applies instead
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class PhoenixAnnotationSink:
    """A :class:`~sidecar.core.Sink` writing scores as Phoenix span annotations (see the module doc).

    ``base_url``: Phoenix's address (``http://phoenix:6006``; the REST API is under ``/v1``). ``api_key``:
    sent as a bearer token when set. ``annotator_kinds``: per scorer id, ``LLM`` or ``CODE`` (the scorer's
    kind; runs of other scorers: ``LLM`` when they called a judge). ``observer`` hears of dropped
    annotations (``exporter_dropped``).

    Counters for tests and metrics: ``stored`` (annotations confirmed), ``failed_attempts``, ``dropped``
    (by reason), ``ignored`` (runs without a score), ``last_error``.
    """

    name = "phoenix"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        annotator_kinds: Mapping[str, AnnotatorKind] | None = None,
        batch_size: int = 100,
        timeout_s: float = 10.0,
        max_pending: int = 10_000,
        span_wait_s: float = 300.0,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 5.0,
        observer: ServiceObserver | None = None,
    ) -> None:
        if batch_size < 1 or max_pending < 1:
            raise ValueError("batch_size and max_pending must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + ANNOTATIONS_PATH
        self._api_key = api_key
        self._kinds = dict(annotator_kinds or {})
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.span_wait_s = span_wait_s
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._observer = observer or ServiceObserver()
        self._session: aiohttp.ClientSession | None = None
        self._sender: asyncio.Task[None] | None = None
        self._ready: deque[_Item] = deque()
        self._waiting: list[_Item] = []
        self._inflight: list[_Item] = []
        self._next_seq = 0
        self._generation = 0  # flushes started
        self._dropped_since_flush = 0
        self._wake = asyncio.Event()  # something to send, or a flush
        self._changed = asyncio.Event()  # items resolved or failed
        self._room = asyncio.Event()
        self._room.set()
        self._problem: str | None = None
        self._last_wait_log = -math.inf
        self.stored = 0
        self.failed_attempts = 0
        self.dropped: dict[DropReason, int] = dict.fromkeys(DROP_REASONS, 0)
        self.ignored = 0
        self.last_error: str | None = None

    def __repr__(self) -> str:  # never the key
        return f"PhoenixAnnotationSink(base_url={self.base_url!r})"

    # -- state -----------------------------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Annotations submitted and not yet stored (queued, in flight, waiting to be sent again)."""
        return len(self._ready) + len(self._waiting) + len(self._inflight)

    @property
    def problem(self) -> str | None:
        """Why Phoenix will not take annotations as things stand (the API key, the URL), for ``/readyz``."""
        return self._problem

    @property
    def waiting_for_spans(self) -> int:
        return sum(1 for item in self._waiting if item.missing_since is not None)

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._session is not None:
            return
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s), raise_for_status=False
        )
        self._sender = asyncio.create_task(self._send_loop(self._session), name="phoenix annotations sender")

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop sending. Call ``flush`` first: what is still outstanding here is abandoned."""
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        abandoned = self.outstanding
        if abandoned:
            log.warning("closing the Phoenix exporter with %d annotations not stored", abandoned)
        self._ready.clear()
        self._waiting.clear()
        self._inflight.clear()
        self._room.set()  # submitters waiting for room: the sink is closed
        self._changed.set()

    # -- the Sink interface ----------------------------------------------------------------------------------
    async def submit(self, run: ScoredRun) -> None:
        """Queue the run's annotation, if it has one. Never raises for Phoenix; waits while the sink holds
        ``max_pending`` unconfirmed annotations."""
        body = span_annotation(run, self._kinds.get(run.scorer_id))
        if body is None:
            self.ignored += 1
            return
        if self._session is None:
            raise RuntimeError("PhoenixAnnotationSink is not started")
        while self.outstanding >= self.max_pending and self._session is not None:
            self._room.clear()
            await self._room.wait()
        self._next_seq += 1
        self._ready.append(_Item(self._next_seq, body, run.score_id, run.request.target.span_id))
        self._wake.set()

    async def flush(self, timeout_s: float) -> bool:
        """``True`` when every annotation submitted before the call is stored in Phoenix and none was
        dropped since the last flush. Failed annotations are tried again now (``Retry-After`` permitting);
        the flush returns ``False`` as soon as one of them fails again, and waits up to ``timeout_s`` for
        annotations whose span Phoenix does not have yet."""
        if self._session is None:
            return self.outstanding == 0
        self._generation += 1
        generation = self._generation
        target = self._next_seq
        for item in self._waiting:  # resent now: a flush is the retry the runtime asks for
            if item.missing_since is None and not item.retry_after:
                item.not_before = 0.0
        self._wake.set()
        done = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout_s, 0.0)):
                while True:
                    pending = [i for i in self._items() if i.seq <= target]
                    if not pending:
                        done = True
                        break
                    if any(i.failed_in == generation for i in pending):
                        break  # failed again in this flush: it will not confirm
                    self._changed.clear()
                    await self._changed.wait()
        dropped, self._dropped_since_flush = self._dropped_since_flush, 0
        if not done:
            self._log_unconfirmed(target)
        return done and not dropped

    def _items(self) -> list[_Item]:
        return [*self._inflight, *self._ready, *self._waiting]

    def _log_unconfirmed(self, target: int) -> None:
        pending = [i for i in self._items() if i.seq <= target]
        waiting = [i for i in pending if i.missing_since is not None]
        failing = len(pending) - len(waiting)
        if failing and self.last_error:
            log.warning(
                "%d annotations not stored in Phoenix (last error: %s); kept and sent again", failing, self.last_error
            )
        now = time.monotonic()
        if waiting and now - self._last_wait_log >= _WAIT_LOG_EVERY_S:
            self._last_wait_log = now
            oldest = max(now - (i.missing_since or now) for i in waiting)
            log.warning(
                "%d annotations wait for spans Phoenix does not have yet (oldest %.0f s; each is given up "
                "after exporters.phoenix.span_wait_s = %.0f s): does this trace reach Phoenix (the Collector's "
                "pipeline to Phoenix, its sampling)?",
                len(waiting),
                oldest,
                self.span_wait_s,
            )

    # -- sending ---------------------------------------------------------------------------------------------
    def _next_batch(self) -> list[_Item]:
        now = time.monotonic()
        due = [i for i in self._waiting if i.not_before <= now]
        if due:
            self._waiting = [i for i in self._waiting if i.not_before > now]
            self._ready.extendleft(reversed(sorted(due, key=lambda i: i.seq)))
        if not self._ready:
            return []
        if self._ready[0].alone:
            return [self._ready.popleft()]
        batch: list[_Item] = []
        while self._ready and len(batch) < self.batch_size and not self._ready[0].alone:
            batch.append(self._ready.popleft())
        return batch

    async def _send_loop(self, session: aiohttp.ClientSession) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                self._wake.clear()
                delay = min((i.not_before for i in self._waiting), default=None)
                timeout = None if delay is None else max(delay - time.monotonic(), 0.0)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                continue
            self._inflight = batch
            try:
                outcome = await self._post(session, batch)
            finally:
                self._inflight = []
            self._settle(batch, outcome)
            self._changed.set()
            if self.outstanding < self.max_pending:
                self._room.set()

    async def _post(self, session: aiohttp.ClientSession, batch: list[_Item]) -> _Outcome:
        payload = {"data": [item.body for item in batch]}
        try:
            async with session.post(self.url, params={"sync": "true"}, json=payload) as response:
                text = await response.text()
                status = response.status
                retry_after = _retry_after(response.headers.get("Retry-After"))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return _Outcome("transient", f"{type(exc).__name__}: {exc}"[:300])
        if 200 <= status < 300:
            return _Outcome("stored")
        detail = f"HTTP {status}: {text.strip()[:300]}"
        if status == 404 and (match := _MISSING_SPANS.search(text)):
            ids = frozenset(s.strip().lower() for s in match["ids"].split(",") if s.strip())
            return _Outcome("missing", detail, missing=ids)
        if status in (404, 405):  # no such route: this is not Phoenix's REST API (405: Phoenix's own UI routes)
            return _Outcome(
                "refused", f"no Phoenix REST API at {self.url} (HTTP {status}): check exporters.phoenix.base_url"
            )
        if status in (401, 403):
            return _Outcome(
                "refused",
                f"Phoenix at {self.base_url} refuses the API key (HTTP {status}): set PHOENIX_API_KEY "
                "(or exporters.phoenix.api_key) to a key of that Phoenix",
            )
        if status == 429 or status >= 500 or status == 408:
            return _Outcome("transient", detail, retry_after_s=retry_after)
        return _Outcome("rejected", detail)

    def _backoff(self, item: _Item, cap: float) -> float:
        return float(min(cap, self._backoff_base_s * 2 ** max(item.failures - 1, 0)))

    def _settle(self, batch: list[_Item], outcome: _Outcome) -> None:
        now = time.monotonic()
        if outcome.kind == "stored":
            self.stored += len(batch)
            if self._problem is not None:
                log.info("Phoenix at %s takes annotations again", self.base_url)
                self._problem = None
            return
        if outcome.kind == "missing":
            again: list[_Item] = []
            for item in batch:
                if item.span_id.lower() not in outcome.missing:
                    again.append(item)  # its span is there: the batch failed for another's
                    continue
                if item.missing_since is None:
                    item.missing_since = now
                    item.failures = 0
                if now - item.missing_since >= self.span_wait_s:
                    self._drop(item, "span_not_found", f"Phoenix has no span {item.span_id}")
                    continue
                item.failures += 1
                item.not_before = now + self._backoff(item, _SPAN_WAIT_BACKOFF_MAX_S)
                self._waiting.append(item)
            self._ready.extendleft(reversed(again))
            if again:
                self._wake.set()
            return
        if outcome.kind == "rejected":
            if len(batch) > 1:
                for item in batch:
                    item.alone = True
                self._ready.extendleft(reversed(batch))
                self._wake.set()
                return
            self._drop(batch[0], "rejected", outcome.detail)
            return
        # transient or refused: all of it waits and is sent again
        self.failed_attempts += len(batch)
        self.last_error = outcome.detail
        if outcome.kind == "refused" and outcome.detail != self._problem:
            self._problem = outcome.detail
            log.error("Phoenix exporter: %s; annotations are kept and nothing is committed past them", outcome.detail)
        for item in batch:
            item.failures += 1
            item.failed_in = self._generation
            if outcome.retry_after_s is not None:
                item.not_before = now + min(outcome.retry_after_s, 60.0)
                item.retry_after = True
            else:
                item.not_before = now + self._backoff(item, self._backoff_max_s)
                item.retry_after = False
            self._waiting.append(item)

    def _drop(self, item: _Item, reason: DropReason, detail: str) -> None:
        self.dropped[reason] += 1
        self._dropped_since_flush += 1
        self._observer.exporter_dropped(self.name, reason)
        if reason == "span_not_found":
            log.error(
                "Phoenix annotation %s given up: span %s was not in Phoenix %.0f s after the first try "
                "(exporters.phoenix.span_wait_s); the score is in the other exporters. Is the Collector sending "
                "this service's traces to Phoenix?",
                item.score_id,
                item.span_id,
                self.span_wait_s,
            )
        else:
            log.error(
                "Phoenix annotation %s on span %s rejected for good and dropped: %s",
                item.score_id,
                item.span_id,
                detail,
            )
