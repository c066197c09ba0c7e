"""The judge canary (docs/feedback.md): a fixed labelled set scored through the live judge every ``every_s``, so an
on-call can tell whether the judge itself moved (its provider updated the model) from whether the traffic did.

Each configured scorer with ``canary: {dataset, every_s}`` has its items (one-turn runs, each with the verdict a
person gave it: ``expected``) run by the service's own bound scorer, through its judge's gate (limits, circuit
breaker, spend cap), with ``attempt_scorer`` as ``eval`` runs items. A round's scores are compared with the labels
as feedback is (``sidecar.scoring.agreement``) and reported (``canary_finished``): the agreement, the mean score and
the baseline it is held to. Canary runs are ``mode="canary"``: they reach no sink and none of the score and run
metrics (no ``run_finished``), so they never move the alignment series the other alerts read; their judge calls and
cost are counted as every call is.

Each process that runs it (``run`` runs it in worker 0 of each replica) reports its own rounds: the gauges of one
replica describe its own calls to the same judge, and every replica's should agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from sidecar.core.jsonl import JsonlProblem, read_jsonl
from sidecar.core.observers import ServiceObserver
from sidecar.core.runs import ScorerRunRequest, SpanTarget
from sidecar.runtime.attempt import attempt_scorer
from sidecar.runtime.configured import ConfiguredScorer
from sidecar.scorers.context import REQUEST_CONTEXT_KEY
from sidecar.scoring.agent import AgentRunInput, SystemMessage, assistant_message, user_message
from sidecar.scoring.agreement import IncomparableVerdict, agreement, compare

__all__ = ["CanaryItem", "CanaryPlan", "DatasetProblem", "JudgeCanary", "load_canary_items"]

log = logging.getLogger(__name__)

MAX_ITEMS = 500
MAX_FILE_BYTES = 8 * 1024 * 1024
_TEXT_CHARS = 64 * 1024
_CONCURRENCY = 4


class DatasetProblem(ValueError):
    """What is wrong with a canary dataset (every bad line named)."""


class _ItemFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = Field(default=None, max_length=128)
    input: str = Field(min_length=1, max_length=_TEXT_CHARS)
    output: str = Field(min_length=1, max_length=_TEXT_CHARS)
    expected: StrictBool | float | str
    system: str | None = Field(default=None, max_length=_TEXT_CHARS)
    ground_truth: str | None = Field(default=None, max_length=_TEXT_CHARS)
    context: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class CanaryItem:
    """One labelled run: what the scorer scores, and the verdict a person gave it."""

    request: ScorerRunRequest
    expected: bool | float | str
    ground_truth: Any = None
    request_context: dict[str, Any] | None = None
    where: str = ""


def _item(fields: _ItemFields, where: str) -> CanaryItem:
    # A span of its own per item (a digest of the item): the canary's runs never share a subject with traffic.
    digest = hashlib.sha256(json.dumps(fields.model_dump(), sort_keys=True).encode()).hexdigest()
    systems = (SystemMessage(content=fields.system),) if fields.system else ()
    request = ScorerRunRequest(
        target=SpanTarget(trace_id=digest[:32], span_id=digest[32:48], span_name=f"canary {fields.id or where}"),
        input=AgentRunInput(input_messages=(user_message(fields.input),), system_messages=systems),
        output=(assistant_message(fields.output),),
        context=fields.context or (),
    )
    context = {REQUEST_CONTEXT_KEY: list(fields.context)} if fields.context is not None else None
    return CanaryItem(request, fields.expected, fields.ground_truth, context, where)


def load_canary_items(path: Path) -> list[CanaryItem]:
    """The items of a JSONL canary dataset: ``{"input", "output", "expected"}`` per line (``id``, ``system``,
    ``ground_truth``, ``context`` optional); :class:`DatasetProblem` names every bad line."""
    try:
        lines = read_jsonl(path, _ItemFields, max_bytes=MAX_FILE_BYTES)
    except JsonlProblem as exc:
        raise DatasetProblem(str(exc)) from None
    items = [_item(fields, f"{path.name}:{number}") for number, fields in lines]
    if not items:
        raise DatasetProblem(f"{path}: no items")
    if len(items) > MAX_ITEMS:
        raise DatasetProblem(f"{path}: {len(items)} items, at most {MAX_ITEMS} (a canary is a small fixed set)")
    return items


@dataclass(frozen=True)
class CanaryPlan:
    """One scorer's canary: its items, how often, and how a verdict is compared."""

    configured: ConfiguredScorer
    items: tuple[CanaryItem, ...]
    every_s: float
    agree_within: float
    baseline: float | None = None  # None: the first round's agreement


class JudgeCanary:
    """Every plan's rounds, each at its own pace, until the stop."""

    def __init__(
        self, plans: Sequence[CanaryPlan], observer: ServiceObserver, *, timeout_s: float, concurrency: int = 4
    ) -> None:
        self.plans = tuple(plans)
        self._observer = observer
        self._timeout_s = timeout_s
        self._limit = asyncio.Semaphore(max(1, concurrency))
        self._baselines: dict[str, float] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """A round of every plan at start, then each every ``every_s`` (a round longer than that is not overlapped:
        the next starts when it ends)."""
        if not self.plans:
            return
        tasks = [
            asyncio.create_task(self._keep(plan, stop), name=f"canary {plan.configured.scorer.id}")
            for plan in self.plans
        ]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _keep(self, plan: CanaryPlan, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self.round(plan)
            except Exception:  # a bug: logged, and the next round tries again
                log.exception("canary of %s: a round failed", plan.configured.scorer.id)
            left = plan.every_s - (time.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, left))

    async def round(self, plan: CanaryPlan) -> None:
        """Score every item through the live judge, compare with the labels, report."""
        configured = plan.configured
        scorer = configured.scorer

        async def one(item: CanaryItem) -> tuple[float, str | None] | None:
            async with self._limit:
                attempt = await attempt_scorer(
                    scorer,
                    item.request,
                    timeout_s=self._timeout_s,
                    ground_truth=item.ground_truth,
                    request_context=item.request_context,
                )
            result = attempt.result
            if attempt.outcome != "scored" or result is None or result.score is None or not math.isfinite(result.score):
                return None
            return result.score, result.label

        answers = await asyncio.gather(*(one(item) for item in plan.items))
        comparisons = []
        scores = []
        failed = 0
        for item, answer in zip(plan.items, answers, strict=True):
            if answer is None:
                failed += 1
                continue
            score, label = answer
            try:
                comparisons.append(
                    compare(score, label, item.expected, scale=configured.scale, agree_within=plan.agree_within)
                )
            except IncomparableVerdict as exc:
                failed += 1
                log.warning("canary of %s: %s: %s", scorer.id, item.where, exc)
                continue
            scores.append(min(1.0, max(0.0, score / configured.scale)))
        stats = agreement(comparisons)
        baseline = plan.baseline
        if baseline is None and stats.share is not None:
            baseline = self._baselines.setdefault(scorer.id, stats.share)
        elif baseline is None:
            baseline = self._baselines.get(scorer.id)
        mean = sum(scores) / len(scores) if scores else None
        self._observer.canary_finished(scorer.id, stats, mean, failed, baseline)
        if stats.share is None:
            log.warning(
                "canary of %s: none of its %d items was scored (the judge failed or refused every call): the "
                "canary's gauges keep their last values",
                scorer.id, len(plan.items),
            )  # fmt: skip
        else:
            log.info(
                "canary of %s: agreement %.2f over %d items (baseline %.2f), mean score %.2f, %d failed",
                scorer.id, stats.share, stats.pairs, baseline if baseline is not None else math.nan,
                mean if mean is not None else math.nan, failed,
            )  # fmt: skip
