"""The MLflow exporter's sink: assessments created on MLflow's tracking server, on the delivery loop.

MLflow has no batch call for assessments: a batch of the delivery queue is one request per assessment
(``POST /api/3.0/mlflow/traces/{trace_id}/assessments``), at most ``max_concurrency`` in flight, each settling
its own assessment. MLflow answers 200 with the stored assessment.

**Redelivery** (docs/mlflow.md). The assessment id is the score's (``mapping``): when MLflow already holds it
(a run redelivered after a rebalance, a failed commit, a kill -9 after MLflow stored it), it refuses the create
with HTTP 500 ``… due to a constraint violation`` (the duplicate primary key; not 409), and the sink updates
that assessment instead (``PATCH …/assessments/{assessment_id}``: the value or error, the rationale, the
metadata). So a score is one assessment in MLflow, however often it is delivered; MLflow keeps its creation
time and its ``valid`` flag (an assessment a human overrode stays overridden). A 500 that is not that refusal
(a locked SQLite database, a server error) is retried as any failure.

**A trace MLflow does not have yet** (the agents' spans reach MLflow after the score, through another
pipeline): MLflow answers 404 ``RESOURCE_DOES_NOT_EXIST`` "Trace with ID … not found"; the assessment waits,
tried again with a short backoff, for up to ``trace_wait_s`` after that first answer (a flush waits for it
within its timeout; nothing is committed past it), then the one rule for permanent refusals applies: dropped,
counted (``trace_not_found``), logged at ERROR with its score id, set aside on the score dead letters. Any other
404 or a 405 is no MLflow tracking API at that URL (the sink's readiness problem), 401/403 the credentials;
400/413/422 reject the assessment (found alone, dropped, counted, dead-lettered, MLflow's words in the log);
408, 429 and 5xx are retried after a backoff or MLflow's ``Retry-After``.

The token or the user and password go in an ``Authorization`` header (Bearer, or Basic as MLflow's clients
send ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``) and are never logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping, Sequence
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
    WaitRule,
    Wording,
    is_checkpointed,
    no_dead_letters,
    rejected,
    wait,
)
from exporters.mlflow.experiment import ExperimentRef, resolve_experiment
from exporters.mlflow.mapping import Assessment, SourceType, mlflow_assessment
from sidecar.core import ScoredRun
from sidecar.core.observers import ServiceObserver

__all__ = ["ASSESSMENTS_PATH", "DROP_REASONS", "MlflowAssessmentSink"]

log = logging.getLogger("exporters.mlflow")

ASSESSMENTS_PATH: Final = "/api/3.0/mlflow/traces/{trace_id}/assessments"
DROP_REASONS: Final = ("rejected", "trace_not_found")
_WORDS: Final = 300
# MLflow's words when the assessment id is taken (sqlalchemy_store.create_assessment, an IntegrityError on a
# trace that exists): the same assessment, delivered before.
_DUPLICATE = re.compile(r"constraint violation")
_NO_TRACE = re.compile(r"Trace with (?:ID|request_id) '[^']*' not found")


def _describe(assessment: Assessment) -> str:
    return f"MLflow assessment {assessment.assessment_id} (score {assessment.score_id}) on trace {assessment.trace_id}"


def _error(answer: HttpAnswer) -> tuple[str, str]:
    """MLflow's ``{"error_code", "message"}``, else the body's text."""
    try:
        body = json.loads(answer.text)
    except ValueError:
        return "", answer.text.strip()[:_WORDS]
    if not isinstance(body, dict):
        return "", answer.text.strip()[:_WORDS]
    return str(body.get("error_code") or ""), str(body.get("message") or answer.text.strip())[:_WORDS]


def _trace_not_there(answer: HttpAnswer, assessments: Sequence[Assessment]) -> Verdict | None:
    """MLflow's 404 for a trace it does not have (yet): the assessment waits under ``trace_wait_s``."""
    if answer.status != 404:
        return None
    code, message = _error(answer)
    if code != "RESOURCE_DOES_NOT_EXIST" or not _NO_TRACE.search(message):
        return None  # another 404: no tracking API at that URL
    return wait(frozenset(range(len(assessments))), f"no such trace in MLflow: {message}")


def _refused_with_words(answer: HttpAnswer, assessments: Sequence[Assessment]) -> Verdict | None:
    if answer.status in (400, 413, 422):
        code, message = _error(answer)
        return rejected(f"HTTP {answer.status} {code}: {message}".replace("  ", " "))
    return None


class MlflowAssessmentSink(HttpBatchSink[Assessment]):
    """A :class:`~sidecar.core.Sink` writing scores as MLflow assessments (see the module doc).

    ``tracking_uri``: the tracking server (``http://mlflow:5000``). ``headers``: its credentials (never
    logged). ``experiment``: the experiment the agents' traces go to, found (or created) at start and named in
    log lines. ``source_types``: per scorer id, ``LLM_JUDGE`` or ``CODE``. Counters: ``stored`` (assessments
    confirmed), ``updated`` (of those, redeliveries updated in place), ``failed_attempts``, ``dropped``,
    ``ignored`` (runs without an assessment), ``last_error``, ``waiting_for_traces``.
    """

    def __init__(
        self,
        tracking_uri: str,
        *,
        headers: Mapping[str, str] | None = None,
        experiment: ExperimentRef | None = None,
        source_types: Mapping[str, SourceType] | None = None,
        batch_size: int = 100,
        max_concurrency: int = 8,
        timeout_s: float = 10.0,
        max_pending: int = 10_000,
        trace_wait_s: float = 300.0,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 5.0,
        observer: ServiceObserver | None = None,
        set_aside: SetAsideLetter = no_dead_letters,
    ) -> None:
        self.tracking_uri = tracking_uri.rstrip("/")
        self.experiment = experiment
        self.experiment_id: str | None = None
        self.trace_wait_s = trace_wait_s
        self.updated = 0
        self._source_types = dict(source_types or {})
        self._in_flight = asyncio.Semaphore(max_concurrency)
        self._auth = dict(headers or {})
        self._resolving: asyncio.Task[None] | None = None
        url = self.tracking_uri + ASSESSMENTS_PATH
        super().__init__(
            "mlflow",
            url,
            item=self._assessment,
            payload=lambda assessments: assessments[0].create_request,  # one per request: see send
            classify=StatusClassifier(
                credentials=lambda answer: (
                    f"MLflow at {self.tracking_uri} refuses the credentials (HTTP {answer.status}): set "
                    "MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
                    "exporters.mlflow.token, username, password) to credentials of that server"
                ),
                no_api=lambda answer: (
                    f"no MLflow tracking API at {self.tracking_uri} (HTTP {answer.status}: {_error(answer)[1]}): "
                    "check exporters.mlflow.tracking_uri (MLFLOW_TRACKING_URI); assessments need MLflow 3"
                ),
                hooks=(_trace_not_there, _refused_with_words),
            ),
            describe=_describe,
            rules=DeliveryRules(
                batch_size=batch_size,
                max_pending=max_pending,
                backoff_base_s=backoff_base_s,
                backoff_max_s=backoff_max_s,
                drop_reasons=DROP_REASONS,
                wait=WaitRule(
                    reason="trace_not_found",
                    max_wait_s=trace_wait_s,
                    waiting_for="traces MLflow does not have yet",
                    setting="exporters.mlflow.trace_wait_s",
                    advice="the score is in the other exporters. Is the Collector sending this service's traces to "
                    "MLflow's /v1/traces with the experiment's x-mlflow-experiment-id header (its pipeline to MLflow, "
                    "its sampling)?",
                ),
            ),
            wording=Wording("assessments", "stored in MLflow"),
            destination=f"MLflow at {self.tracking_uri}",
            log=log,
            headers=self._auth,
            timeout_s=timeout_s,
            observer=observer,
            set_aside=lambda assessment, reason, detail: set_aside(_letter(assessment), reason, detail),
            set_aside_checkpointed=is_checkpointed(set_aside),
        )

    def __repr__(self) -> str:  # never the credentials
        return f"MlflowAssessmentSink(tracking_uri={self.tracking_uri!r})"

    @property
    def waiting_for_traces(self) -> int:
        return self._queue.waiting

    def _assessment(self, run: ScoredRun) -> Assessment | None:
        return mlflow_assessment(run, self._source_types.get(run.scorer_id))

    # -- start: the experiment, found or created in the background (assessments do not wait for it) ------------
    async def start(self) -> None:
        await super().start()
        if self.experiment is not None and self._resolving is None:
            self._resolving = asyncio.create_task(self._resolve(self.experiment), name="mlflow-experiment")

    async def _resolve(self, experiment: ExperimentRef) -> None:
        self.experiment_id = await resolve_experiment(self.tracking_uri, experiment, self._auth, self.timeout_s)
        log.info(
            "exporters.mlflow: scores go to MLflow at %s as assessments on the traces they score; the agents' "
            "traces go to experiment %s (id %s): send them to %s/v1/traces with the header "
            "x-mlflow-experiment-id: %s (docs/mlflow.md)",
            self.tracking_uri,
            experiment.describe(),
            self.experiment_id,
            self.tracking_uri,
            self.experiment_id,
        )

    async def close(self, timeout_s: float = 5.0) -> None:
        resolving, self._resolving = self._resolving, None
        if resolving is not None and not resolving.done():
            resolving.cancel()
            await asyncio.gather(resolving, return_exceptions=True)
        await super().close(timeout_s)

    # -- the transport: one request per assessment, a duplicate updated in place -------------------------------
    async def send(self, batch: Sequence[Entry[Assessment]], settle: Settle[Assessment]) -> None:
        await asyncio.gather(*(self._send_one(entry, settle) for entry in batch))

    async def _send_one(self, entry: Entry[Assessment], settle: Settle[Assessment]) -> None:
        assessment = entry.value
        async with self._in_flight:
            url = self.tracking_uri + ASSESSMENTS_PATH.format(trace_id=assessment.trace_id)
            answer = await self.post(assessment.create_request, url)
            if isinstance(answer, HttpAnswer) and answer.status == 500 and _DUPLICATE.search(answer.text):
                answer = await self._update(assessment, url)
        verdict = answer if isinstance(answer, Outcome) else self.classify(answer, [assessment])
        settle([entry], self.outcome_of(verdict))

    async def _update(self, assessment: Assessment, url: str) -> HttpAnswer | Outcome:
        """MLflow holds this assessment already (delivered before): update it in place."""
        answer = await self.request("PATCH", f"{url}/{assessment.assessment_id}", assessment.update_request)
        if isinstance(answer, Outcome):
            return answer
        if 200 <= answer.status < 300:
            self.updated += 1
            return CONFIRMED
        if answer.status == 404 and _error(answer)[0] == "RESOURCE_DOES_NOT_EXIST":
            # Not ours after all: the create broke another constraint, and would again.
            return rejected(
                f"HTTP 500 on create (a constraint violation) and no assessment of that id: {_error(answer)[1]}"
            )
        return answer


def _letter(assessment: Assessment) -> DeadLetter:
    payload: dict[str, Any] = assessment.create_request
    return DeadLetter("mlflow", assessment.score_id, assessment.key, json.dumps(payload).encode())
