"""The metrics' fixed label values and buckets, and how a judge and a score become a label and a value.

Each fixed set of label values is read from where its names are declared, next to the code that emits
them: run outcomes (``sidecar.core.scored``), skip outcomes, ingest skips and the judge gate's states and
pause reasons (``sidecar.core.observers``), trace readiness (``sidecar.core.runs``), dead-letter reasons
(``sidecar.core.deadletters``), judge call outcomes (``sidecar.scoring.types``), shed reasons
(``sidecar.scoring.judge.errors``). A name added there is a series here, with no second list to keep in
step. Token types are the metrics' own names for the fields of a judge call's usage.
"""

from __future__ import annotations

import math
from typing import Final, Literal, get_args

from sidecar.core.deadletters import DeadLetterReason
from sidecar.core.observers import (
    ContentWaitOutcome,
    IngestSkipReason,
    JudgePauseReason,
    JudgeState,
    LimitName,
    LogContentOutcome,
    SessionTurnOutcome,
    SkipOutcome,
)
from sidecar.core.runs import ReadyReason, SessionCloseReason
from sidecar.core.scored import RunOutcome
from sidecar.scoring.judge.errors import ShedReason
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.judge.negotiation import SHAPES
from sidecar.scoring.types import JudgeCallOutcome

__all__ = [
    "CONTENT_WAIT_OUTCOMES",
    "DEAD_LETTER_REASONS",
    "JUDGE_CALL_DURATION_BUCKETS",
    "JUDGE_CALL_OUTCOMES",
    "JUDGE_PAUSE_REASONS",
    "JUDGE_STATES",
    "LIMITS",
    "LOG_CONTENT_OUTCOMES",
    "PREFIX",
    "RUN_OUTCOMES",
    "SCORE_BUCKETS",
    "SCORE_LATENCY_BUCKETS",
    "SESSION_CLOSE_REASONS",
    "SESSION_DELAY_BUCKETS",
    "SESSION_RESTORE_BUCKETS",
    "SESSION_TURNS_BUCKETS",
    "SESSION_TURN_OUTCOMES",
    "SHED_REASONS",
    "SKIP_OUTCOMES",
    "SPAN_SKIP_REASONS",
    "TOKEN_TYPES",
    "TRACE_READY_REASONS",
    "TRACE_WAIT_BUCKETS",
    "USAGE_FIELDS",
    "ScorerOutcome",
    "TokenType",
    "check_label",
    "check_scale",
    "judge_model_label",
    "normalise_score",
]

PREFIX: Final = "scoring_sidecar"

# The ``outcome`` of scorer_runs_total: how a run ended, or why a candidate run never ran.
ScorerOutcome = Literal[RunOutcome, SkipOutcome]
TokenType = Literal["input", "output", "reasoning", "cached_input", "cache_creation"]

RUN_OUTCOMES: Final[tuple[str, ...]] = get_args(ScorerOutcome)
SKIP_OUTCOMES: Final[tuple[str, ...]] = get_args(SkipOutcome)
SHED_REASONS: Final[tuple[str, ...]] = get_args(ShedReason)
JUDGE_STATES: Final[tuple[str, ...]] = get_args(JudgeState)
JUDGE_PAUSE_REASONS: Final[tuple[str, ...]] = get_args(JudgePauseReason)
JUDGE_CALL_OUTCOMES: Final[tuple[str, ...]] = get_args(JudgeCallOutcome)
STRUCTURED_OUTPUT_SHAPES: Final[tuple[str, ...]] = SHAPES
TOKEN_TYPES: Final[tuple[str, ...]] = get_args(TokenType)
# Spans set aside at ingest (not scorer outcomes: internal and no_content never reach scorers).
SPAN_SKIP_REASONS: Final[tuple[str, ...]] = get_args(IngestSkipReason)
TRACE_READY_REASONS: Final[tuple[str, ...]] = get_args(ReadyReason)
LOG_CONTENT_OUTCOMES: Final[tuple[str, ...]] = get_args(LogContentOutcome)
CONTENT_WAIT_OUTCOMES: Final[tuple[str, ...]] = get_args(ContentWaitOutcome)
SESSION_TURN_OUTCOMES: Final[tuple[str, ...]] = get_args(SessionTurnOutcome)
SESSION_CLOSE_REASONS: Final[tuple[str, ...]] = get_args(SessionCloseReason)
DEAD_LETTER_REASONS: Final[tuple[str, ...]] = tuple(reason.value for reason in DeadLetterReason)
LIMITS: Final[tuple[str, ...]] = get_args(LimitName)

# JudgeUsage field → the ``type`` label.
USAGE_FIELDS: Final[tuple[tuple[str, TokenType], ...]] = (
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("reasoning_tokens", "reasoning"),
    ("cached_input_tokens", "cached_input"),
    ("cache_creation_input_tokens", "cache_creation"),
)

SCORE_BUCKETS: Final[tuple[float, ...]] = tuple(round(i / 10, 1) for i in range(1, 11))
# OTel GenAI semantic conventions, gen_ai.client.operation.duration (explicit bucket advice).
JUDGE_CALL_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
# Span end → score export: from a fast in-memory path (50 ms) to a backlog of ten minutes.
SCORE_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
# First span → trace ready: idle_s (a few seconds) plus the trace's own length, up to max_wait_s.
TRACE_WAIT_BUCKETS: Final[tuple[float, ...]] = (1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Turns per closed window: up to sessions.max_turns (50 by default).
SESSION_TURNS_BUCKETS: Final[tuple[float, ...]] = (1, 2, 3, 5, 10, 20, 50)
# Last turn's end → its conversation's score: idle_s (15 min by default; seconds in tests and demos) plus the
# trace's own readiness and the judge, up to max_duration_s.
SESSION_DELAY_BUCKETS: Final[tuple[float, ...]] = (
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    600.0,
    900.0,
    1200.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    21600.0,
)
# An assigned partition of the internal topic read from its beginning.
SESSION_RESTORE_BUCKETS: Final[tuple[float, ...]] = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def judge_model_label(model: JudgeModel | str, provider: str | None = None) -> str:
    """The ``judge_model`` label: ``<provider>/<model>``, i.e. ``JudgeModel.litellm_model``.

    Executions record provider and model id separately; the runtime knows a ``JudgeModel``. Both map
    to the same value, so token, call and pause series of one judge join on the label.
    """
    if isinstance(model, JudgeModel):
        return model.litellm_model
    return f"{provider}/{model}" if provider else model


def normalise_score(score: float, scale: float = 1.0) -> float | None:
    """``score / scale`` clamped to [0, 1]; ``None`` for a non-finite score (nothing to observe)."""
    if not math.isfinite(score):
        return None
    return min(1.0, max(0.0, score / scale))


def check_scale(scale: float) -> float:
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"a score scale must be a finite number > 0, got {scale!r}")
    return float(scale)


def check_label(value: str, allowed: tuple[str, ...], what: str) -> str:
    """``value`` when it is one of the ``allowed`` label values, else a ``ValueError`` naming ``what`` it is."""
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")
    return value
