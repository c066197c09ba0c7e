"""The Datadog exporter's sink: evaluations posted to the evaluation-metric intake on the delivery loop.

202 is stored. A 400 (a metric the intake refuses) or 413 (a request over the intake's size limit, or a
proxy's) rejects the batch: the delivery loop sends its evaluations alone, and what is refused alone is
dropped with Datadog's words and set aside on the score dead letters. The sink's batches stay far under the
intake's 5 MB (``batch_size`` metrics of a few KB each: the reasoning is clipped), so a 413 means a proxy with
a lower limit, and splitting finds the size that passes. 401/403 (the API key) and 404/405 (no intake at that
URL) keep the evaluations and are the sink's readiness problem; 408, 429 and 5xx are retried after a backoff
or the ``Retry-After`` Datadog sends. The key goes in a ``DD-API-KEY`` header and is never logged.

No idempotency key: the intake stores every evaluation it accepts. The sink writes each score id at most once
per process lifetime: a bounded memory of the ids Datadog confirmed (the last ``remember`` of them) and of
the ids on their way; a run redelivered within the process (a rebalance, a commit that failed) is not sent
again. After a restart, the scores redelivered from uncommitted records are sent again: Datadog then holds two
evaluations of the same label on the span, told apart by their ``score_id`` tag (docs/datadog.md).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from exporters.datadog.mapping import DatadogEvaluation, Threshold, datadog_evaluation, payload
from exporters.delivery import (
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
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver

__all__ = ["DD_API_KEY_ENV", "DROP_REASONS", "EVAL_METRIC_PATH", "DatadogEvaluationSink", "SentScores"]

log = logging.getLogger("exporters.datadog")

EVAL_METRIC_PATH: Final = "/api/intake/llm-obs/v2/eval-metric"
DD_API_KEY_ENV: Final = "DD_API_KEY"
DROP_REASONS: Final = ("rejected",)
_WORDS: Final = 300


class SentScores:
    """The score ids Datadog confirmed, the last ``capacity`` of them (oldest forgotten first)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, score_id: object) -> bool:
        return score_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, score_id: str) -> None:
        if self.capacity <= 0:
            return
        self._ids[score_id] = None
        self._ids.move_to_end(score_id)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)


def _describe(evaluation: DatadogEvaluation) -> str:
    return f"Datadog evaluation {evaluation.score_id} on trace {evaluation.trace_id}"


def _words(answer: HttpAnswer) -> str:
    """Datadog's ``{"errors": [...]}`` (strings or ``{title, detail}``), else the body's text."""
    try:
        errors = json.loads(answer.text).get("errors")
    except (ValueError, AttributeError):
        errors = None
    if not errors:
        return answer.text.strip()[:_WORDS]
    parts = [
        " ".join(str(e.get(k)) for k in ("title", "detail") if e.get(k)) if isinstance(e, dict) else str(e)
        for e in errors
    ]
    return "; ".join(parts)[:_WORDS]


def _refused_with_words(answer: HttpAnswer, evaluations: Sequence[DatadogEvaluation]) -> Verdict | None:
    if answer.status in (400, 413, 422):
        return rejected(f"HTTP {answer.status}: {_words(answer)}")
    return None


class DatadogEvaluationSink(HttpBatchSink[DatadogEvaluation]):
    """A :class:`~sidecar.core.Sink` writing scores as Datadog LLM Observability evaluations (see the module doc).

    ``base_url``: the intake's address (``https://api.datadoghq.com`` for the ``datadoghq.com`` site, or a
    proxy). ``ml_app``: the LLM application, else each scored span's service. ``thresholds``: per scorer id,
    what passes (the evaluation's ``assessment``). Counters: ``stored``, ``failed_attempts``, ``dropped``,
    ``ignored``, ``already_sent`` (runs whose score id this process already wrote), ``last_error``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        ml_app: str | None = None,
        thresholds: dict[str, Threshold] | None = None,
        batch_size: int = 100,
        timeout_s: float = 10.0,
        max_pending: int = 10_000,
        remember: int = 100_000,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 5.0,
        observer: ServiceObserver | None = None,
        set_aside: SetAsideLetter = no_dead_letters,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.ml_app = ml_app
        self.thresholds = dict(thresholds or {})
        self.sent = SentScores(remember)
        self._on_their_way: set[str] = set()
        self.already_sent = 0
        url = self.base_url + EVAL_METRIC_PATH
        self._set_aside_letter = set_aside
        super().__init__(
            "datadog",
            url,
            item=self._evaluation,
            payload=payload,
            classify=StatusClassifier(
                credentials=lambda answer: (
                    f"Datadog at {self.base_url} refuses the API key (HTTP {answer.status}): set {DD_API_KEY_ENV} "
                    "(or exporters.datadog.api_key) to an API key of the organization, on its site "
                    "(exporters.datadog.site)"
                ),
                no_api=lambda answer: (
                    f"no Datadog evaluation intake at {url} (HTTP {answer.status}): check exporters.datadog.site "
                    "and base_url"
                ),
                hooks=(_refused_with_words,),
            ),
            describe=_describe,
            rules=DeliveryRules(
                batch_size=batch_size,
                max_pending=max_pending,
                backoff_base_s=backoff_base_s,
                backoff_max_s=backoff_max_s,
                drop_reasons=DROP_REASONS,
            ),
            wording=Wording("evaluations", "stored in Datadog"),
            destination=f"Datadog at {self.base_url}",
            log=log,
            headers={"DD-API-KEY": api_key},
            timeout_s=timeout_s,
            observer=observer,
            set_aside=self._dropped,
            set_aside_checkpointed=is_checkpointed(set_aside),
        )

    def __repr__(self) -> str:  # never the key
        return f"DatadogEvaluationSink(base_url={self.base_url!r})"

    def _evaluation(self, run: ScoredRun) -> DatadogEvaluation | None:
        score_id = run.score_id
        if score_id in self.sent or score_id in self._on_their_way:
            self.already_sent += 1  # Datadog would store it twice: once per score id per process
            return None
        evaluation = datadog_evaluation(run, ml_app=self.ml_app, thresholds=self.thresholds)
        if evaluation is not None:
            self._on_their_way.add(score_id)
        return evaluation

    async def submit(self, run: ScoredRun) -> None:
        try:
            await super().submit(run)
        except BaseException:
            # Never queued (cancelled while waiting for room, or the sink not started): when the run comes again
            # it must be sent, not taken for one on its way.
            self._on_their_way.discard(run.score_id)
            raise

    async def send(self, batch: Sequence[Entry[DatadogEvaluation]], settle: Settle[DatadogEvaluation]) -> None:
        def settled(entries: Sequence[Entry[DatadogEvaluation]], outcome: Outcome) -> None:
            if outcome.kind == "confirmed":
                for entry in entries:
                    self._written(entry.value.score_id)
            settle(entries, outcome)

        await super().send(batch, settled)

    def _written(self, score_id: str) -> None:
        self._on_their_way.discard(score_id)
        self.sent.add(score_id)

    def _dropped(self, evaluation: DatadogEvaluation, reason: str, detail: str) -> None:
        self._written(evaluation.score_id)  # refused for good: written to the dead letters instead, once
        payload_bytes = json.dumps(evaluation.metric).encode()
        letter = DeadLetter("datadog", evaluation.score_id, evaluation.key, payload_bytes)
        self._set_aside_letter(letter, reason, detail)

    async def close(self, timeout_s: float = 5.0) -> None:
        await super().close(timeout_s)
        self._on_their_way.clear()  # abandoned (counted in the close's warning): a later start may send them
