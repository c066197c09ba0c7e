"""A judge that goes down and comes back on the same port, and counts what it handed out.

The judge-outage tests compare the sidecar's judge metrics with this server's own tally, as an operator
compares them with the provider's bill.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.sidecar_process import free_port

Mode = Literal["healthy", "storm"]


@dataclass
class FaultyJudge:
    """``up()`` / ``down()`` (connections refused); ``mode = "storm"`` answers every call with 503."""

    port: int = field(default_factory=free_port)
    mode: Mode = "healthy"
    requests: int = 0  # calls answered (any status)
    input_tokens: int = 0  # usage handed out in successful answers
    output_tokens: int = 0
    _server: JudgeServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _reply(self, body: dict[str, Any]) -> Reply:
        self.requests += 1
        if self.mode == "storm":
            return Reply.error(503, "the judge is overloaded")
        reply = heuristic_reply(body)
        usage = reply.usage or {}
        self.input_tokens += int(usage.get("prompt_tokens", 0))
        self.output_tokens += int(usage.get("completion_tokens", 0))
        return reply

    async def up(self) -> None:
        self._server = await JudgeServer(self._reply, record=False).start(port=self.port)

    def assert_billed(self, metrics_text: str) -> None:
        """The sidecar's judge metrics are this judge's bill: every answered call and every token, once."""
        from tests.test_service_e2e import sample

        answered = sum(
            sample(metrics_text, "scoring_sidecar_judge_calls_total", {"outcome": outcome})
            for outcome in ("ok", "invalid_output", "rate_limited", "error", "timeout")
        )
        assert answered == self.requests > 0
        assert sample(metrics_text, "scoring_sidecar_judge_tokens_total", {"type": "input"}) == self.input_tokens
        assert sample(metrics_text, "scoring_sidecar_judge_tokens_total", {"type": "output"}) == self.output_tokens

    async def down(self) -> None:
        """Stop listening and close every connection (in-flight answers are finished first)."""
        if self._server is not None:
            await self._server.stop()
            self._server = None
