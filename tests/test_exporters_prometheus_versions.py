"""The agent versions' gauges (exporters.prometheus.versions), fed finished runs as the service reports them and
read as Prometheus scrapes them: the comparison's estimate, bounds and verdict, the bounded version labels."""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.prometheus import SidecarMetrics
from exporters.prometheus.versions import VersionMetrics
from sidecar.app.assembly import assemble
from sidecar.app.worker_share import settings_for_worker
from sidecar.backfill.metrics import mode_labelled
from sidecar.settings import SettingsError, load_settings
from sidecar.versions.comparison import ComparisonSettings
from tests.support.versions import scored


def samples(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def only(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    values = [v for sample_labels, v in found.get(name, []) if labels.items() <= sample_labels.items()]
    assert len(values) == 1, (name, labels, found.get(name))
    return values[0]


def canary(metrics: VersionMetrics, *, seed: int = 1) -> None:
    """support-bot 1.0 alone, then 1.1 beside it: worse by 0.15 on helpfulness, toxicity up 2 points of 10."""
    rng = random.Random(seed)
    for i in range(2400):
        version = "1.0" if i < 200 or rng.random() < 0.5 else "1.1"
        worse = version == "1.1"
        metrics.run_finished(scored("helpfulness", version, rng.betavariate(8, 2) - (0.15 if worse else 0) + 0.1, i))
        metrics.run_finished(scored("toxicity", version, 10 * rng.betavariate(1, 9) + (2 if worse else 0), 10_000 + i))


def test_a_worse_canary_reads_as_a_regression_in_the_scrape() -> None:
    registry = CollectorRegistry()
    metrics = VersionMetrics(ComparisonSettings(), registry=registry)
    metrics.register_scorer("helpfulness", direction="higher")
    metrics.register_scorer("toxicity", direction="lower", scale=10)
    canary(metrics)
    found = samples(registry)
    compared = {"agent": "support-bot", "version": "1.1", "reference": "1.0"}
    for scorer in ("helpfulness", "toxicity"):
        labels = {**compared, "scorer": scorer}
        assert only(found, "scoring_sidecar_version_verdict", **labels) == -1
        lower, delta, upper = (
            only(found, f"scoring_sidecar_version_delta{suffix}", **labels) for suffix in ("_lower", "", "_upper")
        )
        assert lower < delta < upper < -0.05
        assert only(found, "scoring_sidecar_version_comparison", **labels, reference_window="concurrent") == 1
    assert only(found, "scoring_sidecar_version_delta", **compared, scorer="helpfulness") == pytest.approx(
        -0.15, abs=0.03
    )
    assert only(found, "scoring_sidecar_version_delta", **compared, scorer="toxicity") == pytest.approx(-0.2, abs=0.03)
    runs = {
        labels["version"]: value
        for labels, value in found["scoring_sidecar_version_runs"]
        if labels["scorer"] == "helpfulness"
    }
    assert set(runs) == {"1.0", "1.1"} and sum(runs.values()) == 2400
    mean = only(found, "scoring_sidecar_version_mean", agent="support-bot", scorer="toxicity", version="1.0")
    assert mean == pytest.approx(0.1, abs=0.02)  # normalised by the scale of 10


def test_runs_that_cannot_be_compared_are_left_out() -> None:
    registry = CollectorRegistry()
    metrics = VersionMetrics(ComparisonSettings(), registry=registry)
    metrics.register_scorer("helpfulness", direction="higher")
    metrics.run_finished(scored("helpfulness", None, 0.5, 1))  # no version traced
    metrics.run_finished(scored("helpfulness", "1.0", 0.5, 2, outcome="failed"))
    metrics.run_finished(scored("helpfulness", "1.0", 0.5, 3, agent="other"))  # agents past max_agent_labels
    metrics.run_finished(scored("unregistered", "1.0", 0.5, 4))
    metrics.run_finished(scored("helpfulness", "1.0", float("nan"), 5))
    assert "scoring_sidecar_version_runs" not in samples(registry)
    metrics.run_finished(scored("helpfulness", "1.0", 0.5, 6))
    metrics.run_finished(scored("helpfulness", "1.0", 0.5, 6))  # redelivered: the same score id
    assert only(samples(registry), "scoring_sidecar_version_runs", version="1.0") == 1


def test_a_thousand_versions_of_one_agent_leave_at_most_max_versions_label_values() -> None:
    registry = CollectorRegistry()
    metrics = VersionMetrics(ComparisonSettings(max_versions=4), registry=registry)
    metrics.register_scorer("helpfulness", direction="higher")
    rng = random.Random(3)
    for i in range(3000):
        metrics.run_finished(scored("helpfulness", f"build-{i // 3}", rng.random(), i))
        if i % 300 == 299:
            found = samples(registry)
            values = {
                labels[key]
                for name, series in found.items()
                if name.startswith("scoring_sidecar_version_")
                for labels, _ in series
                for key in ("version", "reference")
                if key in labels
            }
            assert len(values) <= 4, values
    assert only(samples(registry), "scoring_sidecar_version_verdict", version="build-999") == 0


def settings_yaml(**versions: Any) -> str:
    return yaml.safe_dump(
        {
            "kafka": {"bootstrap_servers": "localhost:9092", "topics": ["spans"]},
            "scorers": [{"id": "similarity", "kind": "content-similarity"}],
            "runtime": {"workers": 2},
            "versions": versions,
            "exporters": {"otlp": {"enabled": False}},
        }
    )


def test_the_assembly_feeds_the_gauges_and_splits_alpha_over_every_process() -> None:
    settings = load_settings(settings_yaml(replicas=3), environ={})
    assert settings.versions.comparison(workers=settings.runtime.workers).stream_alpha == pytest.approx(0.05 / 2 / 6)
    worker = settings_for_worker(settings, 0, 2)
    assert worker.versions.comparison(workers=worker.runtime.workers).stream_alpha == pytest.approx(0.05 / 2 / 6)
    metrics = SidecarMetrics()
    assembly = assemble(worker, metrics=metrics)
    for i in range(5):
        assembly.observer.run_finished(scored("similarity", "7.0", 0.5, i))
    assert only(samples(metrics.registry), "scoring_sidecar_version_runs", scorer="similarity", version="7.0") == 5
    # A backfill's registry adds mode="backfill" to every series: the comparison's own label is another name.
    backfill = samples(mode_labelled(metrics.registry))
    assert only(backfill, "scoring_sidecar_version_runs", version="7.0", mode="backfill") == 5
    off = SidecarMetrics()
    assemble(load_settings(settings_yaml(compare=False), environ={}), metrics=off).observer.run_finished(
        scored("similarity", "7.0", 0.5, 0)
    )
    assert "scoring_sidecar_version_runs" not in samples(off.registry)


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ({"attributes": ["gen_ai.agent.version"]}, "versions.attributes[0]"),
        ({"max_versions": 2}, "versions.max_versions"),
        ({"alpha": 0}, "versions.alpha"),
        ({"reference": {"support-bot": " "}}, "versions.reference"),
    ],
)
def test_the_block_refuses_what_cannot_work(versions: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("[", r"\[")):
        load_settings(settings_yaml(**versions), environ={})
