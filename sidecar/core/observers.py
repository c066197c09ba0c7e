"""What the service reports as it works: one event stream, any number of listeners.

The service, the judge clients and the judge gates emit what happened (a record consumed, a run
finished, a judge call ended, a judge's state changed) to a ``ServiceObserver`` and know nothing of who
listens, as an OpenTelemetry ``SpanProcessor`` receives spans without the tracer knowing it. The Prometheus
metrics, the demo's summary and ``eval``'s table are observers. ``Observers`` fans one stream out to many.

Rules for observers: every method runs on the event loop, in the middle of the service's work, so it must
be quick, must not block and must not raise (``Observers`` logs and skips a listener that raises, so one
broken listener cannot stop the others or the service). Override only what you listen to: the base
class ignores everything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from sidecar.core.runs import ReadyReason, SessionCloseReason
from sidecar.core.scored import ScoredRun
from sidecar.scoring.agreement import AgreementStats
from sidecar.scoring.judge.errors import ShedReason
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall

__all__ = [
    "ContentWaitOutcome",
    "FeedbackOutcome",
    "IngestSkipReason",
    "JudgePauseReason",
    "JudgeState",
    "LimitName",
    "LogContentOutcome",
    "Observers",
    "ServiceObserver",
    "SessionTurnOutcome",
    "SkipOutcome",
]

log = logging.getLogger(__name__)

# Candidate runs that never ran: not selected, sampled out, over the size limit, shed at a spend cap.
SkipOutcome = Literal["filtered", "sampled_out", "shed", "too_large"]
# Spans set aside at ingest, before any scorer: the sidecar's own, filtered, sampled out, without content, and spans
# that look like LLM or agent spans but that no rule recognises (a convention the sidecar does not read).
IngestSkipReason = Literal["internal", "filtered", "sampled_out", "no_content", "unrecognised"]
# What became of the content of an LLM call sent as OTLP log events (kafka.log_topics): laid on its span, let go after
# join_wait_s without its span (or its span came before and went on), let go at the join's bytes bound, written
# outside any span (no trace or span id), or of a trace every scorer samples out.
LogContentOutcome = Literal["joined", "expired", "evicted", "no_span", "sampled_out"]
# What became of an LLM call span without content of its own that waited for its content from the logs topics: the
# content holding its answer came, join_wait_s passed first (it goes on as it is), or the join's bytes bound.
ContentWaitOutcome = Literal["joined", "timed_out", "evicted"]
# A judge gate's states: calls flow (closed), held after faults (open), one probe call in flight (half_open),
# held until a re-check passes after an auth, quota or model error (paused).
JudgeState = Literal["closed", "open", "half_open", "paused"]
# Why a gate is paused: the judge answered 401, 402 or insufficient_quota, 403, 404.
JudgePauseReason = Literal["authentication", "payment_required", "permission_denied", "not_found"]
# What became of a conversation's turn (scope: session): published to the internal topic by stage 1, or not
# (its trace names no conversation; every session scorer samples its conversation out); read by stage 2 and
# buffered, a copy of a turn already buffered or scored, or late (its window was already scored: it opens a
# new one).
SessionTurnOutcome = Literal["published", "no_conversation", "sampled_out", "buffered", "duplicate", "late"]
# The bounds on traced input whose crossing is counted (docs/limits.md): a dead letter cut to what the producer may
# send, an agent name too long for a label, an agent past max_agent_labels, a record's runs past
# max_runs_per_record.
LimitName = Literal["dead_letter_bytes", "agent_label_chars", "agent_labels", "runs_per_record"]
# What became of a feedback record (docs/feedback.md): it met its score (paired), waits for it (held), was met before
# (duplicate: a redelivery, or the same label sent twice), came after hold_s (unmatched), or cannot be used (invalid:
# a dead letter).
FeedbackOutcome = Literal["paired", "held", "duplicate", "unmatched", "invalid"]


class ServiceObserver:
    """Listens to the service. Every method is a no-op here; override what you need."""

    # -- ingest ------------------------------------------------------------------------------------------
    def record_consumed(self, topic: str, spans_seen: int) -> None:
        """A Kafka record was consumed and decoded (``spans_seen`` spans; 0 when it could not be decoded)."""

    def record_sampled_out(self, topic: str) -> None:
        """A record whose key names a trace that every scorer samples out was done without being decoded."""

    def spans_skipped(self, reason: IngestSkipReason, n: int) -> None:
        """``n`` spans of a record were set aside at ingest, before any scorer saw them."""

    def dead_lettered(self, reason: str, n: int = 1) -> None:
        """``n`` dead letters went to the dead-letter topic (``reason``: a ``DeadLetterReason`` value)."""

    def dead_letter_refused(self, reason: str, n: int = 1) -> None:
        """The broker (or the producer) refused ``n`` dead letters for good: each logged at ERROR, its record
        committed without it rather than blocking its partition."""

    def limit_hit(self, limit: LimitName, n: int = 1) -> None:
        """A bound on traced input was hit ``n`` times (docs/limits.md); what crossed it was cut or set aside."""

    def consumer_lag(self, topic: str, partition: int, lag: int | None) -> None:
        """Records between the committed offset and the high watermark; ``None``: the partition was revoked."""

    # -- content from the logs topics (kafka.log_topics) ---------------------------------------------------
    def log_content(self, outcome: LogContentOutcome, n: int = 1) -> None:
        """``n`` spans' content read from log records met ``outcome``."""

    def content_waits(self, outcome: ContentWaitOutcome, n: int = 1) -> None:
        """``n`` LLM call spans that waited for their content from the logs topics met ``outcome``."""

    def content_join_held(self, records: int, held_bytes: int) -> None:
        """Span records waiting for content, and the bytes the join holds (records and content), after a change."""

    # -- whole traces (scope: trace) ---------------------------------------------------------------------
    def trace_buffer(self, traces: int, span_bytes: int) -> None:
        """Traces waiting to be done, and their spans' bytes, after every change."""

    def trace_ready(self, reason: ReadyReason, waited_s: float) -> None:
        """A buffered trace was taken out to be scored, ``waited_s`` after its first span arrived."""

    def late_spans(self, scorer: str, n: int) -> None:
        """``n`` spans arrived for a trace that ``scorer`` (a trace-scope scorer) had already scored."""

    # -- conversations (scope: session) -------------------------------------------------------------------
    def session_turns(self, outcome: SessionTurnOutcome, n: int = 1) -> None:
        """``n`` turns of conversations met ``outcome``."""

    def session_buffer(self, sessions: int, turn_bytes: int) -> None:
        """Windows of conversations open (or closed, waiting for their runs), and their turns' bytes."""

    def session_closed(self, reason: SessionCloseReason, turns: int) -> None:
        """A conversation's window closed (and its runs start), with ``turns`` turns."""

    def session_restored(self, topic: str, partition: int, seconds: float, records: int) -> None:
        """A partition of the internal topic was read from the beginning after its assignment: its open windows
        are rebuilt from ``records`` records (turns, markers, tombstones), ``seconds`` after the assignment."""

    # -- human feedback and the judge canary (docs/feedback.md) ------------------------------------------
    def feedback_received(self, outcome: FeedbackOutcome) -> None:
        """A feedback record was read."""

    def feedback_paired(self, scorer: str, agreed: bool) -> None:
        """A feedback met the score of its subject by ``scorer``; whether judge and person agree."""

    def feedback_unmatched(self, scorer: str, n: int) -> None:
        """``n`` feedback records for ``scorer`` expired (``feedback.hold_s``, or ``max_held``) without their score."""

    def feedback_held(self, feedback: int, scores: int) -> None:
        """Feedback records waiting for their score, and scores held for feedback, after a change."""

    def judge_human_agreement(self, scorer: str, stats: AgreementStats) -> None:
        """The statistics of ``scorer``'s last ``feedback.window`` pairs changed."""

    def canary_finished(
        self, scorer: str, stats: AgreementStats, mean_score: float | None, failed: int, baseline: float | None
    ) -> None:
        """A round of ``scorer``'s canary ended: its labelled set scored by the live judge (``failed`` items without a
        score), compared with the labels; ``mean_score`` on 0–1; ``baseline``: the agreement it is held to (the
        configured one, else the first this process measured)."""

    # -- runs --------------------------------------------------------------------------------------------
    def runs_skipped(
        self,
        scorer: str,
        agent: str,
        outcome: SkipOutcome,
        n: int,
        *,
        judge: str = "",
        shed_reason: ShedReason = "spend_cap",
    ) -> None:
        """Candidate runs that never ran (``scorer`` ``""`` when the skip is not per scorer); for ``shed``, the
        judge whose gate refused and why (``run`` sheds only at a spend cap: judge faults hold)."""

    def run_finished(self, run: ScoredRun) -> None:
        """A run ended (scored, failed or not scorable), before it is handed to the sinks."""

    def runs_in_flight(self, n: int) -> None:
        """Runs started and not finished, after every change."""

    # -- judges ------------------------------------------------------------------------------------------
    def judge_call_finished(self, model: JudgeModel, request: ChatRequest, call: JudgeCall) -> None:
        """One judge HTTP call ended, whatever its outcome and whatever becomes of its run."""

    def judge_structured_output(self, judge: str, shape: str) -> None:
        """The structured-output shape a judge's calls use is known: its setting, or what ``auto`` learnt."""

    def judge_state_changed(self, judge: str, state: JudgeState) -> None:
        """A judge's gate changed state."""

    def judge_spend(self, judge: str, spent_usd: float, cap_usd: float | None) -> None:
        """Estimated spend of a judge within its spend-cap window changed."""

    def judge_hold_ended(self, judge: str, seconds: float) -> None:
        """A call stopped waiting for its judge to recover, after ``seconds``."""

    def judge_refused(self, judge: str, reason: ShedReason) -> None:
        """A judge's gate refused a call: over the spend cap with ``on_spend_cap: shed``, or (``eval``, whose
        holds are bounded) a judge still open or paused when the bound ran out."""

    def redacted(self, judge: str, counts: Mapping[str, int]) -> None:
        """Personal data was taken out of a run before the judge named ``judge`` (its key under ``judges``) read it:
        values replaced, by entity. Never the values themselves."""

    # -- exporters ---------------------------------------------------------------------------------------
    def exporter_flushed(self, name: str, *, confirmed: bool, up: bool) -> None:
        """One checkpoint flush of a sink: whether it confirmed its exports, and the runtime's verdict on it."""

    def exporter_dropped(self, name: str, reason: str, n: int = 1) -> None:
        """A sink gave up on ``n`` items, each logged with its score id: the destination can never take them
        (``rejected``), or the span they attach to never reached it (``span_not_found``)."""


class Observers(ServiceObserver):
    """Fans every event out to each observer in turn; a listener that raises is logged and skipped.

    Each event is bound once, when the fan-out is built, to what its listeners need: nothing (an event nobody
    overrides costs one call of a no-op), the one listener's method guarded by a ``try``, or a loop over several.
    Every record and run emits several events, so a per-call lookup of who listens would cost more than listening."""

    def __init__(self, observers: Iterable[ServiceObserver] = ()) -> None:
        self._observers = tuple(observers)
        for event in _EVENTS:
            setattr(self, event, _fan_out(event, _listening(self._observers, event)))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._observers)

    def with_observer(self, observer: ServiceObserver) -> Observers:
        return Observers((*self._observers, observer))


def _listening(
    observers: Iterable[ServiceObserver], method: str
) -> tuple[tuple[ServiceObserver, Callable[..., None]], ...]:
    """The observers whose ``method`` does something (not the base class's no-op), each with it bound."""
    ignored = getattr(ServiceObserver, method)
    return tuple(
        (observer, getattr(observer, method))
        for observer in observers
        if getattr(type(observer), method, ignored) is not ignored or method in getattr(observer, "__dict__", {})
    )


# Every event a ServiceObserver hears (its public methods).
_EVENTS: tuple[str, ...] = tuple(
    name for name, value in vars(ServiceObserver).items() if not name.startswith("_") and callable(value)
)


def _ignore(*args: object, **kwargs: object) -> None:
    return None


def _fan_out(method: str, listeners: tuple[tuple[ServiceObserver, Callable[..., None]], ...]) -> Callable[..., None]:
    if not listeners:
        return _ignore
    if len(listeners) == 1:
        [(observer, listener)] = listeners

        def one(*args: object, **kwargs: object) -> None:
            try:
                listener(*args, **kwargs)
            except Exception:
                log.exception("observer %s failed on %s", type(observer).__name__, method)

        return one

    def every(*args: object, **kwargs: object) -> None:
        for observer, listener in listeners:
            try:
                listener(*args, **kwargs)
            except Exception:
                log.exception("observer %s failed on %s", type(observer).__name__, method)

    return every
