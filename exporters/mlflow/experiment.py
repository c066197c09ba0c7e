"""The MLflow experiment the agents' traces go to: found by id or by name, created when a name is absent.

Assessments attach to traces, whichever experiment holds them; the experiment is what the agents' spans are
sent to (the ``x-mlflow-experiment-id`` header of MLflow's ``/v1/traces``), so the sidecar resolves it at
start as MLflow's own clients do (``MLFLOW_EXPERIMENT_ID``, or ``MLFLOW_EXPERIMENT_NAME`` created if absent)
and says its id in one INFO line, the value an operator puts in the Collector's exporter headers.

In the background, never in the way of the assessments: while MLflow does not answer (or refuses), the lookup
is tried again with a backoff up to a minute, with a WARNING on the first failure and on every tenth after it.
An experiment id MLflow does not have is an ERROR (an id cannot be created); a name racing another client's
create finds the one that won.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

__all__ = ["ExperimentRef", "resolve_experiment"]

log = logging.getLogger("exporters.mlflow")

_GET: Final = "/api/2.0/mlflow/experiments/get"
_GET_BY_NAME: Final = "/api/2.0/mlflow/experiments/get-by-name"
_CREATE: Final = "/api/2.0/mlflow/experiments/create"
_BACKOFF_MAX_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class ExperimentRef:
    """An experiment by id, or by name (created when absent)."""

    experiment_id: str | None = None
    name: str | None = None

    def describe(self) -> str:
        return repr(self.name) if self.name is not None else f"id {self.experiment_id}"


class _Unresolved(Exception):
    def __init__(self, message: str, *, error: bool = False) -> None:
        super().__init__(message)
        self.error = error  # a human must act (a wrong id, the credentials): logged at ERROR


async def _json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        body = await response.json(content_type=None)
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {}


async def _lookup(session: aiohttp.ClientSession, base: str, ref: ExperimentRef) -> str:
    if ref.name is None:
        async with session.get(base + _GET, params={"experiment_id": str(ref.experiment_id)}) as response:
            body = await _json(response)
            if response.status == 200:
                return str(body["experiment"]["experiment_id"])
            raise _Unresolved(
                f"MLflow has no experiment {ref.experiment_id} (HTTP {response.status}: {body.get('message', '')})",
                error=response.status in (400, 401, 403, 404),
            )
    async with session.get(base + _GET_BY_NAME, params={"experiment_name": ref.name}) as response:
        body = await _json(response)
        if response.status == 200:
            return str(body["experiment"]["experiment_id"])
        if response.status != 404:
            raise _Unresolved(
                f"HTTP {response.status} looking up experiment {ref.name!r}: {body.get('message', '')}",
                error=response.status in (401, 403),
            )
    async with session.post(base + _CREATE, json={"name": ref.name}) as response:
        body = await _json(response)
        if response.status == 200:
            log.info("exporters.mlflow: created the MLflow experiment %r (id %s)", ref.name, body["experiment_id"])
            return str(body["experiment_id"])
        if body.get("error_code") == "RESOURCE_ALREADY_EXISTS":  # another client created it meanwhile
            return await _lookup(session, base, ref)
        raise _Unresolved(
            f"HTTP {response.status} creating experiment {ref.name!r}: {body.get('message', '')}",
            error=response.status in (400, 401, 403),
        )


async def resolve_experiment(
    tracking_uri: str, ref: ExperimentRef, headers: Mapping[str, str], timeout_s: float, *, backoff_s: float = 1.0
) -> str:
    """The experiment's id, once MLflow answers (see the module doc). Cancel it to give up."""
    base = tracking_uri.rstrip("/")
    failures = 0
    async with aiohttp.ClientSession(headers=dict(headers), timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        while True:
            try:
                return await _lookup(session, base, ref)
            except (_Unresolved, aiohttp.ClientError, TimeoutError, OSError, KeyError, TypeError) as exc:
                failures += 1
                if failures % 10 == 1:
                    level = logging.ERROR if isinstance(exc, _Unresolved) and exc.error else logging.WARNING
                    log.log(
                        level,
                        "exporters.mlflow: cannot resolve the experiment %s at %s (%s: %s); trying again (assessments "
                        "go on meanwhile)",
                        ref.describe(),
                        base,
                        type(exc).__name__,
                        str(exc)[:300],
                    )
            ceiling = min(_BACKOFF_MAX_S, backoff_s * 2 ** min(failures - 1, 10))
            await asyncio.sleep(ceiling / 2 + random.random() * ceiling / 2)
