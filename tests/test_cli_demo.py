"""The README's first command works with no API key and no services."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_scores_the_examples_with_the_stand_in_judge() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "demo"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "not a language model" in lines[0]
    scores = {line.split()[0]: float(line.split()[1]) for line in lines[2:5]}
    assert set(scores) == {"excellent", "partial", "poor"}
    assert scores["excellent"] > scores["partial"] > scores["poor"]
    assert all("The score is" in line for line in lines[2:5])
