"""Delivery, once for every sink (docs/delivery.md).

- ``outcome``: what a destination said of a batch (:class:`Outcome`), and the rules a sink delivers by
  (:class:`DeliveryRules`: bounds, batches, backoff, what is dropped, what waits);
- ``queue``: :class:`DeliveryQueue`, the one delivery loop (backpressure, batches, one sender, resends,
  a flush to a watermark, drops, close) over a sink's :class:`Transport`;
- ``http``: :class:`HttpBatchSink`, a sink posting batches to an HTTP API, with its status classifier
  and readiness problem;
- ``letters``: :class:`DeadLetter`, what a sink makes of an item it drops (set aside on the score
  dead-letter topic: ``exporters.dead_letters``).
"""

from exporters.delivery.http import (
    HttpAnswer,
    HttpBatchSink,
    Refused,
    StatusClassifier,
    Verdict,
    rejected_in_their_words,
)
from exporters.delivery.letters import (
    DeadLetter,
    Lettered,
    SetAsideLetter,
    checkpointed,
    is_checkpointed,
    json_letters,
    no_dead_letters,
)
from exporters.delivery.outcome import (
    CONFIRMED,
    DISCARDED,
    DeliveryRules,
    Outcome,
    RejectedRule,
    WaitRule,
    Wording,
    failed,
    rejected,
    wait,
)
from exporters.delivery.queue import DeliveryQueue, Entry, SetAside, Settle, Transport

__all__ = [
    "CONFIRMED",
    "DISCARDED",
    "DeadLetter",
    "DeliveryQueue",
    "DeliveryRules",
    "Entry",
    "HttpAnswer",
    "HttpBatchSink",
    "Lettered",
    "Outcome",
    "Refused",
    "RejectedRule",
    "SetAside",
    "SetAsideLetter",
    "Settle",
    "StatusClassifier",
    "Transport",
    "Verdict",
    "WaitRule",
    "Wording",
    "checkpointed",
    "failed",
    "is_checkpointed",
    "json_letters",
    "no_dead_letters",
    "rejected",
    "rejected_in_their_words",
    "wait",
]
