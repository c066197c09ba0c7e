"""What a destination said of one batch, in the delivery queue's terms, and the rules a sink delivers by.

A transport (an HTTP poster, a Kafka producer, an SDK exporter on its thread) turns whatever the destination
answered into one :class:`Outcome` per batch; the queue acts on it the same way for every sink:

* ``confirmed``: stored; the items are done;
* ``failed``: it may pass (down, overloaded, a timeout, credentials refused for now): the items are kept
  and sent again (``retry_after_s``: not before then, even at a flush);
* ``rejected``: the destination will never take them as they are. ``DeliveryRules.rejected`` decides:
  ``drop`` (a batch is split to find the culprit, whose items are sent alone, and what is rejected alone
  is dropped and counted) or ``hold`` (kept and sent again like a failure: nothing is ever dropped);
  ``each``: the answer is about every item as sent (a Kafka topic that does not exist), not one unknown
  item of the batch, so there is no culprit to look for;
* ``wait``: some items cannot be taken *yet* (Phoenix: their span has not arrived); those at ``waiting``
  wait under the sink's :class:`WaitRule`, the others of the batch are sent again at once;
* ``discarded``: the sink decided to stop sending these (an optional signal the receiver does not have):
  neither a loss nor a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "CONFIRMED",
    "DISCARDED",
    "DeliveryRules",
    "Outcome",
    "OutcomeKind",
    "RejectedRule",
    "WaitRule",
    "Wording",
    "failed",
    "rejected",
    "wait",
]

OutcomeKind = Literal["confirmed", "failed", "rejected", "wait", "discarded"]
# What becomes of an item the destination rejects for good: dropped (counted, logged) or held (blocks
# commits until an operator acts). One switch per sink, so that one rule for all can be chosen later.
RejectedRule = Literal["drop", "hold"]


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    detail: str = ""  # the destination's words (never a secret): logged, and the last error of the sink
    retry_after_s: float | None = None  # failed: the destination asked for this pause
    waiting: frozenset[int] = frozenset()  # wait: positions in the batch of the items that wait
    each: bool = False  # rejected: every item of the batch is rejected, no culprit to find


CONFIRMED: Final = Outcome("confirmed")
DISCARDED: Final = Outcome("discarded")


def failed(detail: str, retry_after_s: float | None = None) -> Outcome:
    return Outcome("failed", detail, retry_after_s=retry_after_s)


def rejected(detail: str, *, each: bool = False) -> Outcome:
    return Outcome("rejected", detail, each=each)


def wait(positions: frozenset[int], detail: str) -> Outcome:
    return Outcome("wait", detail, waiting=positions)


@dataclass(frozen=True, slots=True)
class WaitRule:
    """Items a destination cannot take yet wait, tried again with a short backoff, for up to ``max_wait_s``
    after the first such answer; then they are dropped with ``reason``. Meanwhile they are unconfirmed
    (nothing is committed past them) but they do not fail a flush: it waits for them within its timeout."""

    reason: str  # the drop reason once the wait is over (span_not_found)
    max_wait_s: float
    waiting_for: str  # in log lines: "spans Phoenix does not have yet"
    setting: str  # the key that sets max_wait_s, named in log lines
    advice: str  # what an operator should check, when items wait or are given up
    backoff_max_s: float = 2.0


@dataclass(frozen=True, slots=True)
class DeliveryRules:
    """How a sink delivers: its bounds, its batches, when it sends again and what it drops."""

    batch_size: int = 100  # items per batch
    max_pending: int = 10_000  # unconfirmed items before ``put`` waits (backpressure)
    linger_s: float = 0.0  # wait up to this long for a full batch (a flush or a close sends at once)
    # Failed items are sent again after a backoff between flushes (an HTTP API), or only at the next flush
    # (a producer or an SDK exporter that retries within its own timeout).
    retry_between_flushes: bool = True
    backoff_base_s: float = 0.25
    backoff_max_s: float = 5.0
    max_retry_after_s: float = 60.0  # a destination asking for longer is asked again after this
    rejected: RejectedRule = "drop"
    wait: WaitRule | None = None
    drop_reasons: tuple[str, ...] = ("rejected",)  # the reasons items can be dropped for (counted from 0)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_pending < 1:
            raise ValueError("batch_size and max_pending must be at least 1")


@dataclass(frozen=True, slots=True)
class Wording:
    """How log lines name the items and their confirmation: ``annotations`` not ``stored in Phoenix``."""

    noun: str
    done: str
