"""An instrumented app run against the scripted judge server, its records, and what the sidecar's judge was asked.

``written(setup, ...)`` runs ``produce.py`` in the setup's environment (a subprocess: the instrumentation patches
``openai`` process-wide) while the test's loop serves its model calls; the spans and log records come back as the
Collector's Kafka exporter writes them, keyed by trace id. The sidecar is configured with an ``llm-judge`` whose
template marks where each variable lands (``TEMPLATE``), so ``JudgedRun`` reads back what the judge was given in
each variable.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.testing.judge_server import JudgeServer, RecordedRequest, Reply
from tests.support.instrumented.environments import python_of
from tests.support.instrumented.matrix import Setup
from tests.support.instrumented.model import AGENT_MODEL, agent_model

__all__ = ["TEMPLATE", "JudgedRun", "Written", "judge_scorer", "judged_runs", "serve_agent_model", "written"]

_PRODUCE = Path(__file__).with_name("produce.py")
_VARIABLES = ("system", "input", "output", "tool_calls")
TEMPLATE = "\n".join(f"[{name}]\n{{{{ {name} }}}}\n[/{name}]" for name in _VARIABLES)


def judge_scorer(scope: str, scorer_id: str = "planted") -> dict[str, Any]:
    """An ``llm-judge`` over every LLM call (``span``) or agent run (``trace``) whose prompt marks each variable."""
    kinds = ["agent"] if scope == "trace" else ["inference"]
    return {
        "id": scorer_id,
        "kind": "llm-judge",
        "judge": "default",
        "options": {
            "instructions": "You check that the agent answered the request.",
            "prompt": TEMPLATE,
            "output": {"type": "boolean"},
        },
        "targets": {"kinds": kinds, "scope": scope},
    }


def serve_agent_model(judge_server: JudgeServer) -> None:
    """The app's calls answered as the scripted model; the sidecar's judge calls answered ``passed``."""
    judge_server.reset(agent_model(lambda body: Reply.json({"reason": "it answered", "passed": True})))


@dataclass(frozen=True)
class Written:
    spans: list[tuple[bytes, bytes]]  # (key, value): otlp_spans records
    logs: list[tuple[bytes, bytes]]  # otlp_logs records


async def written(setup: Setup, judge_server: JudgeServer, tag: str, workdir: Path) -> Written:
    python = await asyncio.to_thread(python_of, setup.environment)
    out = workdir / f"{setup.id}-{tag}.json"
    process = await asyncio.create_subprocess_exec(
        str(python), str(_PRODUCE),
        "--instrumentation", setup.instrumentation, "--mode", setup.mode, "--base-url", judge_server.url,
        "--tag", tag, "--out", str(out),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, f"{setup.id}: the instrumented app failed:\n{stderr.decode()[-3000:]}"
    print(f"{setup.id}: {stderr.decode().strip()}", file=sys.stderr)
    records = json.loads(out.read_text())

    def pairs(kind: str) -> list[tuple[bytes, bytes]]:
        return [(r["key"].encode(), base64.b64decode(r["value"])) for r in records[kind]]

    return Written(pairs("spans"), pairs("logs"))


@dataclass(frozen=True)
class JudgedRun:
    """What the sidecar's judge read in each variable of one run."""

    system: str
    input: str
    output: str
    tool_calls: list[str]

    @property
    def name(self) -> str:
        """The planted question's name (``chat``, ``tool``, ``planner``, ``translator``)."""
        found = re.search(r"\(question:[\w.-]+:(\w+)\)", self.input)
        return found.group(1) if found else ""


def _section(prompt: str, name: str) -> str:
    found = re.search(rf"\[{name}\]\n(.*?)\n\[/{name}\]", prompt, re.S)
    assert found is not None, f"no [{name}] in the judge's prompt:\n{prompt}"
    text = found.group(1)
    quoted = re.fullmatch(r"<untrusted_\w+>\n(.*)\n</untrusted_\w+>", text, re.S)
    return quoted.group(1) if quoted else text


def judged_runs(requests: list[RecordedRequest]) -> list[JudgedRun]:
    """The sidecar's judge requests (not the app's model calls), read back by variable."""
    runs = []
    for request in requests:
        if request.body.get("model") == AGENT_MODEL:
            continue
        prompt = request.user_prompt
        calls = _section(prompt, "tool_calls")
        runs.append(
            JudgedRun(
                system=_section(prompt, "system"),
                input=_section(prompt, "input"),
                output=_section(prompt, "output"),
                tool_calls=[] if calls.startswith("(no tool calls)") else [c for c in calls.splitlines() if c],
            )
        )
    return runs
