"""One path from a record to a run: for each scope, the service (through the broker), ``preview`` (a file of the same
records) and ``eval --records`` (the same file) make the same runs, through the stage's assembly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.app.assembly import assemble
from sidecar.app.serve import run_service
from sidecar.core import ScoredRun, ScorerRunRequest
from sidecar.core.observers import ServiceObserver
from sidecar.eval import run_eval
from sidecar.eval.records import read_record_file
from sidecar.preview.runs import runs_from_file
from sidecar.settings import Settings, load_settings
from sidecar.testing.judge_server import JudgeServer
from tests.support.conversations import Turn, conversation
from tests.support.sessions import TURN_COUNT, create_session_topic, produce_turns
from tests.support.sidecar_process import free_port, sidecar_config

SAID = {
    "conv-a": [
        Turn("Where is order 4411?", "It ships tomorrow."),
        Turn("Can it come sooner?", "Express costs 9 EUR.", tool=("quote", '{"order": 4411}', '{"eur": 9}')),
    ],
    "conv-b": [Turn("Cancel my subscription.", "Done: cancelled today.")],
}
SCORERS: dict[str, dict[str, Any]] = {
    "span": {"id": "similarity", "kind": "content-similarity"},
    "trace": {"id": "similarity", "kind": "content-similarity", "targets": {"scope": "trace"}},
    "session": {"id": "turns", "kind": TURN_COUNT, "targets": {"scope": "session"}},
}


class Capture(ServiceObserver):
    def __init__(self, expected: int) -> None:
        self.runs: list[ScoredRun] = []
        self.expected = expected
        self.enough = asyncio.Event()

    def run_finished(self, run: ScoredRun) -> None:
        self.runs.append(run)
        if len(self.runs) >= self.expected:
            self.enough.set()


def _key(request: ScorerRunRequest) -> str:
    return request.subject


def _same(requests: list[ScorerRunRequest]) -> dict[str, dict[str, Any]]:
    return {_key(r): r.model_dump(mode="json") for r in requests}


@pytest.mark.parametrize("scope", ["span", "trace", "session"])
async def test_the_service_preview_and_eval_make_the_same_runs_from_the_same_records(
    scope: str,
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
) -> None:
    traces = [trace for cid, turns in SAID.items() for trace in conversation(cid, turns)]
    spans = await new_topic("spans", partitions=2)
    internal = unique_name("turns")
    await create_session_topic(kafka_bootstrap, internal, 2)
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=await new_topic("scores"),
        dead_topic=await new_topic("dead"), group=unique_name("group"), judge_url=judge_server.url,
        metrics_port=free_port(), scorers=[SCORERS[scope]],
        runtime={"trace_buffer": {"idle_s": 0.5, "max_wait_s": 10}},
    )  # fmt: skip
    config["judges"]["default"]["api_key"] = "unused"
    config["sessions"] = {"topic": internal, "idle_s": 1.0}
    settings = load_settings(yaml.safe_dump(config))
    assert isinstance(settings, Settings)
    expected = {"span": 3, "trace": 3, "session": 2}[scope]

    # The service, through the broker: the runs it hands to its sinks.
    await produce_turns(kafka_bootstrap, spans, traces)
    capture = Capture(expected)
    stop = asyncio.Event()
    running = asyncio.create_task(run_service(settings, stop, observers=[capture]))
    await asyncio.wait(
        {running, asyncio.ensure_future(capture.enough.wait())}, timeout=60, return_when="FIRST_COMPLETED"
    )
    stop.set()
    await asyncio.wait_for(running, 30)
    live = [run.request for run in capture.runs]
    assert len(live) == expected, [r.subject for r in live]

    # The same records in a file: one protobuf export (concatenated exports merge their spans).
    path = tmp_path / "records.otlp"
    path.write_bytes(b"".join(record for trace in traces for record in trace.records))
    assembly = assemble(settings)
    [configured] = assembly.scorers
    previewed = [run.request for run in runs_from_file(path, settings, configured, 100, ()).runs]
    await assembly.aclose()

    report = await run_eval(settings, read_record_file(path))
    evaluated = [result.item.request() for result in report.results]

    assert _same(previewed) == _same(live)
    assert _same(evaluated) == _same(live)
    # And the score ids the three would export are the same.
    live_ids = {run.score_id for run in capture.runs}
    assert {json.loads(json.dumps(r.record))["scoreId"] for r in report.results} == live_ids
