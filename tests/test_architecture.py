"""The layers of docs/architecture.md, as pyproject.toml's import-linter contracts state them.

The tree keeps its contracts (``lint-imports``, well under a second, so it runs here as well as in CI);
every package of ``sidecar`` has a place in the layers (import-linter's own ``exhaustive`` check needs
``containers``, which this two-package layout cannot use); and each contract bites: a copy of the tree
with one bad import added breaks it, the copy without it keeps every contract.
"""

from __future__ import annotations

import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import sidecar

ROOT = Path(__file__).resolve().parents[1]
# The console script of the environment running the tests (a venv's bin/ need not be on PATH).
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert config["root_packages"] == ["sidecar", "exporters"]
    return {contract["id"]: contract for contract in config["contracts"]}


def lint(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # --no-cache: nothing written beside the tree, and no graph left over from another copy.
    # cwd first on sys.path (lint-imports puts it there; PYTHONPATH too) so the copy under `root`
    # is analysed, not the editable install.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", "pyproject.toml", "--no-cache", "--no-logo", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_tree_keeps_every_contract() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(contracts())} kept, 0 broken" in result.stdout, result.stdout


def test_every_package_has_a_layer_and_scoring_is_kept_from_all_of_them() -> None:
    layered = {name.strip() for layer in contracts()["layers"]["layers"] for name in layer.replace(":", "|").split("|")}
    packages = {f"sidecar.{module.name}" for module in pkgutil.iter_modules(sidecar.__path__)}
    assert packages | {"exporters"} == layered
    forbidden_to_scoring = set(contracts()["scoring"]["forbidden_modules"])
    assert forbidden_to_scoring == (packages | {"exporters"}) - {"sidecar.scoring"}


def copy_tree(destination: Path) -> Path:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("sidecar", "exporters"):
        shutil.copytree(ROOT / package, destination / package, ignore=skip)
    shutil.copy2(ROOT / "pyproject.toml", destination / "pyproject.toml")
    return destination


def test_the_copy_keeps_every_contract(tmp_path: Path) -> None:
    # The bad-import cases below fail because of the one import they add, not because of the copy.
    result = lint(copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


# (contract id, new module in the copy, its source). Each module exists only in the copy, so the report
# naming it proves the copy was analysed; some import lazily, inside a function, as the tree itself does.
BAD_IMPORTS = [
    pytest.param(
        "exporters",
        "exporters/_bad_import.py",
        "from sidecar.runtime.service import run_service\n",
        id="exporters-import-the-engine",
    ),
    pytest.param(
        "exporters",
        "exporters/_bad_import.py",
        "def scorers() -> object:\n    from sidecar.scorers import registry\n\n    return registry\n",
        id="exporters-import-scorers-lazily",
    ),
    pytest.param(
        "scoring",
        "sidecar/scoring/_bad_import.py",
        "def ids() -> object:\n    from sidecar.core import scored\n\n    return scored\n",
        id="scoring-imports-the-score-contract-lazily",
    ),
    pytest.param(
        "layers",
        "sidecar/runtime/_bad_import.py",
        "import exporters.prometheus\n",
        id="runtime-imports-its-sibling-exporters",
    ),
    pytest.param(
        "layers",
        "sidecar/ingest/_bad_import.py",
        "def engine() -> object:\n    from sidecar.runtime import service\n\n    return service\n",
        id="ingest-imports-upward-lazily",
    ),
    pytest.param(
        "layers",
        "sidecar/embedded/_bad_import.py",
        "from sidecar.demo import run_demo\n",
        id="embedded-imports-the-demo",
    ),
    pytest.param(
        "layers",
        "sidecar/eval/_bad_import.py",
        "from sidecar.demo import STAND_IN_MODEL\n",
        id="eval-imports-its-sibling-demo",
    ),
    pytest.param(
        "runtime",
        "sidecar/runtime/claims.py",  # overwritten in the copy: the layers name the runtime's own modules
        "from sidecar.runtime.dispatch import RunDispatcher\n",
        id="runtime-bookkeeping-imports-the-dispatcher",
    ),
    pytest.param(
        "runtime",
        "sidecar/runtime/intake.py",
        "def handler() -> object:\n    from sidecar.runtime import records\n\n    return records\n",
        id="runtime-intake-imports-the-record-handler-lazily",
    ),
    pytest.param(
        "runtime",
        "sidecar/runtime/sessions/_bad_import.py",
        "from sidecar.runtime.stages.trace import TraceStage\n",
        id="runtime-conversations-import-the-trace-stage-above-them",
    ),
    pytest.param(
        "sessions",
        "sidecar/runtime/sessions/windows.py",  # overwritten in the copy
        "def stage() -> object:\n    from sidecar.runtime.sessions import stage\n\n    return stage\n",
        id="conversation-windows-import-stage-2-lazily",
    ),
    pytest.param(
        "layers",
        "sidecar/runtime/sessions/_bad_import.py",
        "from exporters.session_turns import SessionTurnPublisher\n",
        id="runtime-conversations-import-the-turn-publisher-they-are-given",
    ),
    pytest.param(
        "layers",
        "sidecar/runtime/_bad_settings.py",
        "from sidecar.settings import Settings\n",
        id="runtime-imports-the-settings-above-it",
    ),
    pytest.param(
        "stages",
        "sidecar/runtime/stages/base.py",  # overwritten in the copy: the interface imports a stage
        "def stage() -> object:\n    from sidecar.runtime.stages import span\n\n    return span\n",
        id="the-stage-interface-imports-a-stage-lazily",
    ),
    pytest.param(
        "runtime",
        "sidecar/runtime/stages/_bad_import.py",
        "from sidecar.runtime.records import RecordHandler\n",
        id="a-stage-imports-the-record-handler-above-it",
    ),
    pytest.param(
        "scorers",
        "sidecar/scorers/rag/_bad_import.py",
        "from sidecar.scorers.quality.toxicity import toxicity_score\n",
        id="a-scorer-family-imports-another",
    ),
    pytest.param(
        "scorers",
        "sidecar/scorers/registry.py",  # overwritten in the copy: the registry lists kinds without importing them
        "def kinds() -> object:\n    from sidecar.scorers import catalog\n\n    return catalog\n",
        id="the-registry-imports-the-catalog-above-the-families-lazily",
    ),
    pytest.param(
        "support",
        "sidecar/app/_bad_import.py",
        "from sidecar.testing.judge_server import JudgeServer\n",
        id="app-imports-test-support",
    ),
]


@pytest.mark.parametrize(("contract", "path", "source"), BAD_IMPORTS)
def test_a_bad_import_breaks_its_contract(tmp_path: Path, contract: str, path: str, source: str) -> None:
    root = copy_tree(tmp_path)
    (root / path).write_text(source)
    module = path.removesuffix(".py").replace("/", ".")

    result = lint(root, "--contract", contract)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken" in result.stdout, result.stdout
    # Long contract names wrap in the report: compare with the whitespace collapsed.
    assert f"{contracts()[contract]['name']} BROKEN" in " ".join(result.stdout.split()), result.stdout
    assert module in result.stdout, result.stdout


# Where the word a configuration writes under ``targets.scope`` may be compared: the stages (which map it to what
# the engine does) and the settings that parse it. Anywhere else, code asks a stage (``facts_of``) instead.
_SCOPE_TEST = re.compile(r"\bscope\s*(==|!=)|\.scope\s+(not\s+)?in\b")
_SCOPE_HOMES = ("sidecar/runtime/stages/", "sidecar/settings/")


def test_no_module_outside_the_stages_and_the_settings_tests_a_scope_word() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in ("sidecar", "exporters")
        for path in sorted((ROOT / package).rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(_SCOPE_HOMES)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _SCOPE_TEST.search(line)
    ]
    assert not found, "scope tested outside the stages:\n" + "\n".join(found)


def test_the_scope_walker_finds_a_scope_test_where_there_is_one() -> None:
    for line in ('if configured.scope == "trace":', "if scope != 'span':", "x = s.scope in wanted"):
        assert _SCOPE_TEST.search(line), line
    assert not _SCOPE_TEST.search("scope_of(x) == 2")
