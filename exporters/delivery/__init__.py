"""Delivery, once for every sink (docs/delivery.md).

- ``outcome``: what a destination said of a batch (:class:`Outcome`), and the rules a sink delivers by
  (:class:`DeliveryRules`: bounds, batches, backoff, what is dropped, what waits);
- ``queue``: :class:`DeliveryQueue`, the one delivery loop (backpressure, batches, one sender, resends,
  a flush to a watermark, drops, close) over a sink's :class:`Transport`;
- ``http``: :class:`HttpBatchSink`, a sink posting batches to an HTTP API, with its status classifier
  and readiness problem.
"""

from exporters.delivery.http import HttpAnswer, HttpBatchSink, Refused, StatusClassifier, Verdict
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
from exporters.delivery.queue import DeliveryQueue, Entry, Settle, Transport

__all__ = [
    "CONFIRMED",
    "DISCARDED",
    "DeliveryQueue",
    "DeliveryRules",
    "Entry",
    "HttpAnswer",
    "HttpBatchSink",
    "Outcome",
    "Refused",
    "RejectedRule",
    "Settle",
    "StatusClassifier",
    "Transport",
    "Verdict",
    "WaitRule",
    "Wording",
    "failed",
    "rejected",
    "wait",
]
