"""``scoring-sidecar run`` with redaction on, all real on loopback (broker, scripted judge, OTLP receiver): a trace
holding every supported entity in every part of its agent run is judged without any value reaching the judge,
and the score records, the spans and logs the OTLP exporter sends, the sidecar's own log (at DEBUG) and its
metrics hold no value either; the metrics count the redactions by judge and entity."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.redaction.entities import ENTITIES
from sidecar.testing.judge_server import JudgeServer
from tests.support.judge import SECRET_KEY
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.personal_data import ALLOWED, every_value, pii_trace
from tests.support.sidecar_process import SidecarProcess, free_port, read_topic, score_values, sidecar_config
from tests.support.trace_scope import produce_records
from tests.test_redaction_judge import EVERY_VARIABLE
from tests.test_service_e2e import sample

TRACE = {"kinds": ["agent"], "scope": "trace"}


def leaked(texts: list[str]) -> list[str]:
    return sorted({value for value in every_value() for text in texts if value in text})


@pytest.mark.slow
async def test_a_trace_full_of_personal_data_leaves_no_value_anywhere(
    tmp_path: Path,
    kafka_bootstrap: str,
    new_topic: Callable[..., Any],
    unique_name: Callable[[str], str],
    judge_server: JudgeServer,
    otlp_receiver: OtlpReceiver,
) -> None:
    judge_server.reset(heuristic_reply)
    spans, scores, dead = (await new_topic("spans"), await new_topic("scores"), await new_topic("dead"))
    scorers = [
        {
            "id": "every-variable",
            "kind": "llm-judge",
            "judge": "default",
            "targets": TRACE,
            "options": {
                "instructions": "Decide whether the answer serves the customer.",
                "prompt": EVERY_VARIABLE,
                "output": {"type": "boolean"},
            },
        },
        {"id": "faithfulness", "kind": "faithfulness", "judge": "default", "targets": TRACE},
        {"id": "alignment", "kind": "prompt-alignment", "judge": "default"},
    ]
    config = sidecar_config(
        bootstrap=kafka_bootstrap, spans_topic=spans, scores_topic=scores, dead_topic=dead,
        group=unique_name("group"), judge_url=judge_server.url, metrics_port=free_port(), scorers=scorers,
        runtime={"trace_buffer": {"idle_s": 0.5, "max_wait_s": 10}},
        otlp_endpoint=otlp_receiver.endpoint("http/protobuf"),
    )  # fmt: skip
    config["log_level"] = "DEBUG"
    config["redact"] = {"entities": list(ENTITIES), "allow": [ALLOWED]}
    config["exporters"]["otlp"]["events"] = "both"
    sidecar = SidecarProcess(config, tmp_path, env={"JUDGE_API_KEY": SECRET_KEY})
    trace = pii_trace()
    sidecar.start()
    try:
        await sidecar.wait_ready()
        await produce_records(kafka_bootstrap, spans, [(trace.trace_id.encode(), trace.record)])
        records = await read_topic(kafka_bootstrap, scores, expect=3, timeout_s=60)
        await asyncio.sleep(1.5)  # a checkpoint, the OTLP batches
        metrics = await sidecar.metrics_text()
        assert sidecar.terminate() == 0
    finally:
        sidecar.kill()

    values = score_values(records)
    assert {v["scorerId"] for v in values} == {"every-variable", "faithfulness", "alignment"}, values
    requests = [json.dumps(r.body, ensure_ascii=False) for r in judge_server.requests]
    assert requests and leaked(requests) == []
    assert any(ALLOWED in r for r in requests)
    assert leaked([json.dumps(v, ensure_ascii=False) for v in values]) == []
    for value in values:
        assert value["redactions"]["EMAIL_ADDRESS"] > 0, value
    # Every field of every span and log record the OTLP exporter sent, as protobuf text.
    exported = [str(request) for request in otlp_receiver.trace_requests] + [str(x.record) for x in otlp_receiver.logs]
    assert otlp_receiver.spans and otlp_receiver.logs and leaked(exported) == []
    log = sidecar.log_path.read_text()
    assert "DEBUG" in log and leaked([log]) == []
    assert leaked([metrics]) == []
    assert sample(metrics, "scoring_sidecar_redactions_total", {"judge": "default", "entity": "CREDIT_CARD"}) >= 3
