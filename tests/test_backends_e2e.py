"""``scoring-sidecar run`` as a subprocess with the Langfuse and Datadog exporters on, against their stand-ins
(tests/support/langfuse.py, tests/support/datadog.py) and the real broker: kill -9 mid-backlog, each backend
down for 20 s, a permanent 400 from each (and from OTLP) that stalls nothing."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.core import names
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import GeneratedTrace, TrafficGenerator
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.datadog import API_KEY, DatadogStandIn
from tests.support.judge import SECRET_KEY as JUDGE_KEY
from tests.support.langfuse import PUBLIC_KEY, SECRET_KEY, LangfuseStandIn
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.sidecar_process import (
    SidecarProcess,
    committed_total,
    free_port,
    kill_mid_work,
    produce_traces,
    read_scores,
    read_topic,
    score_values,
    sidecar_config,
)
from tests.support.sidecar_process import (
    metric_sample as sample,
)

NewTopic = Callable[..., Awaitable[str]]
SCORERS = ("prompt-alignment", "similarity")


@pytest.fixture
async def langfuse() -> AsyncIterator[LangfuseStandIn]:
    stand_in = await LangfuseStandIn().start()
    yield stand_in
    await stand_in.stop()
    assert stand_in.invalid == []


@pytest.fixture
async def datadog() -> AsyncIterator[DatadogStandIn]:
    stand_in = await DatadogStandIn().start()
    yield stand_in
    await stand_in.stop()
    assert stand_in.invalid == []


async def wait_until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"not within {timeout_s} s: {what}")


async def readyz(sidecar: SidecarProcess) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(sidecar.metrics_url + "/readyz") as response:
        return response.status, await response.text()


class Backends:
    """The topics, the stand-ins and a sidecar with both exporters on (and OTLP when given)."""

    def __init__(
        self,
        tmp_path: Path,
        bootstrap: str,
        topics: tuple[str, str, str, str],
        group: str,
        judge_server: JudgeServer,
        langfuse: LangfuseStandIn,
        datadog: DatadogStandIn,
        otlp_endpoint: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.spans, self.scores, self.dead, self.score_letters = topics
        self.group = group
        self.langfuse, self.datadog = langfuse, datadog
        config = sidecar_config(
            bootstrap=bootstrap,
            spans_topic=self.spans,
            scores_topic=self.scores,
            dead_topic=self.dead,
            group=group,
            judge_url=judge_server.url,
            metrics_port=free_port(),
            otlp_endpoint=otlp_endpoint,
            judge={"max_concurrency": 8},
            runtime={"max_in_flight_runs": 32},
        )
        config["exporters"]["kafka_scores"]["dead_letter_topic"] = self.score_letters
        config["exporters"]["langfuse"] = {"base_url": langfuse.url, "batch_size": 25, "timeout_s": 2}
        config["exporters"]["datadog"] = {"enabled": True, "base_url": datadog.url, "batch_size": 25, "timeout_s": 2}
        if otlp_endpoint is not None:
            config["exporters"]["otlp"]["timeout_s"] = 1
        env = {
            "JUDGE_API_KEY": JUDGE_KEY,
            "LANGFUSE_PUBLIC_KEY": PUBLIC_KEY,
            "LANGFUSE_SECRET_KEY": SECRET_KEY,
            "DD_API_KEY": API_KEY,
        }
        self.sidecar = SidecarProcess(config, tmp_path, env=env)

    async def committed(self) -> int:
        return await committed_total(self.bootstrap, self.group, self.spans, 3)

    async def all_in(self, traces: int) -> bool:
        expected = traces * len(SCORERS)
        return (
            len(self.langfuse.scores) >= expected
            and len(set(self.datadog.score_ids())) >= expected
            and await self.committed() >= traces
        )

    def log(self) -> str:
        return self.sidecar.log_path.read_text()[-6000:]


@pytest.fixture
async def backends(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: NewTopic,
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    langfuse: LangfuseStandIn,
    datadog: DatadogStandIn,
) -> Callable[..., Awaitable[Backends]]:
    async def make(otlp_endpoint: str | None = None) -> Backends:
        topics = (
            await new_topic("spans", partitions=3),
            await new_topic("scores"),
            await new_topic("dead"),
            await new_topic("score-letters"),
        )
        group = unique_name("group")
        return Backends(tmp_path, kafka_bootstrap, topics, group, judge_server, langfuse, datadog, otlp_endpoint)

    return make


def traces(count: int, seed: int) -> list[GeneratedTrace]:
    return list(TrafficGenerator(seed=seed).traces(count))


def assert_no_key_in(log: bytes) -> None:
    for key in (SECRET_KEY, API_KEY, JUDGE_KEY):
        assert key.encode() not in log and key[:12].encode() not in log


async def test_kill_9_mid_backlog_then_restart_every_score_arrives_once_per_id(
    kafka_bootstrap: str, judge_server: JudgeServer, backends: Callable[..., Awaitable[Backends]]
) -> None:
    async def slow_judge(body: dict[str, Any]) -> Reply:
        await asyncio.sleep(0.02)
        return heuristic_reply(body)

    judge_server.reset(slow_judge)
    b = await backends()
    backlog = traces(120, seed=26)
    await produce_traces(kafka_bootstrap, b.spans, backlog)
    try:
        await kill_mid_work(b.sidecar, random.Random(26))
        await wait_until(lambda: b.all_in(len(backlog)), 120, "every score in Langfuse and Datadog, all committed")
        await asyncio.sleep(0.5)
        assert b.sidecar.terminate() == 0
    finally:
        b.sidecar.kill()
    records = await read_scores(kafka_bootstrap, b.scores, score_ids=2 * len(backlog), timeout_s=30)
    expected = {v["scoreId"] for v in score_values(records)}
    assert len(expected) == 2 * len(backlog)
    # Langfuse: exactly one score per score id, however often a redelivery upserted it.
    assert set(b.langfuse.scores) == expected and set(b.langfuse.rows_per_id().values()) == {1}
    # Datadog: every score id (a redelivery after a restart may write one again: no idempotency key there).
    assert set(b.datadog.score_ids()) == expected
    assert await b.committed() == len(backlog), b.log()
    assert_no_key_in(b.sidecar.log_path.read_bytes())


async def test_each_backend_down_20_s_loses_nothing_health_shows_it_and_nothing_commits_past_it(
    kafka_bootstrap: str, judge_server: JudgeServer, backends: Callable[..., Awaitable[Backends]]
) -> None:
    judge_server.reset(heuristic_reply)
    b = await backends()
    first, second = traces(20, seed=261), traces(20, seed=262)
    await produce_traces(kafka_bootstrap, b.spans, first)
    b.sidecar.start()
    try:
        await b.sidecar.wait_ready()
        await wait_until(lambda: b.all_in(len(first)), 60, "the first traces exported and committed")
        await b.langfuse.stop()
        await b.datadog.stop()
        down_at = time.monotonic()
        await produce_traces(kafka_bootstrap, b.spans, second)

        async def unready() -> bool:
            status, body = await readyz(b.sidecar)
            return status == 503 and "datadog" in body and "langfuse" in body

        await wait_until(unready, 15, "/readyz naming both backends")
        down = await b.sidecar.metrics_text()
        assert sample(down, "scoring_sidecar_exporter_up", {"exporter": "langfuse"}) == 0
        assert sample(down, "scoring_sidecar_exporter_up", {"exporter": "datadog"}) == 0
        assert sample(down, "scoring_sidecar_exporter_up", {"exporter": "kafka_scores"}) == 1
        # The Kafka scores of the second traces go out meanwhile; no offset moves past what the backends hold.
        await read_scores(kafka_bootstrap, b.scores, score_ids=2 * (len(first) + len(second)), timeout_s=15)
        while time.monotonic() - down_at < 20:
            assert await b.committed() == len(first)
            await asyncio.sleep(1)
        assert (
            sample(await b.sidecar.metrics_text(), "scoring_sidecar_exporter_pending_items", {"exporter": "langfuse"})
            > 0
        )

        await b.langfuse.start()
        await b.datadog.start()
        total = len(first) + len(second)
        await wait_until(lambda: b.all_in(total), 60, "everything held exported and committed")

        async def ready() -> bool:
            return (await readyz(b.sidecar))[0] == 200

        await wait_until(ready, 15, "/readyz 200 again")
        up = await b.sidecar.metrics_text()
        assert sample(up, "scoring_sidecar_exporter_up", {"exporter": "langfuse"}) == 1
        assert sample(up, "scoring_sidecar_exporter_dropped_total", {"exporter": "langfuse"}) == 0
        assert sample(up, "scoring_sidecar_exporter_dropped_total", {"exporter": "datadog"}) == 0
        assert b.sidecar.terminate() == 0
    finally:
        b.sidecar.kill()
    assert await b.committed() == total
    assert set(b.langfuse.rows_per_id().values()) == {1} and len(b.langfuse.scores) == 2 * total
    assert len(set(b.datadog.score_ids())) == 2 * total
    assert_no_key_in(b.sidecar.log_path.read_bytes())


async def test_a_permanent_400_from_each_backend_stalls_nothing_and_is_set_aside(
    kafka_bootstrap: str,
    judge_server: JudgeServer,
    backends: Callable[..., Awaitable[Backends]],
    otlp_receiver: OtlpReceiver,
) -> None:
    """Langfuse refuses one scorer's scores, Datadog the other's, the OTLP receiver every span: each is dropped
    from its sink, counted and set aside on the score dead-letter topic; the rest arrive and every record is
    committed."""
    judge_server.reset(heuristic_reply)
    b = await backends(otlp_receiver.endpoint("http/protobuf"))
    b.langfuse.refuse_names = {"similarity"}
    b.datadog.refuse_labels = {"prompt_alignment"}
    otlp_receiver.fail(http_status=400)
    batch = traces(15, seed=263)
    await produce_traces(kafka_bootstrap, b.spans, batch)
    b.sidecar.start()
    try:
        await b.sidecar.wait_ready()

        async def done() -> bool:
            return await b.committed() == len(batch)

        await wait_until(done, 60, "every record committed despite the refusals")
        await asyncio.sleep(1.0)  # the last dead letters acknowledged and a checkpoint after them
        metrics = await b.sidecar.metrics_text()
        status, _ = await readyz(b.sidecar)
        assert b.sidecar.terminate() == 0
    finally:
        b.sidecar.kill()
        otlp_receiver.recover()
    records = await read_scores(kafka_bootstrap, b.scores, score_ids=2 * len(batch), timeout_s=30)
    by_scorer: dict[str, set[str]] = {}
    for value in score_values(records):
        by_scorer.setdefault(value["scorerId"], set()).add(value["scoreId"])
    assert set(b.langfuse.scores) == by_scorer["prompt-alignment"]
    assert set(b.datadog.score_ids()) == by_scorer["similarity"]
    assert status == 200
    assert sample(metrics, "scoring_sidecar_exporter_dropped_total", {"exporter": "langfuse"}) == len(batch)
    assert sample(metrics, "scoring_sidecar_exporter_dropped_total", {"exporter": "datadog"}) == len(batch)
    assert sample(metrics, "scoring_sidecar_exporter_dropped_total", {"exporter": "otlp"}) >= 2 * len(batch)
    letters = await read_topic(kafka_bootstrap, b.score_letters, expect=4 * len(batch), timeout_s=15)
    per_exporter: dict[str, set[str]] = {}
    for letter in letters:
        headers = {k: bytes(v).decode() for k, v in letter.headers}
        # Langfuse refuses a score of a batch in its 207; Datadog and OTLP answer 400.
        assert headers[names.DL_REASON] == "rejected" and (
            "400" in headers[names.DL_DETAIL] or "207" in headers[names.DL_DETAIL]
        )
        per_exporter.setdefault(headers[names.DL_EXPORTER], set()).add(headers["score-id"])
    assert per_exporter["langfuse"] == by_scorer["similarity"]
    assert per_exporter["datadog"] == by_scorer["prompt-alignment"]
    # Every score's run span (its judge spans name no score id: set aside as "unknown").
    assert per_exporter["otlp"] - {"unknown"} == by_scorer["similarity"] | by_scorer["prompt-alignment"]
