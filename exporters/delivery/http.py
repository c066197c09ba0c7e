"""A sink that posts batches to an HTTP API, on aiohttp: what a REST destination is made of.

A destination is its payload mapping (a run → one item, a batch of items → one JSON body), its endpoint
(URL, query parameters, headers) and its classifier. :class:`HttpBatchSink` does the rest on the delivery
queue (``exporters.delivery.queue``): one request per batch, one request at a time.

The classifier (:class:`StatusClassifier`) reads each answer; a sink's hooks are asked first (Phoenix: a
404 that names spans it does not have yet is a ``wait``; Langfuse: a 207 that refuses some scores), then:

* 2xx: confirmed;
* 401, 403 (the credentials) and 404, 405 (no such API at that URL): :class:`Refused`: kept and sent again
  like a failure, and the sink's ``problem`` (``/readyz``) says which key to change, with one ERROR line
  per new problem, and one INFO line when the destination takes the items again;
* 408, 429, 5xx, refused connections and timeouts: failed, kept and sent again after a backoff or after
  the ``Retry-After`` the destination sent (delta-seconds, an HTTP date or ``retry-after-ms``);
* any other status (400, 413, 422…): rejected: the batch is split to find the culprit, which is dropped
  with the destination's words and set aside (the score dead letters, ``set_aside``).

A sink whose destination needs more than one request per batch at times (a fallback to one item per request)
overrides ``send`` and uses ``post`` or ``request`` (one request, its answer) and ``outcome_of`` (a verdict →
the batch's outcome, with the readiness problem kept up to date).

A destination with several endpoints (Phoenix: span annotations and session annotations) names each item's
URL (``url_of``): a batch is posted as one request per endpoint, in order, each answer settling its own items.

Headers (credentials) are sent as given and never logged; ``repr`` names the URL only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import aiohttp

from exporters.delivery.outcome import CONFIRMED, DeliveryRules, Outcome, Wording, failed, rejected
from exporters.delivery.queue import DeliveryQueue, Entry, SetAside, Settle
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver
from sidecar.scoring.retry_after import parse_retry_after

__all__ = ["HttpAnswer", "HttpBatchSink", "Refused", "StatusClassifier", "Verdict", "rejected_in_their_words"]

V = TypeVar("V")

_DETAIL_CHARS = 300


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    text: str
    retry_after_s: float | None = None

    @property
    def detail(self) -> str:
        return f"HTTP {self.status}: {self.text.strip()[:_DETAIL_CHARS]}"


@dataclass(frozen=True, slots=True)
class Refused:
    """The destination refuses everything as things stand (credentials, the URL): the items are kept and
    sent again, and ``problem`` (which key to change) is the sink's readiness problem until it takes them."""

    problem: str


Verdict = Outcome | Refused
Hook = Callable[[HttpAnswer, Sequence[V]], Verdict | None]


def rejected_in_their_words(read: Callable[[Any], str | None]) -> Hook[Any]:
    """A hook rejecting a 400, 413 or 422 in the destination's own words: ``read`` of the answer's JSON body
    (its message, its list of errors; None when it says nothing), else the body's text, at most 300
    characters, rather than the raw body."""

    def hook(answer: HttpAnswer, values: Sequence[Any]) -> Verdict | None:
        if answer.status not in (400, 413, 422):
            return None
        try:
            said = read(json.loads(answer.text))
        except ValueError:
            said = None
        words = said if said is not None else answer.text.strip()
        return rejected(f"HTTP {answer.status}: {words[:_DETAIL_CHARS]}")

    return hook


@dataclass(frozen=True)
class StatusClassifier(Generic[V]):
    """An HTTP answer → a verdict (see the module doc). ``credentials`` and ``no_api`` word the readiness
    problem of a 401/403 and a 404/405; ``hooks`` (a sink's own cases) are asked first, for any answer (a 207
    multi-status is a 2xx that says some items were refused)."""

    credentials: Callable[[HttpAnswer], str]
    no_api: Callable[[HttpAnswer], str]
    hooks: tuple[Hook[V], ...] = ()

    def __call__(self, answer: HttpAnswer, values: Sequence[V]) -> Verdict:
        for hook in self.hooks:
            verdict = hook(answer, values)
            if verdict is not None:
                return verdict
        status = answer.status
        if 200 <= status < 300:
            return CONFIRMED
        if status in (401, 403):
            return Refused(self.credentials(answer))
        if status in (404, 405):
            return Refused(self.no_api(answer))
        if status in (408, 429) or status >= 500:
            return failed(answer.detail, answer.retry_after_s)
        return rejected(answer.detail)


class HttpBatchSink(Generic[V]):
    """A :class:`~sidecar.core.Sink` posting batches of ``item(run)`` as ``payload(items)`` to ``url``.

    ``item`` returns ``None`` for a run the destination does not take (counted in ``ignored``).
    ``destination`` names it in log lines ("Phoenix at http://phoenix:6006"). ``set_aside`` receives every dropped item
    (see :class:`~exporters.delivery.queue.DeliveryQueue`, as ``set_aside_checkpointed``). Counters: ``outstanding``,
    ``dropped`` (per reason), ``failed_attempts``, ``ignored``, ``last_error``; ``problem`` for ``/readyz``.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        item: Callable[[ScoredRun], V | None],
        payload: Callable[[list[V]], Any],
        classify: StatusClassifier[V],
        describe: Callable[[V], str],
        rules: DeliveryRules,
        wording: Wording,
        destination: str,
        log: logging.Logger,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        observer: ServiceObserver | None = None,
        set_aside: SetAside[V] | None = None,
        set_aside_checkpointed: bool = False,
        url_of: Callable[[V], str] | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self._url_of = url_of
        self.timeout_s = timeout_s
        self.destination = destination
        self._item = item
        self._payload = payload
        self._classify = classify
        self._headers = dict(headers or {})
        self._params = dict(params or {})
        self._wording = wording
        self._log = log
        self._session: aiohttp.ClientSession | None = None
        self._problem: str | None = None
        self._queue: DeliveryQueue[V] = DeliveryQueue(
            name,
            self,
            rules,
            wording=wording,
            describe=describe,
            log=log,
            observer=observer,
            set_aside=set_aside,
            set_aside_checkpointed=set_aside_checkpointed,
        )
        self.ignored = 0

    def __repr__(self) -> str:  # never the headers: they hold credentials
        return f"{type(self).__name__}(url={self.url!r})"

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return self._queue.outstanding

    @property
    def stored(self) -> int:
        """Items the destination confirmed."""
        return self._queue.confirmed

    @property
    def problem(self) -> str | None:
        """Why the destination will not take the items as things stand (credentials, the URL), for ``/readyz``."""
        return self._problem

    @property
    def dropped(self) -> dict[str, int]:
        return self._queue.dropped

    @property
    def failed_attempts(self) -> int:
        return self._queue.failed_attempts

    @property
    def last_error(self) -> str | None:
        return self._queue.last_error

    # -- the Sink interface -----------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._session is not None:
            return
        self._session = aiohttp.ClientSession(
            headers={"Content-Type": "application/json", "Accept": "application/json", **self._headers},
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            raise_for_status=False,
        )
        self._queue.start()

    async def submit(self, run: ScoredRun) -> None:
        """Queue the run's item, if it has one. Never raises for the destination; waits while the sink holds
        ``max_pending`` unconfirmed items."""
        value = self._item(run)
        if value is None:
            self.ignored += 1
            return
        if self._session is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        await self._queue.put(value)

    async def flush(self, timeout_s: float) -> bool:
        return await self._queue.flush(timeout_s)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop sending. Call ``flush`` first: what is still outstanding here is abandoned."""
        await self._queue.close()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # -- the transport ----------------------------------------------------------------------------------------
    async def send(self, batch: Sequence[Entry[V]], settle: Settle[V]) -> None:
        if self._url_of is None:
            await self._send_to(self.url, batch, settle)
            return
        groups: dict[str, list[Entry[V]]] = {}
        for entry in batch:
            groups.setdefault(self._url_of(entry.value), []).append(entry)
        for url, entries in groups.items():
            await self._send_to(url, entries, settle)

    async def _send_to(self, url: str, batch: Sequence[Entry[V]], settle: Settle[V]) -> None:
        values = [entry.value for entry in batch]
        settle(batch, self.outcome_of(await self._post(values, url)))

    def outcome_of(self, verdict: Verdict) -> Outcome:
        """The batch's outcome for ``verdict``; a refusal becomes the readiness problem (one ERROR line per new
        problem), a confirmation after a problem clears it (one INFO line)."""
        if isinstance(verdict, Refused):
            if verdict.problem != self._problem:
                self._problem = verdict.problem
                self._log.error(
                    "%s exporter: %s; the %s are kept and nothing is committed past them",
                    self.name,
                    verdict.problem,
                    self._wording.noun,
                )
            return failed(verdict.problem)
        if verdict.kind == "confirmed" and self._problem is not None:
            self._log.info("%s takes %s again", self.destination, self._wording.noun)
            self._problem = None
        return verdict

    async def post(self, body: Any, url: str | None = None) -> HttpAnswer | Outcome:
        """One request with the JSON ``body`` (to ``url``, by default the sink's): the destination's answer, or a
        failed outcome when none came."""
        return await self.request("POST", url or self.url, body)

    async def request(self, method: str, url: str, body: Any) -> HttpAnswer | Outcome:
        """One ``method`` request with the JSON ``body``: the destination's answer, or a failed outcome when none
        came (a sink that updates what it created before: MLflow's ``PATCH``)."""
        session = self._session
        if session is None:
            return failed("the sink is closed")
        try:
            async with session.request(method, url, params=self._params, json=body) as response:
                return HttpAnswer(response.status, await response.text(), parse_retry_after(response.headers))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return failed(f"{type(exc).__name__}: {exc}"[:_DETAIL_CHARS])

    def classify(self, answer: HttpAnswer, values: Sequence[V]) -> Verdict:
        return self._classify(answer, values)

    async def _post(self, values: list[V], url: str | None = None) -> Verdict:
        answer = await self.post(self._payload(values), url)
        return answer if isinstance(answer, Outcome) else self._classify(answer, values)
