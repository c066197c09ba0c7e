"""How the suite itself runs: a hung test fails by name within its timeout, the fast set leaves the slow ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_has_a_timeout(pytestconfig: pytest.Config) -> None:
    assert 0 < float(pytestconfig.getini("timeout")) <= 600


def test_a_hung_test_fails_naming_itself(tmp_path: Path) -> None:
    """What CI shows when a test hangs: its name and a timeout, not a run killed at 90 minutes."""
    (tmp_path / "test_hangs.py").write_text(
        "import time\n\n\ndef test_waits_for_nothing():\n    time.sleep(600)\n\n\ndef test_after():\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(tmp_path), "-o", "timeout=2", str(tmp_path / "test_hangs.py")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Timeout" in done.stdout and "FAILED" in done.stdout and "test_waits_for_nothing" in done.stdout
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-2000:]  # the run goes on after it


def test_the_slow_marker_is_declared_and_applied(pytestconfig: pytest.Config) -> None:
    declared = [line.split(":", 1)[0] for line in pytestconfig.getini("markers")]
    assert "slow" in declared
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", "slow",
         "tests/test_service_e2e.py", "tests/test_readme_commands.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    assert "test_kill_9_at_random_points_loses_no_score" in collected
    assert "test_the_readme_commands_run_as_written_in_a_fresh_clone" in collected
