"""Shared fixtures live in tests/support/; this file only makes them visible to every test."""

import os

import pytest
from hypothesis import settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.support.broker import kafka_bootstrap, kafka_broker, new_topic, unique_name
from tests.support.judge import (
    close_judges_at_exit,
    judge_server,
    judge_server_session,
    make_judge_model,
    transport,
)
from tests.support.mlflow import mlflow, mlflow_session
from tests.support.otlp_receiver import (
    otlp_receiver,
    otlp_receiver_session,
    traces_only_receiver,
    traces_only_receiver_session,
)
from tests.support.phoenix import phoenix, phoenix_session
from tests.support.proxy import forward_proxy
from tests.support.raw_http import raw_servers
from tests.support.s3 import s3_emulator
from tests.support.tls import judge_ca

__all__ = [
    "close_judges_at_exit",
    "forward_proxy",
    "judge_ca",
    "judge_server",
    "judge_server_session",
    "kafka_bootstrap",
    "kafka_broker",
    "make_judge_model",
    "mlflow",
    "mlflow_session",
    "new_topic",
    "otlp_receiver",
    "otlp_receiver_session",
    "phoenix",
    "phoenix_session",
    "raw_servers",
    "s3_emulator",
    "traces_only_receiver",
    "traces_only_receiver_session",
    "transport",
    "unique_name",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), the tests that use the Phoenix server share one worker, so
    that one Phoenix starts (~0.5 GB, 15-25 s) instead of one per worker; so do those of the MLflow server."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if {"phoenix", "phoenix_session"} & fixtures:
            item.add_marker(pytest.mark.xdist_group("phoenix"))
        elif {"mlflow", "mlflow_session"} & fixtures:
            item.add_marker(pytest.mark.xdist_group("mlflow"))


# Property tests check what holds, not how fast: a per-example deadline fails them on a busy host (CI shares its
# cores with brokers and servers the tests start), so none, unless a test sets one.
settings.register_profile("sidecar", deadline=None)
settings.load_profile("sidecar")
