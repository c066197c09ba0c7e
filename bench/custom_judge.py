"""A judge written in YAML against a prebuilt one-call kind: CPU per run, and what the template's rendering costs.

Two scorers on the same agent run (a request, system instructions, two tool calls with results, an answer), in
the same process, each against its own fixed judge server (``sidecar.testing.judge_server --fixed``, a separate
process on loopback, so this process's CPU time is the scorers' alone):

* ``llm-judge`` — a custom judge of the size teams write (a policy of ~1,200 characters in the template, the
  request, the answer, the system instructions, the tool calls and an attribute of the span), output
  categories: render the template, one judge call through the fast HTTP transport, validate the answer;
* ``rubric``    — the prebuilt rubric kind with three criteria: its prompt built in Python, one judge call,
  its report written without the judge.

Both run ``--runs`` times at ``--concurrency`` in ``--rounds`` interleaved rounds (load from other processes
falls on both alike); CPU per run is ``time.process_time()`` over the runs. Rendering alone is timed apart
(``--renders`` renders of the same run, its variables' text included). Goals: rendering is not what a run
costs (``render_share`` < 0.25: the judge call is), and a custom judge's run costs at most half as much again
as a prebuilt one-call run (``llm_judge_vs_rubric`` < 1.5). The last line holds the figures as ``key=value``
pairs; docs/benchmarks.md keeps them.

    .venv/bin/python bench/custom_judge.py [--runs 2000] [--concurrency 64] [--rounds 4] [--renders 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fixed_judge import start_fixed_judge
from sidecar.scorers import create_llm_judge_scorer, create_rubric_scorer
from sidecar.scorers.custom.llm_judge import LlmJudgeOptions
from sidecar.scorers.custom.llm_judge_variables import run_text
from sidecar.scoring import AgentRunInput, Scorer
from sidecar.scoring.agent import SystemMessage, ToolInvocation, assistant_message, user_message
from sidecar.scoring.judge.client import close_default_judge_clients
from sidecar.scoring.judge.model import JudgeModel
from sidecar.scoring.steps import ScorerRun

GOAL_RENDER_SHARE = 0.25
GOAL_VS_PREBUILT = 1.5

POLICY = """\
The refund policy the agent must keep:
- Refunds are accepted within 30 days of delivery, with the order number, for unopened items.
- Defective items are refunded or replaced within 90 days of delivery, whichever the customer prefers.
- Gift cards, downloadable software that was opened and personalised items are never refunded.
- Shipping costs are refunded only when the item was defective or the wrong item was sent.
- Store credit may be offered instead of a refund, never forced on the customer.
- Exceptions to any of these are decided by a supervisor; an agent never promises one.
- The agent may explain the policy, start a return within the policy, and escalate to a supervisor.
- The agent must not promise a date for a refund to reach the customer's bank.
"""

TEMPLATE = (
    POLICY
    + """
The agent ({{ span.attributes['gen_ai.agent.name'] }}) was instructed:
{{ system }}

The customer wrote:
{{ input }}

{% if tool_calls %}
The agent called these tools:
{{ tool_calls }}

{% endif %}
The agent answered:
{{ output }}

Does the answer keep the policy?"""
)

LLM_JUDGE = {
    "instructions": "You review a support agent's answers against the refund policy given in the prompt.",
    "prompt": TEMPLATE,
    "output": {"type": "categories", "labels": {"compliant": 1, "borderline": 0.5, "violation": 0}},
}
RUBRIC = {
    "criteria": [
        {"description": "Only promises refunds the policy allows"},
        {"description": "Names the order number"},
        {"description": "Offers a next step"},
    ]
}
LLM_JUDGE_REPLY = json.dumps(
    {"reason": "It starts a return within 30 days for an unopened item.", "label": "compliant"}
)
RUBRIC_REPLY = json.dumps(
    {
        "criteria": [
            {"criterion": c["description"], "satisfied": True, "required": True, "reasoning": "present"}
            for c in RUBRIC["criteria"]
        ],
        "overallAssessment": "Meets every criterion.",
    }
)
SPAN_ATTRIBUTES = {"gen_ai.agent.name": "refunds-bot"}


def agent_run() -> tuple[AgentRunInput, tuple[Any, ...]]:
    calls = (
        ToolInvocation(
            state="result",
            tool_call_id="call_1",
            tool_name="lookup_order",
            args={"order": "A-5521"},
            result={"delivered_days_ago": 10, "opened": False, "item": "headphones"},
        ),
        ToolInvocation(
            state="result",
            tool_call_id="call_2",
            tool_name="start_return",
            args={"order": "A-5521", "reason": "crackling sound"},
            result={"return_id": "R-881", "label_url": "https://example.invalid/r/881"},
        ),
    )
    run_input = AgentRunInput(
        input_messages=(
            user_message("I received the headphones 10 days ago and they crackle. Order A-5521. Can I return them?"),
        ),
        system_messages=(
            SystemMessage(content="You are the support agent of an electronics shop. Follow the refund policy."),
        ),
    )
    output = (
        assistant_message(
            "I'm sorry about that! Your order A-5521 is within 30 days, so I've started return R-881; the return "
            "label is on its way by email, and you'll get the refund once we receive the headphones.",
            tool_invocations=calls,
        ),
    )
    return run_input, output


def _model(url: str) -> JudgeModel:
    return JudgeModel(model="openai/gpt-4o-mini", api_base=url, api_key=SecretStr("sk-bench"), transport="http")


async def _drive(scorer: Scorer, runs: int, concurrency: int) -> float:
    """CPU seconds for ``runs`` runs of ``scorer`` at ``concurrency``."""
    run_input, output = agent_run()
    left = runs

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            result = await scorer.run(input=run_input, output=output, span_attributes=SPAN_ATTRIBUTES)
            assert result.score is not None

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.process_time() - started


def _render_us(renders: int) -> tuple[float, int]:
    """Microseconds of CPU per rendering of the template for one run (its variables' text included)."""
    template = LlmJudgeOptions.model_validate(LLM_JUDGE).template
    run_input, output = agent_run()
    run = ScorerRun(run_input, output, "r", span_attributes=SPAN_ATTRIBUTES)
    names = tuple(template.variables)
    prompt = ""
    started = time.process_time()
    for _ in range(renders):
        texts = {name: run_text(name, run) for name in names}
        prompt = template.render(texts, run.span_attributes, None)
    return (time.process_time() - started) / renders * 1e6, len(prompt)


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    servers = [start_fixed_judge(LLM_JUDGE_REPLY), start_fixed_judge(RUBRIC_REPLY)]
    try:
        judge = create_llm_judge_scorer(model=_model(servers[0][1]), options=LLM_JUDGE)
        rubric = create_rubric_scorer(model=_model(servers[1][1]), options=RUBRIC)
        contenders: dict[str, Scorer] = {"llm_judge": judge, "rubric": rubric}
        for scorer in contenders.values():  # warm up: connection pools, schema caches
            await _drive(scorer, args.concurrency, args.concurrency)
        cpu = dict.fromkeys(contenders, 0.0)
        per_round = max(1, args.runs // args.rounds)
        for _ in range(args.rounds):
            for name, scorer in contenders.items():
                cpu[name] += await _drive(scorer, per_round, args.concurrency)
        measured = per_round * args.rounds
    finally:
        await close_default_judge_clients()
        for process, _ in servers:
            process.terminate()
            process.wait(10)
    render_us, prompt_chars = _render_us(args.renders)
    judge_ms = cpu["llm_judge"] / measured * 1000
    rubric_ms = cpu["rubric"] / measured * 1000
    return {
        "runs": float(measured),
        "llm_judge_cpu_ms_per_run": judge_ms,
        "rubric_cpu_ms_per_run": rubric_ms,
        "llm_judge_vs_rubric": judge_ms / rubric_ms,
        "render_us": render_us,
        "render_share": render_us / 1000 / judge_ms,
        "prompt_chars": float(prompt_chars),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--renders", type=int, default=5000)
    args = parser.parse_args()
    figures = asyncio.run(main_async(args))
    print(f"{'scorer':<12} {'CPU ms/run':>10}")
    print(f"{'llm-judge':<12} {figures['llm_judge_cpu_ms_per_run']:>10.3f}")
    print(f"{'rubric':<12} {figures['rubric_cpu_ms_per_run']:>10.3f}")
    print(
        f"rendering: {figures['render_us']:.1f} µs per run ({100 * figures['render_share']:.1f} % of a custom judge's "
        f"run; a {int(figures['prompt_chars'])}-character prompt); goal < {100 * GOAL_RENDER_SHARE:.0f} %: "
        f"{'met' if figures['render_share'] < GOAL_RENDER_SHARE else 'MISSED'}"
    )
    ratio = figures["llm_judge_vs_rubric"]
    print(
        f"custom judge vs rubric: x{ratio:.2f} CPU per run; goal < x{GOAL_VS_PREBUILT:g}: "
        f"{'met' if ratio < GOAL_VS_PREBUILT else 'MISSED'}"
    )
    print(" ".join(f"{key}={value:.4g}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
