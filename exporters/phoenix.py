"""Scores as Arize Phoenix span and session annotations, over Phoenix's REST API (docs/phoenix.md).

:func:`span_annotation` is the format: one annotation per scored run, on the scored span. Its name is the
scorer id, its annotator kind ``LLM`` (a judged scorer) or ``CODE``, its result the score and the reason as
explanation, its metadata the score id, the scorer's fingerprint, the judge models, tokens and cost. Its
``identifier`` is the deterministic score id, and Phoenix keeps one annotation per (name, span,
identifier): a redelivered run updates the annotation instead of adding one.

A run of a whole conversation (``scope: session``) is a **session annotation** instead
(:func:`session_annotation`, ``POST /v1/session_annotations``): the same fields on the session whose id is the
conversation id (Phoenix files traces under the ``session.id`` attribute, and maps ``gen_ai.conversation.id``
to it), with the window's turns in its metadata; Phoenix keeps one per (name, session, identifier).

:class:`PhoenixAnnotationSink` is the exporter: an ``exporters.delivery.HttpBatchSink`` (the delivery
rules of every sink: bounded, batched, flushed to a watermark, ``Retry-After`` honoured) whose endpoint is
``POST /v1/span_annotations?sync=true`` (``/v1/session_annotations`` for session runs; a batch holding both is
one request per endpoint), so that Phoenix answers only once the annotations are stored (its
default, asynchronous mode answers 200 before anything is stored, and silently drops an annotation whose
span it does not know). Failed batches are sent again after a backoff and at every flush; a 401/403 (the
API key) or a 404 that is not about spans or a 405 (no Phoenix REST API at that URL) is the sink's
``problem`` (``/readyz``); an annotation Phoenix rejects for good (400, 413, 422: Phoenix says why) is found
alone, logged with its score id and Phoenix's reason, counted (``rejected``), set aside on the score
dead-letter topic (``exporters.dead_letters``) and not retried.

A span Phoenix does not know yet (the trace reaches Phoenix after the score, or never): Phoenix answers 404
naming the span ids (a session it does not know: the session ids, and the same rule). Those annotations wait,
and are tried again with a short backoff, for up to ``span_wait_s`` after the first such answer (default 300
s, the OpenTelemetry Collector's own retry limit for an export, so spans a Collector is still retrying into a
restarted Phoenix are waited for). Meanwhile they are unconfirmed: records after them are not committed (a
flush waits for them within its timeout, so a trace a few seconds late costs nothing). Past ``span_wait_s``
the annotation is dropped with an ERROR line naming the span and score, and counted (``span_not_found``): the
score stays in Kafka and on the OTLP spans. The other annotations of a batch with an unknown span are sent
again at once.

The API key goes in an ``Authorization: Bearer`` header and is never logged. The ``exporters.phoenix``
block (:class:`PhoenixExporterSettings`) and the exporter's declaration close the module.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import InitErrorDetails

from exporters.delivery import (
    DeliveryRules,
    HttpAnswer,
    HttpBatchSink,
    SetAsideLetter,
    StatusClassifier,
    Verdict,
    WaitRule,
    Wording,
    is_checkpointed,
    json_letters,
    no_dead_letters,
    wait,
)
from exporters.registry import ExporterContext, SettingsView, exporter_kind
from exporters.score_facts import clip, judge_facts
from sidecar import __version__
from sidecar.core import ScoredRun
from sidecar.core.config import FrozenConfig, config_problem, empty_is_unset, raise_problems, secret_value
from sidecar.core.observers import ServiceObserver

__all__ = [
    "ANNOTATIONS_PATH",
    "DROP_REASONS",
    "MAX_EXPLANATION_CHARS",
    "PHOENIX_API_KEY_ENV",
    "PHOENIX_RESERVED_ANNOTATION_NAME",
    "SESSION_ANNOTATIONS_PATH",
    "AnnotatorKind",
    "PhoenixAnnotationSink",
    "PhoenixExporterSettings",
    "session_annotation",
    "span_annotation",
]

log = logging.getLogger(__name__)

ANNOTATIONS_PATH: Final = "/v1/span_annotations"
SESSION_ANNOTATIONS_PATH: Final = "/v1/session_annotations"
MAX_EXPLANATION_CHARS: Final = 4096
AnnotatorKind = Literal["LLM", "CODE"]
DropReason = Literal["rejected", "span_not_found"]
DROP_REASONS: Final[tuple[DropReason, ...]] = ("rejected", "span_not_found")
PHOENIX_API_KEY_ENV: Final = "PHOENIX_API_KEY"
PHOENIX_RESERVED_ANNOTATION_NAME: Final = "note"  # POST /v1/span_annotations answers 400 for it

# Phoenix's answer to a sync insert naming spans it does not have (its phoenix/server/api/routers/v1/spans.py),
# or sessions (sessions.py; a session id is the application's own string, so anything up to " do not exist").
_MISSING_SPANS = re.compile(r"Spans with IDs (?P<ids>[0-9a-fA-F, ]+) do not exist")
_MISSING_SESSIONS = re.compile(r"Sessions with IDs (?P<ids>.+) do not exist")


def span_annotation(run: ScoredRun, annotator_kind: AnnotatorKind | None = None) -> dict[str, Any] | None:
    """The run's annotation as Phoenix's ``SpanAnnotationData`` JSON, or ``None`` for a run without a score
    (failed, not scorable: those are in the OTLP spans and the metrics). ``annotator_kind`` ``None``: ``LLM``
    when the run called a judge, else ``CODE``."""
    body = _annotation_body(run, annotator_kind)
    return None if body is None else {"span_id": run.request.target.span_id, **body}


def session_annotation(run: ScoredRun, annotator_kind: AnnotatorKind | None = None) -> dict[str, Any] | None:
    """A session run's score as Phoenix's ``SessionAnnotationData`` JSON: on the session named by the
    conversation id, the window in its metadata (its turns' trace ids, its start, why it closed). ``None`` for
    a run without a score, or one that is not a session's."""
    window = run.request.session
    body = _annotation_body(run, annotator_kind)
    if window is None or body is None:
        return None
    body["metadata"].update(
        conversation_id=window.conversation_id,
        turns=len(window.turns),
        turn_trace_ids=[turn.trace_id for turn in window.turns],
        window_start_unix_nano=window.start_unix_nano,
        close_reason=window.close_reason,
        complete=window.complete,
        last_turn_span_id=run.request.target.span_id,
    )
    return {"session_id": window.conversation_id, **body}


def _annotation_body(run: ScoredRun, annotator_kind: AnnotatorKind | None) -> dict[str, Any] | None:
    """What span and session annotations share: name, annotator kind, identifier, result and metadata."""
    result = run.result
    if run.outcome != "scored" or result is None or result.score is None or not math.isfinite(result.score):
        return None
    target = run.request.target
    outcome: dict[str, Any] = {"score": float(result.score)}
    if result.reason:
        outcome["explanation"] = clip(result.reason, MAX_EXPLANATION_CHARS)
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
    facts = judge_facts(run)
    if facts is not None:
        metadata.update(facts.metadata())
    kind: AnnotatorKind = annotator_kind or ("LLM" if facts is not None else "CODE")
    return {
        "name": run.scorer_id,
        "annotator_kind": kind,
        "identifier": run.score_id,
        "result": outcome,
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }


@dataclass(frozen=True, slots=True)
class _Annotation:
    body: dict[str, Any]
    score_id: str
    on: Literal["span", "session"]
    target_id: str  # the span id, or the session (conversation) id
    key: bytes  # of its dead letter, were it set aside: the score record's key (trace id, or conversation id)


def _describe(annotation: _Annotation) -> str:
    return f"Phoenix annotation {annotation.score_id} on {annotation.on} {annotation.target_id}"


def _payload(annotations: list[_Annotation]) -> dict[str, Any]:
    return {"data": [annotation.body for annotation in annotations]}


def _missing_spans(answer: HttpAnswer, annotations: Sequence[_Annotation]) -> Verdict | None:
    """Phoenix's 404 naming spans (or sessions) it does not have (yet): those annotations wait, the others go
    again."""
    if answer.status != 404:
        return None
    if (match := _MISSING_SPANS.search(answer.text)) is not None:
        on, missing = "span", "no span in Phoenix"
        ids = frozenset(s.strip().lower() for s in match["ids"].split(",") if s.strip())
    elif (match := _MISSING_SESSIONS.search(answer.text)) is not None:
        on, missing = "session", "no session in Phoenix"
        ids = frozenset(match["ids"].split(", "))  # Phoenix joins the ids with ", "
    else:
        return None
    key = str.lower if on == "span" else str
    waiting = frozenset(i for i, a in enumerate(annotations) if a.on == on and key(a.target_id) in ids)
    return wait(waiting, missing)


class PhoenixAnnotationSink(HttpBatchSink[_Annotation]):
    """A :class:`~sidecar.core.Sink` writing scores as Phoenix span annotations (see the module doc).

    ``base_url``: Phoenix's address (``http://phoenix:6006``; the REST API is under ``/v1``). ``api_key``:
    sent as a bearer token when set. ``annotator_kinds``: per scorer id, ``LLM`` or ``CODE`` (the scorer's
    kind; runs of other scorers: ``LLM`` when they called a judge). ``observer`` hears of dropped
    annotations (``exporter_dropped``).

    Counters for tests and metrics: ``stored`` (annotations confirmed), ``failed_attempts``, ``dropped``
    (by reason), ``ignored`` (runs without a score), ``last_error``, ``waiting_for_spans``.
    """

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
        set_aside: SetAsideLetter = no_dead_letters,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.batch_size = batch_size
        self.max_pending = max_pending
        self.span_wait_s = span_wait_s
        self._kinds = dict(annotator_kinds or {})
        url = self.base_url + ANNOTATIONS_PATH
        super().__init__(
            "phoenix",
            url,
            item=self._annotation,
            payload=_payload,
            classify=StatusClassifier(
                credentials=lambda answer: (
                    f"Phoenix at {self.base_url} refuses the API key (HTTP {answer.status}): set "
                    f"{PHOENIX_API_KEY_ENV} (or exporters.phoenix.api_key) to a key of that Phoenix"
                ),
                no_api=lambda answer: (
                    f"no Phoenix REST API at {url} (HTTP {answer.status}): check exporters.phoenix.base_url"
                ),
                hooks=(_missing_spans,),
            ),
            describe=_describe,
            rules=DeliveryRules(
                batch_size=batch_size,
                max_pending=max_pending,
                backoff_base_s=backoff_base_s,
                backoff_max_s=backoff_max_s,
                drop_reasons=DROP_REASONS,
                wait=WaitRule(
                    reason="span_not_found",
                    max_wait_s=span_wait_s,
                    waiting_for="spans Phoenix does not have yet",
                    setting="exporters.phoenix.span_wait_s",
                    advice="the score is in the other exporters. Is the Collector sending this service's traces "
                    "to Phoenix (its pipeline to Phoenix, its sampling)?",
                ),
            ),
            wording=Wording("annotations", "stored in Phoenix"),
            destination=f"Phoenix at {self.base_url}",
            log=log,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            params={"sync": "true"},
            timeout_s=timeout_s,
            observer=observer,
            set_aside=json_letters("phoenix", set_aside, lambda annotation: annotation.body),
            set_aside_checkpointed=is_checkpointed(set_aside),
            url_of=self._url_of,
        )

    def __repr__(self) -> str:  # never the key
        return f"PhoenixAnnotationSink(base_url={self.base_url!r})"

    def _annotation(self, run: ScoredRun) -> _Annotation | None:
        kind = self._kinds.get(run.scorer_id)
        window = run.request.session
        key = run.request.record_key
        if window is not None:
            body = session_annotation(run, kind)
            return None if body is None else _Annotation(body, run.score_id, "session", window.conversation_id, key)
        body = span_annotation(run, kind)
        return None if body is None else _Annotation(body, run.score_id, "span", run.request.target.span_id, key)

    def _url_of(self, annotation: _Annotation) -> str:
        return self.base_url + (SESSION_ANNOTATIONS_PATH if annotation.on == "session" else ANNOTATIONS_PATH)

    @property
    def waiting_for_spans(self) -> int:
        return self._queue.waiting


# -- the exporters.phoenix block and the exporter's declaration -------------------------------------------------


class PhoenixExporterSettings(FrozenConfig):
    """Scores as Arize Phoenix span annotations (REST API). Enabled when a base URL is set."""

    enabled: bool | None = None  # None: enabled iff base_url is set
    base_url: str | None = None  # Phoenix's address, e.g. http://phoenix:6006 (the REST API is under /v1)
    api_key: SecretStr | None = None  # unset: the PHOENIX_API_KEY environment variable, if any
    batch_size: int = Field(default=100, ge=1, le=1000)  # annotations per request
    timeout_s: float = Field(default=10.0, gt=0)  # one request
    max_pending: int = Field(default=10_000, ge=1)  # unconfirmed annotations held before runs wait
    # How long an annotation waits for its span to reach Phoenix (the trace may arrive after the score),
    # from Phoenix's first "no such span": then it is dropped, logged and counted.
    span_wait_s: float = Field(default=300.0, ge=0)

    _unset = field_validator("base_url", "api_key", mode="before")(empty_is_unset)

    @model_validator(mode="after")
    def _base_url_when_enabled(self) -> PhoenixExporterSettings:
        if self.enabled and not self.base_url:
            raise_problems(type(self), [config_problem(("base_url",), "required when the Phoenix exporter is enabled")])
        if self.base_url is not None and not re.match(r"^https?://[^/]", self.base_url):
            raise_problems(type(self), [config_problem(("base_url",), "must start with http:// or https://")])
        return self

    @property
    def is_enabled(self) -> bool:
        return bool(self.base_url) if self.enabled is None else self.enabled

    def api_key_value(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The key in clear (the setting, else ``PHOENIX_API_KEY``), for the exporter. Never log it."""
        return secret_value(self.api_key, PHOENIX_API_KEY_ENV, environ) or None


def _reserved_names(block: PhoenixExporterSettings, view: SettingsView) -> Iterable[InitErrorDetails]:
    if not block.is_enabled:
        return
    for i, scorer_id in enumerate(view.scorer_ids):
        if scorer_id == PHOENIX_RESERVED_ANNOTATION_NAME:
            yield config_problem(
                ("scorers", i, "id"), "Phoenix reserves the annotation name 'note' for notes: rename the scorer"
            )


@exporter_kind(
    name="phoenix",
    settings=PhoenixExporterSettings,
    description="scores as Arize Phoenix span annotations",
    drop_reasons=DROP_REASONS,
    check=_reserved_names,
)
def build_phoenix_sink(block: PhoenixExporterSettings, context: ExporterContext) -> PhoenixAnnotationSink | None:
    if not (block.is_enabled and block.base_url):
        return None
    return PhoenixAnnotationSink(
        block.base_url,
        api_key=block.api_key_value(),
        annotator_kinds={scorer: "LLM" if judged else "CODE" for scorer, judged in context.judged.items()},
        batch_size=block.batch_size,
        timeout_s=block.timeout_s,
        max_pending=block.max_pending,
        span_wait_s=block.span_wait_s,
        observer=context.observer,
        set_aside=context.set_aside,
    )
