"""The README's commands, run as written in a fresh clone with a fresh virtualenv, the way a newcomer runs them.

The commands come from the README itself (its ``bash`` blocks), so a command that stops working, or a README
that drifts from what works, fails here. The virtualenv installs from the package registries. The one liberty
taken: the test command's ``pytest`` only collects the suite (``--collect-only``), since running the whole
suite inside one of its own tests would never end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end >= 0 else len(README)]


def commands(text: str) -> list[str]:
    """The commands of the ``bash`` blocks in ``text``, one per line once continuation lines are joined."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip() and not command.lstrip().startswith("#"):
                found.append(command.strip())
    return found


SETUP = commands(section("Set up on a fresh machine"))
NEXT_TO_AGENTS = commands(section("Run it next to your agents"))
OWN_JUDGE = commands(section("Your own judge in YAML"))
OFFLINE = [c for c in commands(section("Offline evaluation")) if "--stand-in-judge" in c]  # the others need a key


def test_the_readme_gives_two_set_up_commands_and_ci_runs_the_second() -> None:
    """One installs what the demo needs and runs it; one installs the dev extra and runs the tests, and is
    the command CI runs."""
    assert len(SETUP) == 2, SETUP
    demo, tests = SETUP
    assert ".venv/bin/scoring-sidecar demo" in demo and "[dev]" not in demo
    assert "'.[dev]'" in tests and ".venv/bin/pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci, "the README's test command is not a line of .ci/run"
    assert ci[-1] == tests, "the README's test command is not what .ci/run ends with"
    # Every command calls the virtualenv's programs by path: nothing assumes an activated venv.
    for command in NEXT_TO_AGENTS + OFFLINE:
        assert command.startswith(".venv/bin/"), command


def fresh_clone(destination: Path) -> Path:
    """The repository's files (committed or not, ignored ones left out), without its virtualenv."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = destination / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def newcomer_environment() -> dict[str, str]:
    """A shell without this test run's virtualenv, import path or keys: only what a newcomer's has."""
    ours = {str(Path(sys.executable).parent), os.environ.get("VIRTUAL_ENV", "") + "/bin"}
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in ours)
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "LITELLM_LOCAL_MODEL_COST_MAP", "PYTEST_", "JUDGE_", "KAFKA_", "METRICS_")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(dropped) and not k.endswith("_API_KEY") and k != "PATH"
    }
    env["PATH"] = path
    return env


def run(command: str, cwd: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def run_until_started_then_sigterm(command: str, cwd: Path, env: dict[str, str]) -> str:
    """A command that serves until SIGTERM (``run``): started, left until it says it waits for its broker (the
    configuration loaded, the metrics served), then stopped as an orchestrator stops it."""
    process = subprocess.Popen(
        ["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 120
    for line in process.stdout:
        seen.append(line)
        if "waiting for the Kafka broker" in line or "joined consumer group" in line or time.monotonic() > deadline:
            break
    os.killpg(process.pid, signal.SIGTERM)
    rest, _ = process.communicate(timeout=60)
    output = "".join(seen) + rest
    assert process.returncode == 0, f"`{command}` exited {process.returncode}:\n{output[-3000:]}"
    return output


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two installs from the registries and the demo's minute
def test_the_readme_commands_run_as_written_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    env = newcomer_environment()
    demo, tests = SETUP

    # 1. The demo: its own install (no dev extra), then a minute of the embedded default.
    done = run(demo, clone, env, timeout_s=900)
    assert "not a language model" in done.stdout and "── final summary" in done.stdout, done.stdout[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not (clone / ".venv" / "bin" / "pytest").exists()  # what the demo needs only

    # 2. Next to your agents, from the same virtualenv.
    for command in NEXT_TO_AGENTS:
        if " run " in command:
            output = run_until_started_then_sigterm(command, clone, env)
            assert "Traceback" not in output, output[-3000:]
        else:
            output = run(command, clone, env, timeout_s=300).stdout
            assert output.startswith("config OK"), output
    validate_own, preview_own = OWN_JUDGE
    assert run(validate_own, clone, env, timeout_s=300).stdout.startswith("config OK")
    previewed = run(preview_own, clone, env, timeout_s=300).stdout
    assert "refund-policy" in previewed and "label" in previewed, previewed
    assert len(OFFLINE) >= 2, OFFLINE  # the RAG kinds and the conversation judges
    for command in OFFLINE:
        output = run(command, clone, env, timeout_s=300).stdout
        assert re.search(r"\d+ items? x \d+ scorers? in ", output), output

    # 3. The tests: the dev extra, then the suite, collected.
    install, _, pytest_command = tests.rpartition(" && ")
    run(install, clone, env, timeout_s=1200)
    collected = run(pytest_command + " --collect-only -q", clone, env, timeout_s=600).stdout
    count = re.search(r"(\d+) tests? collected", collected)
    assert count and int(count.group(1)) > 1000, collected[-3000:]
