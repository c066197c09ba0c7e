"""The embedded default: prompt alignment end to end against a local judge server.

Until the streaming service lands, ``scoring-sidecar demo`` scores the reference's example agent runs
(excellent, partial and poor alignment) through the real scorer pipeline and HTTP judge client. With
no ``--judge-model`` the judge is a local stand-in server answering with a transparent heuristic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sidecar.embedded.heuristic_judge import STAND_IN_NOTICE, heuristic_reply
from sidecar.scorers import create_prompt_alignment_scorer_llm
from sidecar.scoring import JudgeExecutionSuccess, JudgeModel, ScorerRunError
from sidecar.scoring.agent import AgentRunInput, SystemMessage, assistant_message, user_message
from sidecar.scoring.judge.client import close_judge_clients
from sidecar.testing.judge_server import JudgeServer

__all__ = ["EXAMPLES", "run_demo"]


@dataclass(frozen=True)
class Example:
    name: str
    system: str
    user: str
    response: str


EXAMPLES: tuple[Example, ...] = (
    Example(
        "excellent",
        "You are a helpful coding assistant. Always provide working code examples.",
        "Write a Python function to calculate factorial with error handling for negative numbers",
        'def factorial(n):\n    """Calculate factorial of a number; raise ValueError for negative numbers."""\n'
        '    if n < 0:\n        raise ValueError("Factorial not defined for negative numbers")\n'
        "    return 1 if n in (0, 1) else n * factorial(n - 1)",
    ),
    Example(
        "partial",
        "You are a concise technical writer.",
        "List the benefits of TypeScript in bullet points",
        "TypeScript provides static typing, better IDE support, and enhanced code reliability.",
    ),
    Example(
        "poor",
        "You are a helpful coding assistant. Always document your code.",
        "Write a Python class with initialization, validation, error handling, and documentation",
        "class Example:\n    def __init__(self, value):\n        self.value = value",
    ),
)


async def run_demo(*, judge_model: str | None, api_base: str | None) -> int:
    server: JudgeServer | None = None
    if judge_model is None:
        server = await JudgeServer(heuristic_reply, record=False).start()
        model = JudgeModel(model="openai/stand-in-heuristic", api_base=server.url, transport="http")
        print(STAND_IN_NOTICE)
    else:
        model = JudgeModel(model=judge_model, api_base=api_base)
        print(f"judge: {judge_model}")
    scorer = create_prompt_alignment_scorer_llm(model=model)
    failures = 0
    print(f"{'example':<10} {'score':>6} {'tokens':>7} {'ms':>6}  reason")
    try:
        for example in EXAMPLES:
            run_input = AgentRunInput(
                input_messages=(user_message(example.user),), system_messages=(SystemMessage(content=example.system),)
            )
            started = time.perf_counter()
            try:
                result = await scorer.run(input=run_input, output=(assistant_message(example.response),))
            except ScorerRunError as error:
                failures += 1
                print(f"{example.name:<10} {'failed':>6} {'':>7} {'':>6}  {error}")
                continue
            elapsed_ms = (time.perf_counter() - started) * 1000
            tokens = sum(
                (e.usage.total_tokens or 0)
                for e in (result.judge.executions() if result.judge else ())
                if isinstance(e, JudgeExecutionSuccess)
            )
            print(f"{example.name:<10} {result.score:>6.2f} {tokens:>7} {elapsed_ms:>6.0f}  {result.reason}")
    finally:
        await close_judge_clients()
        if server is not None:
            await server.stop()
    return 1 if failures else 0
