"""The Langfuse exporter's sink: scores posted to ``POST /api/public/scores`` on the delivery loop.

The batch path is the scores API itself: a JSON *array* of scores, answered 202 (all accepted) or 207
(``{accepted, rejected, errors: [{message}]}``): the current API definition and the official SDK's
``scores.create``. A 207 with rejections is a rejected batch: the delivery loop sends its scores alone to find
the one Langfuse refuses (the others are upserted again, harmless: same id and timestamp), which is dropped
with Langfuse's words and set aside on the score dead letters.

Servers from before batch scores take one object per request (200 ``{id}``) and answer an array 400. No
version number says which: the sink asks the server by behaviour. A score that an array of one cannot carry
(400) is sent once more as a single object; when the server takes it, the sink posts one score per request
from then on (one INFO line) and confirms it. So a batch is 1 request on a current server and one per score on
an older one; a score the server refuses in either form is rejected.

401/403 (the keys) and 404/405 (no API at that URL) keep the scores and are the sink's readiness problem; 408,
429 and 5xx are retried after a backoff or the ``Retry-After`` Langfuse sends. The keys go in a Basic
``Authorization`` header and are never logged.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from typing import Any, Final

from exporters.delivery import (
    CONFIRMED,
    DeadLetter,
    DeliveryRules,
    Entry,
    HttpAnswer,
    HttpBatchSink,
    Outcome,
    SetAsideLetter,
    Settle,
    StatusClassifier,
    Verdict,
    Wording,
    is_checkpointed,
    no_dead_letters,
    rejected,
)
from exporters.langfuse.mapping import LangfuseScore, langfuse_score
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver

__all__ = ["DROP_REASONS", "LANGFUSE_PUBLIC_KEY_ENV", "LANGFUSE_SECRET_KEY_ENV", "SCORES_PATH", "LangfuseScoreSink"]

log = logging.getLogger("exporters.langfuse")

SCORES_PATH: Final = "/api/public/scores"
DROP_REASONS: Final = ("rejected",)
LANGFUSE_PUBLIC_KEY_ENV: Final = "LANGFUSE_PUBLIC_KEY"
LANGFUSE_SECRET_KEY_ENV: Final = "LANGFUSE_SECRET_KEY"
_WORDS: Final = 300


def _describe(score: LangfuseScore) -> str:
    return f"Langfuse score {score.score_id} on trace {score.trace_id}"


def _payload(scores: list[LangfuseScore]) -> list[dict[str, Any]]:
    return [score.body for score in scores]


def _words(answer: HttpAnswer) -> str:
    """Langfuse's message (``{"message": ..., "error": ...}``), else the body's text."""
    try:
        body = json.loads(answer.text)
    except ValueError:
        return answer.text.strip()[:_WORDS]
    if isinstance(body, dict) and body.get("message"):
        error = body.get("error")
        return f"{body['message']}{f': {json.dumps(error)}' if error else ''}"[:_WORDS]
    return answer.text.strip()[:_WORDS]


def _partial_batch(answer: HttpAnswer, scores: Sequence[LangfuseScore]) -> Verdict | None:
    """A 207: Langfuse took some of the batch and says why not the others (without naming them)."""
    if answer.status != 207:
        return None
    try:
        body = json.loads(answer.text)
        refused, errors = int(body.get("rejected", 0)), body.get("errors") or []
    except (ValueError, TypeError, AttributeError):
        return rejected(f"HTTP 207 that is not Langfuse's batch answer: {answer.text.strip()[:_WORDS]}")
    if refused == 0:
        return CONFIRMED
    messages = "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors)
    return rejected(f"HTTP 207: Langfuse refused {refused} of {len(scores)}: {messages}"[:_WORDS])


def _refused_with_words(answer: HttpAnswer, scores: Sequence[LangfuseScore]) -> Verdict | None:
    """A 400/413/422 in Langfuse's own words (its JSON message), rejected as any other sink's would be."""
    if answer.status in (400, 413, 422):
        return rejected(f"HTTP {answer.status}: {_words(answer)}")
    return None


class LangfuseScoreSink(HttpBatchSink[LangfuseScore]):
    """A :class:`~sidecar.core.Sink` writing scores to Langfuse (see the module doc).

    ``base_url``: Langfuse's address (``https://cloud.langfuse.com``, ``http://langfuse:3000``);
    ``public_key``/``secret_key``: a project's API key pair. ``environment``: the environment of scores whose
    scored span names none Langfuse takes. Counters: ``stored``, ``failed_attempts``, ``dropped``, ``ignored``,
    ``last_error``; ``one_per_request`` once the server showed it takes no arrays.
    """

    def __init__(
        self,
        base_url: str,
        *,
        public_key: str,
        secret_key: str,
        environment: str | None = None,
        batch_size: int = 100,
        timeout_s: float = 10.0,
        max_pending: int = 10_000,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 5.0,
        observer: ServiceObserver | None = None,
        set_aside: SetAsideLetter = no_dead_letters,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.environment = environment
        self.one_per_request = False
        self._unusable_environments: set[str] = set()
        url = self.base_url + SCORES_PATH
        credentials = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
        super().__init__(
            "langfuse",
            url,
            item=self._score,
            payload=_payload,
            classify=StatusClassifier(
                credentials=lambda answer: (
                    f"Langfuse at {self.base_url} refuses the API keys (HTTP {answer.status}): set "
                    f"{LANGFUSE_PUBLIC_KEY_ENV} and {LANGFUSE_SECRET_KEY_ENV} (or exporters.langfuse.public_key "
                    "and secret_key) to a key pair of the project"
                ),
                no_api=lambda answer: (
                    f"no Langfuse public API at {url} (HTTP {answer.status}): check exporters.langfuse.base_url"
                ),
                hooks=(_partial_batch, _refused_with_words),
            ),
            describe=_describe,
            rules=DeliveryRules(
                batch_size=batch_size,
                max_pending=max_pending,
                backoff_base_s=backoff_base_s,
                backoff_max_s=backoff_max_s,
                drop_reasons=DROP_REASONS,
            ),
            wording=Wording("scores", "stored in Langfuse"),
            destination=f"Langfuse at {self.base_url}",
            log=log,
            headers={"Authorization": f"Basic {credentials}"},
            timeout_s=timeout_s,
            observer=observer,
            set_aside=lambda score, reason, detail: set_aside(_letter(score), reason, detail),
            set_aside_checkpointed=is_checkpointed(set_aside),
        )

    def __repr__(self) -> str:  # never the keys
        return f"LangfuseScoreSink(base_url={self.base_url!r})"

    def _score(self, run: ScoredRun) -> LangfuseScore | None:
        score = langfuse_score(run, self.environment)
        if score is not None and score.unusable_environment is not None:
            self._say_unusable(score.unusable_environment)
        return score

    def _say_unusable(self, environment: str) -> None:
        # Once per value (a service's environment is one of a few), within a bound.
        if environment in self._unusable_environments or len(self._unusable_environments) >= 100:
            return
        self._unusable_environments.add(environment)
        log.warning(
            "deployment.environment.name %r is not an environment Langfuse takes (lowercase letters, digits, '-' "
            "and '_', at most 40, not starting with 'langfuse'): its scores go under %s",
            environment,
            repr(self.environment) if self.environment else "Langfuse's default environment",
        )

    # -- the transport: an array per batch, or one object per score on a server without batch scores ----------
    async def send(self, batch: Sequence[Entry[LangfuseScore]], settle: Settle[LangfuseScore]) -> None:
        if self.one_per_request:
            await self._send_one_by_one(batch, settle)
            return
        values = [entry.value for entry in batch]
        answer = await self.post(_payload(values))
        if isinstance(answer, Outcome):
            settle(batch, self.outcome_of(answer))
            return
        if answer.status == 400 and len(batch) == 1:
            # Alone and still refused as an array: the score itself, or a server that takes no arrays.
            single = await self.post(values[0].body)
            if isinstance(single, Outcome):  # no answer this time: nothing learnt, try again later
                settle(batch, self.outcome_of(single))
                return
            if 200 <= single.status < 300:
                self._no_arrays()
                settle(batch, self.outcome_of(CONFIRMED))
                return
            answer = single
        settle(batch, self.outcome_of(self.classify(answer, values)))

    def _no_arrays(self) -> None:
        self.one_per_request = True
        log.info(
            "%s takes one score per request (a server from before batch scores): the scores go one by one from now "
            "on; a current Langfuse takes them in batches",
            self.destination,
        )

    async def _send_one_by_one(self, batch: Sequence[Entry[LangfuseScore]], settle: Settle[LangfuseScore]) -> None:
        for i, entry in enumerate(batch):
            answer = await self.post(entry.value.body)
            verdict = answer if isinstance(answer, Outcome) else self.classify(answer, [entry.value])
            outcome = self.outcome_of(verdict)
            settle([entry], outcome)
            if outcome.kind == "failed":  # down or refusing: the rest would fail alike, keep them for later
                if i + 1 < len(batch):
                    settle(batch[i + 1 :], outcome)
                return


def _letter(score: LangfuseScore) -> DeadLetter:
    return DeadLetter("langfuse", score.score_id, score.key, json.dumps(score.body).encode())
