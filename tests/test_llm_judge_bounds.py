"""A judge written in YAML, bounded (docs/limits.md): ``validate`` refuses what a template could do without end
(memory, time, recursion, reprs) in one line and exit 2, a render stays off the event loop and within the judge's
``max_prompt_chars``, and no prompt over it reaches a judge. Through the CLI, the real judge client and the scripted
judge server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.cli import main
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.runtime.attempt import attempt_scorer
from sidecar.scorers import create_llm_judge_scorer
from sidecar.scorers.quality.prompt_alignment import create_prompt_alignment_scorer_llm
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import agent_run

HEAD = """\
judges:
  default: {model: openai/gpt-4o-mini, api_key: sk-x}
scorers:
  - id: policy
    kind: llm-judge
    judge: default
    options:
      instructions: Decide whether the answer keeps the refund policy.
      output: {type: boolean}
      prompt: |
"""


def validate(prompt: str, tmp: Path) -> tuple[int, str, float, int]:
    """``scoring-sidecar validate`` of one llm-judge whose template is ``prompt``: status, stderr, seconds, peak
    traced bytes."""
    path = tmp / "judge.yaml"
    path.write_text(HEAD + textwrap.indent(prompt, " " * 8, lambda line: True) + "\n", encoding="utf-8")
    err = io.StringIO()
    tracemalloc.start()
    started = time.monotonic()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main(["validate", "--config", str(path)])
        return status, err.getvalue(), time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# Each case of the issue: what validate used to do (a traceback, a hang, gigabytes, a repr sent), refused now.
WHY: dict[str, tuple[str, str | tuple[str, ...]]] = {
    "a gigabyte string": ("{{ output }} {{ 'a'*10**9 }}", "a repeated value would be 1000000000 long"),
    "a recursive macro": (
        "{% macro again(n) %}{{ again(n) }}{% endmacro %}{{ again(1) }} {{ output }}",
        "macro 'again' calls itself (again → again): recursion is refused",
    ),
    "macros calling each other": (
        "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}{{ output }}",
        "macro 'a' calls itself (a → b → a)",
    ),
    "a huge power": ("{{ output }} {{ 7**(7**9) }}", "7 ** 40353607 is a number of more than 4096 bits"),
    "nested range loops": (
        "{{ output }}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        # Whichever comes first on a loaded host: the steps, or the time they take.
        ("the template takes more than 100000 steps", "the template takes more than 1 s to render"),
    ),
    "lipsum without end": ("{{ output }} {{ lipsum(n=100000, html=False, min=1000, max=2000) }}", "'lipsum'"),
    "output repeated 100,000 times": ("{{ output }}" * 100_000, "bytes, over 1048576: is it the right file?"),
    "a template over its bound": ("{{ output }}" * 10_000, "the template is 120001 characters, over 100000"),
    "output repeated past the prompt's bound": (
        "{{ output }}{% for i in range(40000) %}{{ output }}{{ 'x' * 200 }}{% endfor %}",
        "the template produces more than 400000 characters",
    ),
    "lipsum printed": ("{{ output }} {{ lipsum }}", "'lipsum'"),
    "range printed": ("{{ output }} {{ range }}", "{{ range }} prints a function or object (its Python repr)"),
    "self printed": ("{{ output }} {{ self }}", "self (the template's own blocks) is not offered"),
    "a range printed": ("{{ output }} {{ range(3) }}", "the template prints a range, which would reach the judge"),
    "a recursive loop": (
        "{% for x in [[1]] recursive %}{{ loop(x) }}{% endfor %}{{ output }}",
        "a recursive loop is refused",
    ),
    "a doubling namespace": (
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ output }}",
        "a text joined with ~ would be",
    ),
    "a padded string": ("{{ output }} {{ 'a'.ljust(10**9) }}", "access to attribute 'ljust' of 'str' object is unsafe"),
    "a wide %-format": ("{{ output }} {{ '%0999999999d' % 1 }}", "a %-format width of 999999999"),
    "a centred string": ("{{ output }} {{ 'a' | center(10**9) }}", "filter 'center' is not offered"),
    "deep brackets": ("{{ output }} {{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nests too deep"),
}


@pytest.mark.parametrize("case", list(WHY))
def test_validate_refuses_in_one_line_what_a_template_could_do_without_end(tmp_path: Path, case: str) -> None:
    prompt, expected = WHY[case]
    status, err, seconds, peak = validate(prompt, tmp_path)
    assert status == 2, err
    assert "Traceback" not in err and "Error:" not in err, err
    assert any(e in err for e in ((expected,) if isinstance(expected, str) else expected)), err
    assert seconds < 15 and peak < 200 * 2**20, (seconds, peak)


def test_a_template_within_its_bounds_still_passes(tmp_path: Path) -> None:
    prompt = (
        "{% set ns = namespace(n=0) %}{% for call in tool_calls %}{% set ns.n = ns.n + 1 %}{% endfor %}"
        "{% macro quoted(v) %}[{{ v }}]{% endmacro %}{{ quoted(output) }} {{ tool_calls | length }} calls, "
        "{{ ns.n }} counted; {{ 'checked' | upper }} {{ ['a', 'b'] | join(', ') }} {{ 'x' * 3 ~ '%05d' % 7 }}"
    )
    status, err, _, _ = validate(prompt, tmp_path)
    assert status == 0, err


# -- rendering: off the event loop, within run_timeout_s and the judge's bound -----------------------------------

SLOW = "{% for i in range(100) %}{{ (range(90000) | list) | length }}{% endfor %} {{ output }}"


def _request(answer: str = "Yes.") -> ScorerRunRequest:
    run_input, run_output = agent_run("Can I get my money back?", answer)
    target = SpanTarget(trace_id="ab" * 16, span_id="cd" * 8, end_time_unix_nano=0)
    return ScorerRunRequest.model_construct(target=target, input=run_input, output=run_output)


def _judge(judge_server: JudgeServer, **model: Any) -> Any:
    from sidecar.scoring import JudgeModel

    return JudgeModel(model="openai/gpt-4o-mini", api_base=judge_server.url, api_key="sk-x", transport="http", **model)


async def test_a_slow_render_leaves_the_event_loop_free_and_the_run_timeout_holds(judge_server: JudgeServer) -> None:
    """A render near its bounds takes a good part of a second: the loop keeps serving meanwhile (the render is in a
    thread), and a run_timeout_s shorter than the render ends the run on time."""
    judge_server.script(Reply.json({"reason": "fine", "passed": True}))
    options = {"instructions": "Judge it.", "prompt": SLOW, "output": {"type": "boolean"}}
    scorer = create_llm_judge_scorer(model=_judge(judge_server), options=options)
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        started = time.monotonic()
        attempt = await attempt_scorer(scorer, _request(), timeout_s=10)
        rendered_in = time.monotonic() - started
        assert attempt.outcome == "scored", attempt.error
        timed = time.monotonic()
        cut = await attempt_scorer(scorer, _request(), timeout_s=0.05)
        cut_in = time.monotonic() - timed
    finally:
        ticking.cancel()
    assert rendered_in > 0.1  # the render did take a while ...
    assert max(gaps) < 0.1, max(gaps)  # ... and the loop was never held for it
    assert cut.outcome == "failed" and isinstance(cut.error.__cause__, TimeoutError)  # type: ignore[union-attr]
    assert cut_in < 0.1 + 0.05, cut_in


async def test_a_prompt_over_the_judges_bound_is_never_rendered_whole_nor_sent(judge_server: JudgeServer) -> None:
    options = {"instructions": "Judge it.", "prompt": "Answer: {{ output }}", "output": {"type": "boolean"}}
    scorer = create_llm_judge_scorer(model=_judge(judge_server, max_prompt_chars=2000), options=options)
    attempt = await attempt_scorer(scorer, _request("x" * 5000), timeout_s=10)
    assert attempt.outcome == "failed"
    assert "over the judge's max_prompt_chars (2000)" in str(attempt.error.__cause__)  # type: ignore[union-attr]
    assert judge_server.requests == []


async def test_a_prebuilt_scorers_prompt_over_the_judges_bound_is_not_sent(judge_server: JudgeServer) -> None:
    """Every judge call is checked, whatever built its prompt: a 5 MB answer is not sent (nor billed)."""
    scorer = create_prompt_alignment_scorer_llm(model=_judge(judge_server))
    attempt = await attempt_scorer(scorer, _request("y" * 5_000_000), timeout_s=30)
    assert attempt.outcome == "failed"
    cause = attempt.error.__cause__  # type: ignore[union-attr]
    assert type(cause).__name__ == "PromptTooLargeError" and "over the judge's max_prompt_chars (400000)" in str(cause)
    assert judge_server.requests == []


# -- property: templates built from Jinja's syntax ---------------------------------------------------------------

NUMBERS = st.sampled_from(["0", "3", "-2", "100000", "10**9", "7**9", "2**64", "(7**(7**9))"])
STRINGS = st.sampled_from(["'a'", "'%0999999999d'", "'{:>99999999}'", "'x' * 100000", "''"])
NAMES = st.sampled_from(["output", "input", "tool_calls", "loop", "self", "range", "lipsum", "dict", "ns", "m"])
FILTER_NAMES = st.sampled_from(
    ["upper", "length", "join", "center", "indent", "replace", "list", "string", "pprint", "sum", "batch",
     "wordcount", "truncate", "format", "unique", "sort", "map", "tojson", "random", "first", "int"]
)  # fmt: skip


def expressions() -> st.SearchStrategy[str]:
    leaves = st.one_of(NUMBERS, STRINGS, NAMES, st.just("range(100000)"), st.just("[1, 2, 3]"))

    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["*", "**", "+", "~", "%", "//"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            st.tuples(inner, FILTER_NAMES, st.lists(inner, max_size=2)).map(
                lambda t: f"({t[0]} | {t[1]}({', '.join(t[2])}))"
            ),
            st.tuples(inner, st.sampled_from(["ljust", "upper", "split", "format", "zfill"]), inner).map(
                lambda t: f"{t[0]}.{t[1]}({t[2]})"
            ),
            st.tuples(st.sampled_from(["m", "lipsum", "range", "dict", "namespace"]), inner).map(
                lambda t: f"{t[0]}({t[1]})"
            ),
        )

    return st.recursive(leaves, grow, max_leaves=6)


def statements() -> st.SearchStrategy[str]:
    output = expressions().map(lambda e: "{{ " + e + " }}")

    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        body = st.lists(inner, min_size=1, max_size=3).map("".join)
        return st.one_of(
            st.tuples(expressions(), body).map(lambda t: "{% for x in " + t[0] + " %}" + t[1] + "{% endfor %}"),
            st.tuples(expressions(), body).map(lambda t: "{% if " + t[0] + " %}" + t[1] + "{% endif %}"),
            st.tuples(expressions()).map(lambda t: "{% set ns.v = " + t[0] + " %}"),
            body.map(lambda b: "{% set captured %}" + b + "{% endset %}{{ captured }}{{ captured }}"),
            body.map(lambda b: "{% macro m(v=1) %}" + b + "{% endmacro %}"),
            body.map(lambda b: "{% call m() %}" + b + "{% endcall %}"),
        )

    return st.recursive(output, grow, max_leaves=8)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=statements())
def test_validate_ends_in_bounded_time_and_memory_on_any_template(tmp_path: Path, body: str) -> None:
    prompt = "{% set ns = namespace(v=0) %}" + body + " {{ output }}"
    status, err, seconds, peak = validate(prompt, tmp_path)
    assert status in (0, 2), err
    assert "Traceback" not in err, err
    assert seconds < 15, seconds
    assert peak < 300 * 2**20, peak


def test_every_case_above_names_its_template_line_or_its_bound(tmp_path: Path) -> None:
    """One problem line per case, never the Python error of the engine under it."""
    status, err, _, _ = validate(WHY["a recursive macro"][0], tmp_path)
    lines = [line for line in err.splitlines() if line.strip().startswith("- ")]
    assert status == 2 and len(lines) == 1 and "template line 1" in lines[0], err
