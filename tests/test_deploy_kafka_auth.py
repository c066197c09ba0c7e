"""deploy/k8s: SASL/SCRAM and TLS to the brokers, wired from one Secret into the scoring container and KEDA.

The components ``kafka-auth`` (the scoring container) and ``kafka-auth-keda`` (plus KEDA's lag trigger) are
built into each variant with kustomize, and what they reference is checked against the example Secret and
the configuration the container reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.settings import SettingsError, load_settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
SECRET = yaml.safe_load((K8S / "kafka.secret.example.yaml").read_text())
SECRET_NAME = SECRET["metadata"]["name"]
KEYS = SECRET["stringData"]
SIDECAR_YAML = (K8S / "base" / "sidecar.yaml").read_text()

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (no kustomize)")


def build(tmp_path: Path, variant: str, component: str) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of ``variant`` with ``component`` enabled, as the kustomization's comment says."""
    relative = os.path.relpath(K8S, tmp_path)  # kustomize refuses absolute paths
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{relative}/{variant}"],
                "components": [f"{relative}/{component}"],
            }
        )
    )
    built = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def scoring_container(documents: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "scoring-sidecar"), pod


def environment_from_the_secret(container: dict[str, Any]) -> dict[str, str]:
    """What the container's environment holds when the example Secret exists: every reference resolves."""
    env = {}
    for variable in container["env"]:
        ref = variable.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None and ref["name"] == SECRET_NAME:
            assert ref["key"] in KEYS, (variable["name"], ref["key"])
            env[variable["name"]] = KEYS[ref["key"]]
    return env


@needs_kubectl
@pytest.mark.parametrize(
    ("variant", "component"), [("deployment", "kafka-auth-keda"), ("sidecar-container", "kafka-auth")]
)
def test_the_scoring_container_reads_sasl_and_tls_from_the_secret(tmp_path: Path, variant: str, component: str) -> None:
    container, pod = scoring_container(build(tmp_path, variant, component))
    env = environment_from_the_secret(container)
    assert set(env) == {
        "KAFKA_SECURITY_PROTOCOL",
        "KAFKA_SASL_MECHANISM",
        "KAFKA_SASL_USERNAME",
        "KAFKA_SASL_PASSWORD",
        "KAFKA_SSL_CAFILE",
    }
    # The CA file the configuration names is the Secret's `ca`, mounted where ssl_cafile says.
    volume = next(v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == SECRET_NAME)
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    (item,) = volume["secret"]["items"]
    assert item["key"] in KEYS and f"{mount['mountPath']}/{item['path']}" == KEYS["ssl_cafile"]
    # The configuration the container reads accepts them: SASL_SSL with SCRAM, the user, the password, the CA.
    settings = load_settings(SIDECAR_YAML, environ={"KAFKA_BOOTSTRAP_SERVERS": "kafka:9093", **env})
    security = settings.kafka.security
    assert (security.security_protocol, security.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert security.sasl_username == KEYS["username"] and security.ssl_cafile == KEYS["ssl_cafile"]
    assert security.sasl_password is not None and security.sasl_password.get_secret_value() == KEYS["password"]
    # The judge keys still come from their own Secret, whole.
    assert [e["secretRef"]["name"] for e in container["envFrom"]] == ["scoring-sidecar-judge-keys"]


@needs_kubectl
def test_keda_authenticates_its_lag_trigger_from_the_same_secret(tmp_path: Path) -> None:
    documents = build(tmp_path, "deployment", "kafka-auth-keda")
    auth = next(d for d in documents if d["kind"] == "TriggerAuthentication")
    refs = {r["parameter"]: r for r in auth["spec"]["secretTargetRef"]}
    assert set(refs) == {"sasl", "username", "password", "tls", "ca"}
    assert {r["name"] for r in refs.values()} == {SECRET_NAME}
    assert all(r["key"] in KEYS for r in refs.values())
    (trigger,) = next(d for d in documents if d["kind"] == "ScaledObject")["spec"]["triggers"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert trigger["metadata"]["consumerGroup"] == "scoring-sidecar"  # the trigger kept, not replaced


def test_the_example_secret_says_the_same_thing_to_the_sidecar_and_to_keda() -> None:
    protocol, mechanism = KEYS["security_protocol"], KEYS.get("sasl_mechanism")
    assert KEYS["tls"] == ("enable" if protocol.endswith("SSL") else "disable")
    keda_sasl = {None: "none", "PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}
    assert KEYS["sasl"] == keda_sasl[mechanism if protocol.startswith("SASL") else None]


def test_without_the_component_the_configuration_is_plaintext_and_a_half_filled_secret_names_what_is_missing() -> None:
    settings = load_settings(SIDECAR_YAML, environ={"KAFKA_BOOTSTRAP_SERVERS": "kafka:9092"})
    assert settings.kafka.security.security_protocol == "PLAINTEXT"
    with pytest.raises(SettingsError) as caught:
        load_settings(
            SIDECAR_YAML, environ={"KAFKA_BOOTSTRAP_SERVERS": "k:9093", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}
        )
    text = str(caught.value)
    for variable in ("KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"):
        assert f"{variable} is unset or empty" in text, text
