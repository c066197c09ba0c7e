"""deploy/ checked statically: every file parses, the dashboard and the rules use only the metric names and
labels of docs/metrics.md, every alert has its annotations, runbook and promtool unit tests, the compose
stack mounts only files that exist, the Collector writes what the sidecar reads, the Kubernetes manifests
build. The checks that need a tool (promtool, kubectl, amtool, docker compose) run when it is installed
(.ci/run installs promtool) and say so when skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.app.lifecycle import STOP_GRACE_S
from sidecar.app.supervisor import KILL_MARGIN_S

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "scoring-sidecar.json"
RULE_FILES = sorted((DEPLOY / "prometheus").glob("*.yml"))
UNIT_TESTS = sorted((DEPLOY / "prometheus" / "tests").glob("*.yml"))
COMPOSE = DEPLOY / "compose" / "compose.yaml"
COLLECTOR_CONFIGS = [
    DEPLOY / "otel-collector" / "otel-collector.yaml",
    DEPLOY / "otel-collector" / "otel-collector-phoenix.yaml",
    DEPLOY / "k8s" / "sidecar-container" / "otel-collector.yaml",
    DEPLOY / "backends" / "otel-collector-langfuse.yaml",
    DEPLOY / "backends" / "otel-collector-datadog.yaml",
    DEPLOY / "backends" / "otel-collector-mlflow.yaml",
]
SIDECAR_CONFIGS = [
    DEPLOY / "compose" / "sidecar.yaml",
    DEPLOY / "k8s" / "base" / "sidecar.yaml",
    DEPLOY / "backends" / "sidecar-langfuse.yaml",
    DEPLOY / "backends" / "sidecar-datadog.yaml",
    DEPLOY / "backends" / "sidecar-mlflow.yaml",
]
KUSTOMIZATIONS = [DEPLOY / "k8s" / "deployment", DEPLOY / "k8s" / "sidecar-container"]

# Keys of the contrib Kafka exporter (exporter/kafkaexporter/README.md, v0.124+ per-signal layout).
KAFKA_EXPORTER_KEYS = {
    "brokers", "protocol_version", "resolve_canonical_bootstrap_servers_only", "client_id", "conn_idle_timeout",
    "logs", "metrics", "traces", "topic_from_attribute", "include_metadata_keys", "record_headers",
    "partition_traces_by_id", "partition_metrics_by_resource_attributes", "partition_logs_by_resource_attributes",
    "partition_logs_by_trace_id", "record_partitioner", "tls", "auth", "metadata", "timeout", "retry_on_failure",
    "sending_queue", "producer",
}  # fmt: skip
KAFKA_SIGNAL_KEYS = {"topic", "encoding", "topic_from_metadata_key", "message_key_from_metadata_key"}
KAFKA_PRODUCER_KEYS = {
    "max_message_bytes", "max_broker_write_bytes", "required_acks", "compression", "compression_params",
    "flush_max_messages", "allow_auto_topic_creation", "linger",
}  # fmt: skip


def yaml_files() -> Iterator[Path]:
    for path in sorted(DEPLOY.rglob("*")):
        if path.suffix in (".yml", ".yaml") and path.is_file():
            yield path


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def documented_metrics() -> dict[str, tuple[str, set[str]]]:
    """name → (type, labels) from the table in docs/metrics.md."""
    metrics: dict[str, tuple[str, set[str]]] = {}
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        match = re.match(r"\| `(scoring_sidecar_\w+)` \| (\w+) \| ([^|]*) \|", line)
        if match:
            metrics[match[1]] = (match[2], set(re.findall(r"`(\w+)`", match[3])))
    assert len(metrics) >= 19, "docs/metrics.md's table changed shape"
    return metrics


def rules() -> Iterator[dict[str, Any]]:
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            yield from group["rules"]


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panel_targets() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    for panel in walk(dashboard()["panels"]):
        for target in panel.get("targets", []):
            yield panel, target


def expressions() -> Iterator[tuple[str, str]]:
    for panel, target in panel_targets():
        yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]["query"]
    for rule in rules():
        yield rule.get("record") or rule["alert"], rule["expr"]


# --- parsing -----------------------------------------------------------------------------------------------
def test_every_yaml_and_json_file_under_deploy_parses() -> None:
    yaml_count = 0
    for path in yaml_files():
        documents = list(yaml.safe_load_all(path.read_text()))
        assert documents and all(d is not None for d in documents), path
        yaml_count += 1
    assert yaml_count >= 15
    for path in DEPLOY.rglob("*.json"):
        json.loads(path.read_text())


# --- metric names ------------------------------------------------------------------------------------------
def test_dashboard_and_rules_use_only_documented_metric_names_and_labels() -> None:
    metrics = documented_metrics()
    recorded = {r["record"] for r in rules() if "record" in r}
    allowed_labels = set().union(*(labels for _, labels in metrics.values())) | {"le", "job", "instance"}
    problems = []
    for where, expr in expressions():
        for record in recorded:  # recording rules' own names (level:metric:operation) are ours
            expr = expr.replace(record, "")
        for name in set(re.findall(r"\bscoring_sidecar_\w+", expr)):
            if name in metrics:
                continue
            base, _, suffix = name.rpartition("_")
            if suffix in ("bucket", "sum", "count") and metrics.get(base, ("",))[0] == "histogram":
                continue
            problems.append(f"{where}: {name} is not in docs/metrics.md")
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr):
            if label not in allowed_labels:
                problems.append(f"{where}: label {label} is not documented")
        for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
            for label in filter(None, (s.strip() for s in group.split(","))):
                if label not in allowed_labels:
                    problems.append(f"{where}: label {label} is not documented")
    assert not problems, "\n".join(problems)


def test_recording_rules_used_by_alerts_exist() -> None:
    recorded = {r["record"] for r in rules() if "record" in r}
    for rule in rules():
        for name in re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+", rule["expr"]):
            assert name in recorded, (rule.get("alert") or rule.get("record"), name)


# --- dashboard ---------------------------------------------------------------------------------------------
def test_dashboard_has_the_promised_panels_and_variables() -> None:
    board = dashboard()
    names = {v["name"] for v in board["templating"]["list"]}
    assert {"agent", "scorer", "judge_model", "datasource"} <= names
    exprs = "\n".join(t["expr"] for _, t in panel_targets())
    for needed in (
        "scoring_sidecar_score_sum",  # mean per agent and scorer
        "scoring_sidecar_score_bucket",  # distribution
        "scoring_sidecar_scorer_runs_total",  # scored/failed/not_scorable/shed
        "scoring_sidecar_judge_tokens_total",
        "scoring_sidecar_judge_call_duration_seconds_bucket",
        'source="estimated"',
        'source="provider"',
        "scoring_sidecar_consumer_lag_records",
        "scoring_sidecar_dead_letters_total",
        "scoring_sidecar_score_latency_seconds_bucket",
    ):
        assert needed in exprs, needed
    for variable in ("$agent", "$scorer", "$judge_model"):
        assert variable in exprs, variable
    for panel, target in panel_targets():
        assert panel["datasource"]["uid"] == target["datasource"]["uid"] == "${datasource}", panel["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    # No two panels on the same cell of the grid (Grafana would push one down, out of its row).
    cells: dict[tuple[int, int], str] = {}
    for panel in board["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_grafana_provisioning_points_at_the_dashboard_and_tempo() -> None:
    datasources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yml")["datasources"]
    by_uid = {d["uid"]: d for d in datasources}
    assert by_uid["prometheus"]["type"] == "prometheus" and by_uid["tempo"]["type"] == "tempo"
    destinations = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destinations == [{"name": "trace_id", "datasourceUid": "tempo"}]
    providers = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "scoring-sidecar.yml")["providers"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in load_yaml(COMPOSE)["services"]["grafana"]["volumes"]}
    source = mounts[providers[0]["options"]["path"]]
    assert (COMPOSE.parent / source / DASHBOARD.name).resolve() == DASHBOARD


# --- alerts ------------------------------------------------------------------------------------------------
def test_every_alert_has_summary_description_runbook_and_unit_tests() -> None:
    readme = (DEPLOY / "README.md").read_text()
    unit_tests = [t for path in UNIT_TESTS for t in load_yaml(path)["tests"]]
    alerts = [r for r in rules() if "alert" in r]
    assert len(alerts) >= 7
    for alert in alerts:
        name = alert["alert"]
        assert {"summary", "description", "runbook_url"} <= set(alert["annotations"]), name
        assert alert["labels"]["severity"] in ("page", "warning", "info"), name
        anchor = f"runbook-{name.lower()}"
        assert alert["annotations"]["runbook_url"].endswith(f"#{anchor}"), name
        assert f'<a id="{anchor}"></a>' in readme, f"deploy/README.md has no runbook section for {name}"
        cases = [c for t in unit_tests for c in t.get("alert_rule_test", []) if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in cases), f"no unit test where {name} fires"
        assert any(not c["exp_alerts"] for c in cases), f"no unit test where {name} stays quiet"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    check = subprocess.run(["promtool", "check", "rules", *map(str, RULE_FILES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(["promtool", "test", "rules", *map(str, UNIT_TESTS)], capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr


@pytest.mark.skipif(
    shutil.which("amtool") is None and not os.environ.get("CI"),  # .ci/run installs it: under CI, missing fails
    reason="amtool not installed (apt-get install prometheus-alertmanager)",
)
def test_alertmanager_config_is_valid_and_routes_by_severity() -> None:
    config = str(DEPLOY / "alertmanager" / "alertmanager.yml")
    check = subprocess.run(["amtool", "check-config", config], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    for severity, receiver in (
        ("page", "scoring-sidecar-page"),
        ("warning", "scoring-sidecar-ticket"),
        ("info", "scoring-sidecar-info"),
    ):
        route = subprocess.run(
            ["amtool", "config", "routes", "test", f"--config.file={config}", f"severity={severity}"],
            capture_output=True,
            text=True,
        )
        assert route.stdout.strip() == receiver, route.stdout + route.stderr


# A pod stops within runtime.shutdown_timeout_s + STOP_GRACE_S + KILL_MARGIN_S (+ reaping): the grace an
# orchestrator gives it before its own SIGKILL is at least shutdown_timeout_s + 5 (docs/worker-lifecycle.md).
STOP_MARGIN_S = 5


def test_every_stop_grace_period_covers_the_shutdown_budget() -> None:
    assert STOP_GRACE_S + KILL_MARGIN_S + 1 <= STOP_MARGIN_S
    k8s_budget = load_yaml(DEPLOY / "k8s" / "base" / "sidecar.yaml")["runtime"]["shutdown_timeout_s"]
    for directory in KUSTOMIZATIONS:
        deployment = next(d for d in yaml.safe_load_all((directory / "deployment.yaml").read_text()) if d)
        if deployment["metadata"]["name"] != "scoring-sidecar":  # the Collector's pod runs the scorer too
            assert any(c["name"] == "scoring-sidecar" for c in deployment["spec"]["template"]["spec"]["containers"])
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= k8s_budget + STOP_MARGIN_S, directory.name
    compose_budget = load_yaml(COMPOSE.parent / "sidecar.yaml")["runtime"]["shutdown_timeout_s"]
    period = load_yaml(COMPOSE)["services"]["scoring-sidecar"]["stop_grace_period"]
    assert period.endswith("s") and int(period[:-1]) >= compose_budget + STOP_MARGIN_S


# --- compose -----------------------------------------------------------------------------------------------
def test_compose_mounts_builds_and_configs_exist() -> None:
    compose = load_yaml(COMPOSE)
    base = COMPOSE.parent
    named = set(compose.get("volumes") or {})
    expected = {
        "kafka",
        "kafka-init",
        "otel-collector",
        "scoring-sidecar",
        "prometheus",
        "alertmanager",
        "grafana",
        "tempo",
    }
    assert expected <= set(compose["services"])
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (base / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in named, f"{name}: named volume {source} is not declared"
        build = service.get("build")
        if build:
            context = base / build["context"]
            assert (context / build["dockerfile"]).is_file(), name
        for dependency in service.get("depends_on", {}):
            assert dependency in compose["services"], (name, dependency)
    # Prometheus in the stack loads the rule files and scrapes the sidecar.
    prometheus = load_yaml(base / "prometheus.yml")
    assert prometheus["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    assert "../prometheus:/etc/prometheus/rules:ro" in compose["services"]["prometheus"]["volumes"]
    targets = [t for c in prometheus["scrape_configs"] for s in c["static_configs"] for t in s["targets"]]
    assert "scoring-sidecar:9464" in targets


def docker_compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not docker_compose_available(), reason="the docker compose plugin is not installed")
def test_docker_compose_config_accepts_the_stack() -> None:
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_dockerfile_is_multi_stage_non_root_with_a_health_check() -> None:
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, re.M)) >= 2
    users = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert users and not users[-1].startswith(("root", "0"))
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert "EXPOSE 9464" in dockerfile
    for source in re.findall(r"^COPY (?!--from)(\S+)", dockerfile, re.M):
        assert (ROOT / source).exists(), source


# --- Collector ↔ sidecar -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_collector_writes_what_the_sidecar_reads(path: Path) -> None:
    collector = load_yaml(path)
    sidecar = load_yaml(SIDECAR_CONFIGS[0])["kafka"]
    kafka = collector["exporters"]["kafka"]
    assert set(kafka) <= KAFKA_EXPORTER_KEYS, set(kafka) - KAFKA_EXPORTER_KEYS
    assert set(kafka["traces"]) <= KAFKA_SIGNAL_KEYS
    assert set(kafka["producer"]) <= KAFKA_PRODUCER_KEYS
    assert kafka["traces"]["topic"] in sidecar["topics"]
    assert kafka["traces"]["encoding"] == sidecar["encoding"] == "otlp_proto"
    assert kafka["partition_traces_by_id"] is True
    assert kafka["producer"]["max_message_bytes"] < sidecar["max_record_bytes"]
    # Every pipeline uses defined components, and the traces pipeline feeds Kafka.
    for pipeline in collector["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in collector[kind], (path, component)
    assert "kafka" in collector["service"]["pipelines"]["traces"]["exporters"]


@pytest.mark.parametrize("path", SIDECAR_CONFIGS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_sidecar_configs_validate(path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["KAFKA_BOOTSTRAP_SERVERS"] = "kafka:9092"
    result = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "validate", "--config", str(path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- Kubernetes --------------------------------------------------------------------------------------------
def test_prometheusrule_matches_the_rule_files() -> None:
    rule = load_yaml(DEPLOY / "k8s" / "base" / "prometheusrule.yaml")
    groups = [g for path in RULE_FILES for g in load_yaml(path)["groups"]]
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == groups, "regenerate deploy/k8s/base/prometheusrule.yaml (deploy/README.md)"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (kustomize builds not checked)")
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_kustomize_builds_complete_manifests(directory: Path) -> None:
    result = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    documents = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = {d["kind"]: d for d in documents}
    assert {"ConfigMap", "Deployment", "PodMonitor", "PrometheusRule", "ServiceAccount"} <= set(kinds)
    config_maps = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ConfigMap"}
    deployment = kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"] + pod.get("initContainers", [])}
    sidecar = containers["scoring-sidecar"]
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["resources"]["requests"]["memory"] and sidecar["resources"]["limits"]["memory"]
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
    assert [e["secretRef"]["name"] for e in sidecar["envFrom"]] == ["scoring-sidecar-judge-keys"]
    for volume in pod["volumes"]:
        if "configMap" in volume:
            assert volume["configMap"]["name"] in config_maps, volume  # the generated (hashed) name
    config = yaml.safe_load(
        next(v for k, v in config_maps.items() if k.startswith("scoring-sidecar-config"))["data"]["sidecar.yaml"]
    )
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = kinds["PodMonitor"]["spec"]["selector"]["matchLabels"]
    assert all(pod_labels.get(k) == v for k, v in selector.items()), pod_labels
    port_names = {p["name"] for p in sidecar["ports"]}
    assert {e["port"] for e in kinds["PodMonitor"]["spec"]["podMetricsEndpoints"]} <= port_names
    if "ScaledObject" in kinds:
        trigger = kinds["ScaledObject"]["spec"]["triggers"][0]
        assert trigger["type"] == "kafka"
        assert trigger["metadata"]["consumerGroup"] == config["kafka"]["group_id"]
        assert trigger["metadata"]["topic"] in config["kafka"]["topics"]
        assert kinds["ScaledObject"]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    grace = pod["terminationGracePeriodSeconds"]
    assert grace >= config["runtime"]["shutdown_timeout_s"] + STOP_MARGIN_S
