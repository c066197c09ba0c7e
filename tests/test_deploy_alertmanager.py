"""deploy/alertmanager/alertmanager.yml in a real Alertmanager (Debian's ``prometheus-alertmanager``): a judge that
drifted holds back its own scorer's score drops and its disagreement with people, never another scorer's."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.sidecar_process import free_port

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "alertmanager" / "alertmanager.yml"

pytestmark = pytest.mark.skipif(
    BINARY is None, reason="alertmanager not installed (apt-get install prometheus-alertmanager)"
)


def alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": name, "severity": severity, "job": "scoring-sidecar", **labels}}


def start_alertmanager(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    assert BINARY is not None
    log = (workdir / "alertmanager.log").open("wb")
    return subprocess.Popen(
        [BINARY, f"--config.file={CONFIG}", f"--storage.path={workdir}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address="],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


async def test_judge_drift_inhibits_its_scorers_drops_and_disagreement_only(tmp_path: Path) -> None:
    port = free_port()
    process = start_alertmanager(tmp_path, port)
    base = f"http://127.0.0.1:{port}/api/v2"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 20
            while True:
                try:
                    async with session.get(f"{base}/status") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert time.monotonic() < deadline and process.poll() is None, (
                    tmp_path / "alertmanager.log"
                ).read_text()
                await asyncio.sleep(0.1)
            alerts = [
                alert("JudgeDrift", "page", scorer="policy"),
                alert("ScoringSidecarAlignmentScoreDrop", "page", scorer="policy", agent="support-bot"),
                alert("JudgeDisagreesWithHumans", "warning", scorer="policy"),
                alert("ScoringSidecarAlignmentScoreDrop", "page", scorer="tone", agent="support-bot"),
            ]
            async with session.post(f"{base}/alerts", json=alerts) as response:
                assert response.status == 200, await response.text()
            deadline = time.monotonic() + 20
            while True:
                async with session.get(f"{base}/alerts") as response:
                    found = await response.json()
                states = {(a["labels"]["alertname"], a["labels"]["scorer"]): a["status"] for a in found}
                if len(states) == 4 and states[("JudgeDisagreesWithHumans", "policy")]["inhibitedBy"]:
                    break
                assert time.monotonic() < deadline, states
                await asyncio.sleep(0.2)
    finally:
        process.terminate()
        process.wait(10)
    assert states[("JudgeDrift", "policy")]["state"] == "active"
    assert states[("ScoringSidecarAlignmentScoreDrop", "policy")]["state"] == "suppressed"
    assert states[("ScoringSidecarAlignmentScoreDrop", "policy")]["inhibitedBy"]
    assert states[("JudgeDisagreesWithHumans", "policy")]["state"] == "suppressed"
    tone = states[("ScoringSidecarAlignmentScoreDrop", "tone")]
    assert tone["state"] == "active" and not tone["inhibitedBy"]
