"""A Langfuse stand-in on loopback: ``POST /api/public/scores`` as the real server answers it.

Every score that arrives is validated with the official ``langfuse`` package's generated request model
(``langfuse.api.scores.types.CreateScoreRequest``, the dev extra), unknown fields refused, and with the rules
the server adds (a value that fits its data type, the environment's form, a subject); answers are built from
the package's response models: an array is answered 202 ``{message: Accepted}`` or 207 ``{accepted,
rejected, errors}``, a single object 200 ``{id}`` or 400 with Langfuse's ``{message, error}``; 401 for keys it
does not know. ``batch_scores=False`` is a server from before batch scores: an array is a 400.

Storage is Langfuse's: a score is a row per (id, timestamp), and a score sent again with the same id and
timestamp replaces its row (an upsert); ``rows`` holds them and ``writes`` counts every write per id. Tests
script faults (``faults``: answered in order before anything else; ``always``), make names refused for good
(``refuse_names``), take the server down and up again on its port (``stop``/``start``), and read back
``requests`` (path, body, ``Authorization``).
"""

from __future__ import annotations

import base64
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from langfuse.api.core.pydantic_utilities import parse_obj_as
from langfuse.api.scores.types import (
    CreateScoreBatchError,
    CreateScoreBatchResponse,
    CreateScoreBatchResults,
    CreateScoreRequest,
)
from pydantic import ValidationError

from tests.support.loopback import serve_on_loopback

__all__ = ["LangfuseStandIn", "ReceivedRequest"]

PUBLIC_KEY = "pk-lf-stand-in"
SECRET_KEY = "sk-lf-stand-in-secret-0123456789"
_ENVIRONMENT = re.compile(r"^(?!langfuse)[a-z0-9_-]{1,40}$")


@dataclass(frozen=True)
class ReceivedRequest:
    at: float
    path: str
    body: Any
    authorization: str | None
    status: int


@dataclass
class LangfuseStandIn:
    public_key: str = PUBLIC_KEY
    secret_key: str = SECRET_KEY
    batch_scores: bool = True
    port: int = 0
    faults: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    always: int | None = None
    refuse_names: set[str] = field(default_factory=set)
    requests: list[ReceivedRequest] = field(default_factory=list)
    rows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (id, timestamp) -> score
    writes: Counter[str] = field(default_factory=Counter)
    invalid: list[str] = field(default_factory=list)  # what the validation found: a test asserts it stays empty
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def scores(self) -> dict[str, dict[str, Any]]:
        """The stored scores by id (a test checks first that each id has one row)."""
        return {score_id: body for (score_id, _), body in self.rows.items()}

    def rows_per_id(self) -> Counter[str]:
        return Counter(score_id for score_id, _ in self.rows)

    async def start(self) -> LangfuseStandIn:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/api/public/scores", self._scores)
        app.router.add_get("/api/public/health", self._health)
        self._runner, self.port = await serve_on_loopback(app, self.port)
        return self

    async def stop(self) -> None:
        """Down: the port refuses connections until ``start`` (the same port)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "OK", "version": "stand-in"})

    # -- the scores API ---------------------------------------------------------------------------------------
    async def _scores(self, request: web.Request) -> web.Response:
        authorization = request.headers.get("Authorization")
        body = await request.json()
        response = self._answer(authorization, body)
        self.requests.append(ReceivedRequest(time.monotonic(), request.path, body, authorization, response.status))
        return response

    def _answer(self, authorization: str | None, body: Any) -> web.Response:
        if self.faults or self.always is not None:
            for item in body if isinstance(body, list) else [body]:  # a faulted request is checked all the same
                self._problem(item)
            status, headers = (self.always, {}) if self.always is not None else self.faults.pop(0)
            return web.json_response({"message": f"scripted {status}"}, status=status, headers=headers)
        expected = "Basic " + base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode()
        if authorization != expected:
            return web.json_response(
                {"message": "Invalid credentials. Confirm that you've configured the correct host."}, status=401
            )
        if isinstance(body, list):
            if not self.batch_scores:
                issue = {"code": "invalid_type", "expected": "object", "received": "array", "path": []}
                return web.json_response(
                    {
                        "message": "Invalid request data",
                        "error": [{**issue, "message": "Expected object, received array"}],
                    },
                    status=400,
                )
            errors = [error for item in body if (error := self._store(item)) is not None]
            if not errors:
                return web.json_response(CreateScoreBatchResponse().dict(), status=202)
            results = CreateScoreBatchResults(
                accepted=len(body) - len(errors),
                rejected=len(errors),
                errors=[CreateScoreBatchError(message=error) for error in errors],
            )
            return web.json_response(results.dict(), status=207)
        error = self._store(body)
        if error is not None:
            return web.json_response({"message": "Invalid request data", "error": error}, status=400)
        return web.json_response({"id": body["id"]})

    def _store(self, item: Any) -> str | None:
        """Validate one score as Langfuse does and upsert it; the error message when it is refused."""
        problem = self._problem(item)
        if problem is not None:
            return problem
        key = (item["id"], item["timestamp"])
        self.rows[key] = item
        self.writes[item["id"]] += 1
        return None

    def _problem(self, item: Any) -> str | None:
        try:
            score = parse_obj_as(CreateScoreRequest, item)
        except ValidationError as exc:
            self.invalid.append(str(exc))
            return f"invalid score: {exc.errors()[0]['msg']}"
        if score.model_extra:
            self.invalid.append(f"unknown fields {sorted(score.model_extra)}")
            return f"unknown fields {sorted(score.model_extra)}"
        data_type = score.data_type.value if score.data_type is not None else "NUMERIC"
        value = score.value
        if data_type == "CATEGORICAL" and not isinstance(value, str):
            return "categorical score values must be strings"
        if data_type in ("NUMERIC", "BOOLEAN") and isinstance(value, str):
            return f"{data_type.lower()} score values must be numbers"
        if data_type == "BOOLEAN" and value not in (0, 1):
            return "boolean score values must be 0 or 1"
        if score.environment is not None and not _ENVIRONMENT.match(score.environment):
            self.invalid.append(f"environment {score.environment!r}")
            return "environment must match ^(?!langfuse)[a-z0-9-_]+$ and be at most 40 characters"
        if not (score.trace_id or score.session_id or score.dataset_run_id):
            return "a score needs a traceId, sessionId or datasetRunId"
        if score.id is None or score.timestamp is None:
            self.invalid.append("the sidecar sends every score with its id and timestamp (upserts)")
            return "id and timestamp expected"
        if score.name in self.refuse_names:
            return f"score {score.name!r} does not match its score config"
        return None

    def bodies(self) -> list[dict[str, Any]]:
        """Every score that arrived, in order (arrays unpacked)."""
        out: list[dict[str, Any]] = []
        for received in self.requests:
            out.extend(received.body if isinstance(received.body, list) else [received.body])
        return out
