"""Judge fixtures: one scripted OpenAI-compatible server per test session, reset per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from pydantic import SecretStr

from sidecar.scoring.judge.client import JudgeClient
from sidecar.scoring.judge.model import JudgeModel
from sidecar.testing.judge_server import JudgeServer

# A key shaped like a real one: tests grep logs, records and errors for it.
SECRET_KEY = "sk-test-9f8e7d6c5b4a39281706f5e4d3c2b1a0SECRET"

JudgeModelFactory = Callable[..., JudgeModel]


@pytest_asyncio.fixture(scope="session")
async def judge_server_session() -> AsyncIterator[JudgeServer]:
    server = await JudgeServer().start()
    yield server
    await server.stop()


@pytest.fixture
def judge_server(judge_server_session: JudgeServer) -> JudgeServer:
    judge_server_session.reset()
    return judge_server_session


@pytest.fixture(params=["http", "litellm"])
def transport(request: pytest.FixtureRequest) -> str:
    """Both client paths run the same scenarios against the same server."""
    return str(request.param)


@pytest.fixture
def make_judge_model(judge_server: JudgeServer, transport: str) -> JudgeModelFactory:
    def make(**overrides: Any) -> JudgeModel:
        settings: dict[str, Any] = {
            "model": "openai/gpt-4o-mini",
            "api_base": judge_server.url,
            "api_key": SecretStr(SECRET_KEY),
            "timeout_s": 2.0,
            "max_retries": 2,
            "backoff_base_s": 0.01,
            "backoff_max_s": 0.05,
            "transport": transport,
        }
        settings.update(overrides)
        return JudgeModel(**settings)

    return make


_OPENED: list[JudgeClient] = []


def judge_client(model: JudgeModel, **kwargs: Any) -> JudgeClient:
    """A judge client whose connections are closed at the end of the test session (as an assembly's are
    when the service stops)."""
    client = JudgeClient(model, **kwargs)
    _OPENED.append(client)
    return client


@pytest_asyncio.fixture(scope="session", autouse=True)
async def close_judges_at_exit() -> AsyncIterator[None]:
    yield
    from sidecar.scoring.judge.client import close_default_judge_clients

    await close_default_judge_clients()
    for client in _OPENED:
        await client.aclose()
