"""The test-only environments of the real instrumentation packages: one small venv each, made once per machine.

Several of these packages pin their dependencies tightly and against each other (``opentelemetry-instrumentation-
openai-v2`` 2.4b0 needs ``opentelemetry-util-genai<1.2b0``, the OpenAI Agents instrumentation 1.3b0; OpenLLMetry 0.52
and 0.62 are one package), and none belongs in the project's own environment (an instrumented ``openai`` in the test
process would instrument the judge's client too). So each lives in its own venv, built from a lock file in
``requirements/`` (every package pinned, as resolved), under a cache directory keyed by the lock's hash: a changed
lock makes a new venv, an unchanged one is reused across runs. A venv is marked complete only once its install
succeeded; a lock file serialises the builds of parallel test workers.

``python -m tests.support.instrumented.environments`` builds them all (``.ci/run`` does, and says how long it took).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

__all__ = ["ENVIRONMENTS", "cache_root", "python_of"]

_HERE = Path(__file__).parent
ENVIRONMENTS: tuple[str, ...] = tuple(sorted(p.stem for p in (_HERE / "requirements").glob("*.txt")))
_DONE = ".complete"


def cache_root() -> Path:
    """``$SCORING_SIDECAR_TEST_CACHE``, else ``$XDG_CACHE_HOME`` (``~/.cache``) ``/scoring-sidecar-tests``."""
    explicit = os.environ.get("SCORING_SIDECAR_TEST_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "scoring-sidecar-tests"


def _lock_file(name: str) -> Path:
    return _HERE / "requirements" / f"{name}.txt"


def _home(name: str) -> Path:
    lock = _lock_file(name).read_bytes()
    key = hashlib.sha256(lock + sys.version.encode()).hexdigest()[:16]
    return cache_root() / "instrumented" / f"{name}-{key}"


def python_of(name: str) -> Path:
    """The interpreter of environment ``name``, its venv built first when this machine has none for its lock."""
    home = _home(name)
    python = home / "bin" / "python"
    if (home / _DONE).exists():
        return python
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # another worker may be building it
        if not (home / _DONE).exists():
            _build(name, home)
    return python


def _build(name: str, home: Path) -> None:
    venv.EnvBuilder(clear=True, with_pip=True).create(home)
    install = [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(
        [*install, "--no-deps", "-r", str(_lock_file(name))], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the test environment {name} in {home} failed:\n{done.stderr[-3000:]}")
    (home / _DONE).write_text(_lock_file(name).read_text())


def main() -> None:
    for name in ENVIRONMENTS:
        started = time.monotonic()
        fresh = not (_home(name) / _DONE).exists()
        python = python_of(name)
        took = f"built in {time.monotonic() - started:.0f} s" if fresh else "already built"
        print(f"instrumented environment {name}: {python} ({took})", flush=True)


if __name__ == "__main__":
    main()
