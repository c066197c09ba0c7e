"""``demo --serve`` and ``run``: the real service, as its own process, against the demo's broker, stand-in
judge and synthetic traffic, with the configuration the demo wrote: what a newcomer does without Docker."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from sidecar.cli import main
from tests.support.sidecar_process import free_port

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return {**env, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def _scored(metrics: str) -> float:
    return sum(
        float(match[1])
        for match in re.finditer(
            r'^scoring_sidecar_scorer_runs_total\{[^}]*outcome="scored"[^}]*\} (\S+)$', metrics, re.M
        )
    )


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return ""


def _stop(process: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return process.returncode, out


@pytest.mark.slow
def test_run_scores_the_demo_traffic_with_the_config_demo_serve_wrote(tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    metrics_port = free_port()
    demo = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "demo", "--serve", "--config-out", str(config), "--interval", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
    )
    run: subprocess.Popen[str] | None = None
    scored = [0.0]
    try:
        assert demo.stdout is not None
        banner = []
        for line in demo.stdout:  # the demo says it is ready once the broker, judge and config are there
            banner.append(line)
            if line.startswith("ready:"):
                break
        assert config.exists(), "".join(banner)
        text = "".join(banner)
        assert re.search(r"^broker: 127\.0\.0\.1:\d+", text, re.M) and re.search(
            r"^judge URL: http://127\.0\.0\.1", text, re.M
        )
        assert f"scoring-sidecar run --config {config}" in text

        run = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "run", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(METRICS_PORT=str(metrics_port)),  # the file's variables override its defaults
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and run.poll() is None:
            scored.append(_scored(_metrics(metrics_port)))
            if scored[-1] >= 20:
                break
            time.sleep(0.5)
        first = scored[-1]
        time.sleep(3)
        later = _scored(_metrics(metrics_port))
    finally:
        run_code, run_out = _stop(run, 30) if run is not None else (None, "")
        demo_code, demo_out = _stop(demo, 30)

    assert first >= 20, f"run scored {first} runs:\n{run_out[-3000:]}"
    assert later > first  # the traffic keeps flowing and the service keeps scoring it
    assert run_code == 0, run_out[-3000:]  # SIGTERM: drained, flushed, committed
    assert demo_code == 0, demo_out[-3000:]
    # The demo watches the scores topic: the records the service wrote there.
    counts = [int(n) for n in re.findall(r"(\d+) score records on agent_scores", demo_out)]
    assert counts and max(counts) > 0, demo_out[-3000:]


def test_print_config_names_its_variables_and_selects_every_demo_agent(capsys: object) -> None:
    assert main(["demo", "--print-config"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    config = yaml.safe_load(out)
    assert config["kafka"]["bootstrap_servers"] == "${KAFKA_BOOTSTRAP_SERVERS}"
    assert config["judges"]["default"]["api_base"] == "${JUDGE_API_BASE}"
    # No sampling and no agent filter on the general scorers: every synthetic agent's spans are scored.
    assert all("sampling" not in scorer for scorer in config["scorers"])
    assert [s["id"] for s in config["scorers"] if "targets" not in s] == [
        "prompt-alignment",
        "answer-relevancy",
        "toxicity",
        "completeness",
    ]
    assert main(["demo", "--config-out", "x.yaml"]) == 2


def _until_ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    banner = []
    for line in process.stdout:
        banner.append(line)
        if line.startswith("ready:"):
            break
    return "".join(banner)


def test_the_default_configuration_goes_to_a_private_directory_not_through_a_planted_symlink(tmp_path: Path) -> None:
    """The old default was a fixed name in the shared temporary directory: anyone could plant a symlink there first
    and have the demo write through it. Now: a directory of its own (mkdtemp, 0700), the file 0600, both removed
    at the stop."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    (temp / "scoring-sidecar-demo.yaml").symlink_to(victim)
    demo = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "demo", "--serve", "--interval", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(TMPDIR=str(temp)),
    )
    try:
        banner = _until_ready(demo)
        match = re.search(r"^config: (\S+)$", banner, re.M)
        assert match, banner
        config = Path(match[1])
        assert config.parent.parent == temp and config.parent.name.startswith("scoring-sidecar-demo-")
        assert config.parent.stat().st_mode & 0o777 == 0o700 and config.stat().st_mode & 0o777 == 0o600
        assert yaml.safe_load(config.read_text())["kafka"]["bootstrap_servers"]
        assert demo.stdout is not None
        for line in demo.stdout:  # one report of the traffic: a stop before the first one meets an aiokafka race
            if "traces produced" in line:
                break
    finally:
        code, out = _stop(demo, 30)
    assert code == 0, out[-3000:]
    assert victim.read_text() == "untouched"
    assert not config.parent.exists()


def test_a_config_out_that_is_a_symlink_is_refused_in_one_line(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    link = tmp_path / "demo.yaml"
    link.symlink_to(victim)
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "demo", "--serve", "--config-out", str(link)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"demo: cannot write the configuration to {link}: it is a symbolic link" in done.stderr
    assert "Traceback" not in done.stderr and victim.read_text() == "untouched"
