"""The container image: the Dockerfile's stages build and the image runs, where an image builder runs here;
the documented build-push-deploy sequence names what the manifests use."""

from __future__ import annotations

import re
import shutil
import subprocess
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
