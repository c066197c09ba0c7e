"""The README's first command: ``scoring-sidecar demo`` on a fresh machine, with no API key and no services."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sidecar.core import ScoredRun, ScorerRunRequest, SpanTarget
from sidecar.core.observers import Observers
from sidecar.demo import DemoOptions, DemoSummary, percentile, render_summary, run_demo
from sidecar.embedded.heuristic_judge import heuristic_reply
from sidecar.embedded.traffic import AGENTS
from sidecar.scoring import AgentRunInput, JudgeModel
from sidecar.scoring.judge.protocol import ChatRequest
from sidecar.scoring.types import JudgeCall, JudgeUsage, ScorerRunResult
from sidecar.testing.judge_server import JudgeServer
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.sidecar_process import free_port

# The demo's realistic set; tool-call accuracy targets the agent that calls tools.
SCORERS = ("prompt-alignment", "answer-relevancy", "toxicity", "completeness")


def _session_processes(session_id: int) -> list[str]:
    """Processes (pid and command) still in the session the demo led: the broker is one of its children."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # after "pid (comm)": state ppid pgrp session ...
        if int(fields[3]) == session_id and fields[0] != "Z":
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


def _final_table(stdout: str) -> dict[tuple[str, str], tuple[int, float]]:
    """(agent, scorer) → (scored, average) from the final summary."""
    final = stdout.split("── final summary", 1)[1]
    rows: dict[tuple[str, str], tuple[int, float]] = {}
    for line in final.splitlines():
        match = re.match(r"^(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+|-)$", line)
        if match and (match[2] in SCORERS or match[2] == "tool-call-accuracy"):
            rows[(match[1], match[2])] = (int(match[3]), float(match[7]) if match[7] != "-" else -1.0)
    return rows


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process accounting reads /proc")
@pytest.mark.slow
def test_demo_runs_the_service_on_synthetic_traffic_and_stops_cleanly() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "demo", "--duration", "20", "--metrics-port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # the demo leads a session: whatever it leaves behind is found by session id
    )
    metrics_seen = ""
    release = 'scoring_sidecar_version_runs{agent="support-bot",scorer="tool-call-accuracy",version="3.2.0"}'
    try:
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    text = response.read().decode()
                if 'outcome="scored"' in text:
                    metrics_seen = text
                if release in text:  # the demo's release is scored, counted by version (docs/versions.md)
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.5)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    elapsed = time.monotonic() - started

    assert process.returncode == 0, stderr
    assert 20 <= elapsed < 40, elapsed
    assert "not a language model" in stdout.splitlines()[1]
    assert "scoring_sidecar_scorer_runs_total" in metrics_seen, "/metrics did not answer with scores while running"
    assert "scoring_sidecar_judge_tokens_total" in metrics_seen
    assert release in metrics_seen, "support-bot's second version was not counted while the demo ran"
    assert "release: support-bot 3.2.0 beside its first version" in stdout
    table = _final_table(stdout)
    for agent in AGENTS:
        for scorer in SCORERS:
            scored, average = table.get((agent.name, scorer), (0, -1.0))
            assert scored > 0, f"no {scorer} scores for {agent.name}:\n{stdout}"
            assert 0.0 <= average <= 1.0
    assert table.get(("support-bot", "tool-call-accuracy"), (0, -1.0))[0] > 0, stdout
    assert not any(scorer == "tool-call-accuracy" and agent != "support-bot" for agent, scorer in table)
    assert re.search(r"judge openai/stand-in-heuristic: \d+ calls, 0 errors, tokens \d+ in", stdout), stdout
    assert "judge call latency (last 60s): p50" in stdout and "score latency" in stdout
    assert "dead letters: 0" in stdout
    # Nothing went wrong: nothing to explain.
    assert "last error:" not in stdout and "circuit open" not in stdout and "runs shed" not in stdout
    assert "Traceback" not in stderr
    assert _session_processes(process.pid) == []


def test_percentiles_are_nearest_rank() -> None:
    values = [0.5, 0.1, 0.9, 0.3]
    assert percentile(0.5, values) == 0.3 and percentile(0.99, values) == 0.9 and percentile(0.0, values) == 0.1
    assert percentile(0.5, []) is None


def scored_run(scorer: str, agent: str, outcome: str, score: float | None, *, age_s: float = 0.0) -> ScoredRun:
    target = SpanTarget(
        trace_id="0" * 31 + "1", span_id="0" * 15 + "1", end_time_unix_nano=time.time_ns() - int(age_s * 1e9)
    )
    result = ScorerRunResult(run_id="r", score=score) if score is not None else None
    return ScoredRun(
        request=ScorerRunRequest(target=target, input=AgentRunInput(), output=()),
        scorer_id=scorer,
        scorer_name=scorer,
        scorer_fingerprint="f",
        outcome=outcome,  # type: ignore[arg-type]
        result=result,
        error=None,
        started_unix_nano=0,
        finished_unix_nano=0,
        agent_label=agent,
    )


def test_summary_listens_to_the_event_stream() -> None:
    now = [1000.0]
    summary = DemoSummary(clock=lambda: now[0])
    events = Observers([summary])
    events.run_finished(scored_run("prompt-alignment", "support-bot", "scored", 0.4, age_s=2.0))
    events.run_finished(scored_run("prompt-alignment", "support-bot", "scored", 0.8, age_s=4.0))
    events.run_finished(scored_run("prompt-alignment", "support-bot", "failed", None))
    events.runs_skipped("prompt-alignment", "travel-agent", "shed", 1, judge="openai/x")
    events.judge_refused("openai/x", "spend_cap")
    events.judge_call_finished(
        JudgeModel(model="openai/x"),
        ChatRequest(messages=(), scorer="prompt-alignment", step="analyze"),
        JudgeCall(outcome="ok", duration_s=0.2, usage=JudgeUsage(input_tokens=10, output_tokens=3)),
    )
    events.judge_call_finished(
        JudgeModel(model="openai/x"),
        ChatRequest(messages=()),
        JudgeCall(outcome="connection_error", duration_s=0.01),
    )
    cell = summary.cells[("support-bot", "prompt-alignment")]
    assert (cell.scored, cell.failed) == (2, 1)
    assert cell.average == pytest.approx(0.6)
    assert summary.cells[("travel-agent", "prompt-alignment")].shed == 1
    assert (summary.tokens_in, summary.tokens_out, summary.judge_errors) == (10, 3, 1)
    text = render_summary(summary, elapsed_s=3, produced=5, judge_label="openai/x", stand_in=False)
    assert re.search(r"support-bot\s+prompt-alignment\s+2\s+1\s+0\s+0\s+0.60", text), text
    assert "judge openai/x: 2 calls, 1 errors, tokens 10 in / 3 out" in text
    # The shed column's reason, and the failed call, in words.
    assert "judge openai/x: 1 runs shed at its spend cap" in text and "last error: connection_error" in text
    assert re.search(r"score latency \(span end → export, last 60s\) prompt-alignment: p50 [23]\.\d\ds", text), text
    # Latencies cover the last minute only: the table says how the pipeline is doing now.
    now[0] += 61
    later = render_summary(summary, elapsed_s=64, produced=5, judge_label="openai/x", stand_in=False)
    assert "judge call latency (last 60s): p50 -" in later and "export, last 60s) prompt-alignment: p50 -" in later
    empty = render_summary(DemoSummary(), elapsed_s=0, produced=0, judge_label="j", stand_in=True, final=True)
    assert "(no scores yet)" in empty and "est. cost $0 (stand-in)" in empty


def test_summary_names_an_unreachable_or_paused_judge_not_a_limit() -> None:
    """Runs waiting on a judge nobody answers are not "shed by limits": the summary says the circuit is open,
    since when, and the judge's last error; a 401 pauses the judge, and the summary says what to fix."""
    now = [500.0]
    summary = DemoSummary(clock=lambda: now[0])
    events = Observers([summary])
    model = JudgeModel(model="openai/x")
    for _ in range(5):
        events.judge_call_finished(
            model,
            ChatRequest(messages=()),
            JudgeCall(
                outcome="connection_error",
                duration_s=0.01,
                error_name="APIConnectionError",
                error_message="Cannot connect to host judge.internal:443",
            ),
        )
    events.judge_state_changed("openai/x", "open")
    now[0] += 42
    text = render_summary(summary, elapsed_s=50, produced=10, judge_label="openai/x", stand_in=False)
    note = next(line for line in text.splitlines() if line.startswith("judge openai/x: circuit open"))
    assert "circuit open for 42s: the judge is unreachable or failing, its runs are held" in note
    assert "5 of 5 calls failed (5 connection error)" in note
    assert note.endswith("last error: APIConnectionError, no HTTP answer: Cannot connect to host judge.internal:443")
    assert "shed" not in note and "spend cap" not in note

    events.judge_call_finished(
        model,
        ChatRequest(messages=()),
        JudgeCall(outcome="error", duration_s=0.01, status_code=401, error_name="AuthenticationError"),
    )
    events.judge_state_changed("openai/x", "paused")
    text = render_summary(summary, elapsed_s=51, produced=10, judge_label="openai/x", stand_in=False)
    assert "judge openai/x: paused for 0s on a fatal provider error (401/402/403/404): fix the key" in text
    assert "last error: AuthenticationError, HTTP 401" in text


@pytest.mark.slow
async def test_demo_with_a_judge_model_goes_through_the_configured_judge(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--judge-model`` (here an OpenAI-compatible loopback server via ``--api-base``) replaces the stand-in;
    ``--otlp-endpoint`` exports the scorer-run spans."""
    judge_server.reset(heuristic_reply)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-demo-test")
    out = io.StringIO()
    options = DemoOptions(
        judge_model="openai/gpt-4o-mini",
        api_base=judge_server.url,
        duration_s=6,
        metrics_port=0,
        interval_s=2,
        rate=10,
        max_records=30,  # reached after 3 s: production stops, scoring goes on
        otlp_endpoint=otlp_receiver.endpoint("http/protobuf"),
        otlp_protocol="http/protobuf",
    )
    assert await run_demo(options, out=out) == 0
    text = out.getvalue()
    assert "not a language model" not in text.split("── final summary")[0].splitlines()[1]
    assert "judge: openai/gpt-4o-mini (litellm; spend cap $1.0/h)" in text
    assert re.search(r"judge openai/gpt-4o-mini: [1-9]\d* calls, 0 errors", text), text
    assert re.search(r"est\. cost \$0\.\d{4}$", text, re.MULTILINE), text  # priced at gpt-4o-mini list prices
    assert "produced 30 traces (--max-records)" in text
    # 6 s of run, then the drain of what is still in flight (under a second at this rate).
    assert re.search(r"── final summary after [67]s: 30 traces produced, 30 records consumed", text), text
    assert text.count("── summary after") >= 2  # the live table, every --interval
    assert judge_server.requests and judge_server.requests[0].headers["Authorization"] == "Bearer sk-demo-test"
    # The demo's reviewer labels some runs, some against the judge on purpose: the join pairs them with the scores.
    assert re.search(
        r"judge–human agreement \(the demo's reviewer.*prompt-alignment 0\.\d\d of [1-9]\d* pairs", text
    ), text
    # And prompt alignment's canary: the synthetic agents' exchanges, labelled, scored through the live judge.
    assert re.search(r"judge canary of prompt-alignment: agrees with [01]\.\d\d of its \d+ labelled items", text), text
    scored = {agent for (agent, scorer), (n, _) in _final_table(text).items() if n and scorer == "prompt-alignment"}
    assert scored == {a.name for a in AGENTS}
    assert f"OTLP export: {otlp_receiver.endpoint('http/protobuf')} (http/protobuf)" in text
    names = {span.name for span in otlp_receiver.spans}
    assert {"scorer run: 'prompt-alignment'", "scorer run: 'completeness'"} <= names, names


async def test_sigint_stops_the_demo_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    out = io.StringIO()
    demo = asyncio.create_task(run_demo(DemoOptions(metrics_port=0, interval_s=60, rate=10), out=out))
    deadline = time.monotonic() + 20
    while "scorers:" not in out.getvalue():  # started: its signal handlers are installed
        assert not demo.done() and time.monotonic() < deadline, out.getvalue()
        await asyncio.sleep(0.1)
    await asyncio.sleep(2)
    os.kill(os.getpid(), signal.SIGINT)
    started = time.monotonic()
    assert await asyncio.wait_for(demo, 20) == 0
    assert time.monotonic() - started < 10
    text = out.getvalue()
    assert "stopping: producer, then the service" in text and "── final summary" in text
    assert "not a language model" in text


def test_the_summary_says_which_scorers_read_lower_as_better() -> None:
    """Toxicity at 0.00 is the good news: the table says lower is better for it (and for user frustration, a
    conversation judge), not for the others."""
    from sidecar.demo.config import demo_settings, stand_in_judge_config
    from sidecar.demo.summary import lower_is_better

    settings = demo_settings(
        bootstrap="127.0.0.1:9", judge=stand_in_judge_config("http://127.0.0.1:9/v1"), metrics_host="h", metrics_port=0
    )
    assert lower_is_better(settings) == {"toxicity", "user-frustration"}
    summary = DemoSummary(lower_is_better=lower_is_better(settings))
    events = Observers([summary])
    events.run_finished(scored_run("prompt-alignment", "support-bot", "scored", 0.9))
    before = render_summary(summary, elapsed_s=1, produced=1, judge_label="j", stand_in=True)
    assert "lower is better" not in before  # no toxicity row yet: nothing to mark
    events.run_finished(scored_run("toxicity", "support-bot", "scored", 0.0))
    text = render_summary(summary, elapsed_s=2, produced=2, judge_label="j", stand_in=True)
    assert "lower is better for toxicity; higher for the others" in text, text
    assert re.search(r"support-bot\s+toxicity\s+1\s+0\s+0\s+0\s+0.00$", text, re.MULTILINE), text


def test_a_taken_metrics_port_names_the_demos_own_flag_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The demo has no configuration file: the advice is `demo --metrics-port`, and no URL was printed first."""
    import socket

    from sidecar.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        assert main(["demo", "--duration", "5", "--metrics-port", str(port)]) == 2
    assert time.monotonic() - started < 5  # before the broker starts
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == (
        f"demo: cannot serve /metrics on 127.0.0.1:{port}: the port is taken (is another demo or sidecar running?): "
        "pass demo --metrics-port N (0: a free port)"
    ), captured.err
    assert "exporters.prometheus" not in captured.err and "run --metrics-port" not in captured.err
    assert "metrics: http" not in captured.out and "Traceback" not in captured.err


class _AnswersWhenPrinted(io.StringIO):
    """Output that fetches the metrics URL (once, no retry) the moment the demo prints it: connection refused
    if nothing listens there yet."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched: list[tuple[str, int | str]] = []
        self.threads: list[threading.Thread] = []

    def _fetch(self, url: str) -> None:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                self.fetched.append((url, response.status))
        except OSError as exc:
            self.fetched.append((url, repr(exc)))

    def write(self, text: str) -> int:
        match = re.search(r"^metrics: (http://\S+/metrics)", text, re.MULTILINE)
        if match:  # the demo's loop serves the URL: fetch from a thread, not from inside its write
            self.threads.append(threading.Thread(target=self._fetch, args=(match[1],)))
            self.threads[-1].start()
        return super().write(text)


async def test_the_metrics_url_is_printed_once_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    out = _AnswersWhenPrinted()
    options = DemoOptions(metrics_port=0, duration_s=2, interval_s=60, rate=5, max_records=5)
    assert await run_demo(options, out=out) == 0
    for thread in out.threads:
        thread.join(10)
    assert len(out.fetched) == 1 and out.fetched[0][1] == 200, (out.fetched, out.getvalue())
    assert out.getvalue().index("scorers:") < out.getvalue().index("metrics: http")


def test_demo_serve_names_the_command_as_this_shell_can_run_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started as `.venv/bin/scoring-sidecar demo --serve` with no venv activated, the bare name would be
    `command not found`: the hint repeats the path it was started by."""
    from sidecar.demo.command import runnable_command

    script = Path(sys.executable).parent / "scoring-sidecar"
    if not script.exists():
        pytest.skip("the package's console script is not installed next to this interpreter")
    monkeypatch.setattr(sys, "argv", [str(script), "demo", "--serve"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert runnable_command() == str(script)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert runnable_command() == "scoring-sidecar"


async def test_an_empty_openai_key_means_the_stand_in_said_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a shell or a compose file leaves it: the variable set, its value empty. Not a key for the real judge.
    monkeypatch.setenv("OPENAI_API_KEY", "")
    out = io.StringIO()
    options = DemoOptions(metrics_port=0, duration_s=2, interval_s=60, rate=5, max_records=5)
    assert await run_demo(options, out=out) == 0
    text = out.getvalue()
    notices = [line for line in text.splitlines() if "OPENAI_API_KEY" in line]
    assert notices == [
        "OPENAI_API_KEY is set but empty: judging with the local stand-in (set the key, or pass --judge-model)"
    ], text
    assert "not a language model" in text  # the stand-in's own notice: no call went to OpenAI
