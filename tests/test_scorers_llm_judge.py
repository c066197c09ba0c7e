"""``kind: llm-judge`` through the real judge client against the scripted judge server: what the judge reads
(every variable, quoted as data), how each output type scores, and answers outside the type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.trace import Tracer

from exporters.prometheus import SidecarMetrics
from sidecar.app.assembly import assemble
from sidecar.conventions import Selection
from sidecar.conventions.trace_runs import group_by_trace, trace_runs
from sidecar.core import ScorerRunRequest, SpanTarget
from sidecar.core import names as n
from sidecar.ingest import decode_traces
from sidecar.runtime.attempt import attempt_scorer
from sidecar.scorers import create_llm_judge_scorer
from sidecar.scorers.context import REQUEST_CONTEXT_KEY
from sidecar.scorers.custom.llm_judge_template import TemplateProblems, compile_template
from sidecar.scorers.custom.llm_judge_variables import run_text
from sidecar.scoring import AgentRunInput, ScorerRunError, ScorerRunResult
from sidecar.scoring.agent import SystemMessage, ToolInvocation, assistant_message, user_message
from sidecar.scoring.prompting import quote_untrusted
from sidecar.scoring.steps import ScorerRun
from sidecar.scoring.types import to_json_value
from sidecar.settings import load_eval_settings
from sidecar.testing.judge_server import JudgeServer, Reply
from tests.support.agent_runs import INJECTION, agent_run, quoted
from tests.support.otel import otlp_proto, record_spans

POLICY = "You check support answers against the refund policy: refunds within 30 days, never more."
CATEGORIES = {"type": "categories", "labels": {"compliant": 1.0, "borderline": 0.5, "violation": 0.0}}


def options(prompt: str = "Request: {{ input }}\nAnswer: {{ output }}", **extra: Any) -> dict[str, Any]:
    return {"instructions": POLICY, "prompt": prompt, "output": CATEGORIES, **extra}


async def judged(scorer: Any, question: str = "Can I get my money back?", answer: str = "Yes.") -> ScorerRunResult:
    run_input, run_output = agent_run(question, answer)
    result: ScorerRunResult = await scorer.run(input=run_input, output=run_output)
    return result


# -- what the judge reads ----------------------------------------------------------------------------------------


def _trace_with_llm_child_tools_and_documents(tracer: Tracer) -> None:
    """An OpenInference agent span with only its request and answer; its system instructions on its LLM child,
    a tool call on a TOOL span, a document on a RETRIEVER span."""
    with tracer.start_as_current_span(
        "support agent",
        attributes={
            n.OPENINFERENCE_SPAN_KIND: "AGENT",
            n.OI_AGENT_NAME: "refunds-bot",
            "app.tenant": "acme",
            n.INPUT_VALUE: "I bought it 40 days ago, refund please",
            n.OUTPUT_VALUE: "Sure, I refunded you in full.",
        },
    ):
        with tracer.start_as_current_span(
            "retrieve",
            attributes={
                n.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
                "retrieval.documents.0.document.content": "Refunds are accepted within 30 days of purchase.",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "lookup_order",
            attributes={
                n.OPENINFERENCE_SPAN_KIND: "TOOL",
                "tool.name": "lookup_order",
                n.INPUT_VALUE: json.dumps({"order": "A-17"}),
                n.OUTPUT_VALUE: json.dumps({"bought_days_ago": 40}),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "llm",
            attributes={
                n.OPENINFERENCE_SPAN_KIND: "LLM",
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "Follow the refund policy strictly.",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": "I bought it 40 days ago, refund please",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "Sure, I refunded you in full.",
            },
        ):
            pass


EVERY_VARIABLE = """Policy check.
System: {{ system }}
Request: {{ input }}
Answer: {{ output }}
Tools:
{{ tool_calls }}
Documents:
{{ context }}
Agent: {{ span.attributes['gen_ai.agent.name'] }} / {{ span.attributes['app.tenant'] }}
Runtime: {{ resource.attributes['telemetry.sdk.language'] }}"""


async def test_the_prompt_holds_every_variable_of_a_trace_run(judge_server: JudgeServer, make_judge_model) -> None:
    """A whole-trace run, assembled from real SDK spans as ingest keeps them: the system instructions come from
    the LLM child, the tool call with its arguments and result from the TOOL span, the document from the
    RETRIEVER span, attributes by key from the agent span and its resource."""
    traces = decode_traces(otlp_proto(record_spans(_trace_with_llm_child_tools_and_documents)), "otlp_proto")
    [spans] = group_by_trace(traces, resource_attributes={"telemetry.sdk.language"}).values()
    result = trace_runs(
        spans, Selection(), ready_reason="root_idle", span_attributes={"gen_ai.agent.name", "app.tenant"}
    )
    [request] = result.runs
    judge_server.script(Reply.json({"reason": "It refunds after 40 days.", "passed": False}))
    scorer = create_llm_judge_scorer(
        model=make_judge_model(), options=options(EVERY_VARIABLE, output={"type": "boolean"})
    )
    attempt = await attempt_scorer(
        scorer, request, timeout_s=10, request_context={REQUEST_CONTEXT_KEY: list(request.context)}
    )
    assert attempt.outcome == "scored" and attempt.result is not None
    assert (attempt.result.score, attempt.result.label) == (0.0, "fail")
    prompt = judge_server.requests[0].user_prompt
    assert quoted(prompt, "system") == "Follow the refund policy strictly."
    assert quoted(prompt, "input") == "I bought it 40 days ago, refund please"
    assert quoted(prompt, "output") == "Sure, I refunded you in full."
    assert quoted(prompt, "tool_calls") == 'lookup_order({"order": "A-17"}) → {"bought_days_ago": 40}'
    assert quoted(prompt, "context") == "[1] Refunds are accepted within 30 days of purchase."
    # The agent span has no gen_ai.agent.name: read as "not set", the tenant as written.
    assert prompt.count("<untrusted_span_attribute>") == 2
    assert "<untrusted_span_attribute>\n(not set)\n</untrusted_span_attribute> / " in prompt
    assert "<untrusted_span_attribute>\nacme\n</untrusted_span_attribute>" in prompt
    assert quoted(prompt, "resource_attribute") == "python"
    assert prompt.startswith("Policy check.\nSystem: <untrusted_system>")
    system = judge_server.requests[0].system_prompt or ""
    assert system.startswith(POLICY) and '"passed": true or false' in system and "<untrusted_*>" in system


async def test_list_variables_iterate_one_quoted_item_at_a_time(judge_server: JudgeServer, make_judge_model) -> None:
    calls = (
        ToolInvocation(state="result", tool_call_id="1", tool_name="search", args={"q": "refund"}, result=["policy"]),
        ToolInvocation(state="call", tool_call_id="2", tool_name="refund", args={"amount": 40}),
    )
    run_input = AgentRunInput(
        input_messages=(user_message("refund please"),),
        remembered_messages=(user_message("hello", id="u0"), assistant_message("Hi! How can I help?", id="a0")),
        system_messages=(SystemMessage(content="Be strict."),),
    )
    output = (assistant_message("Refunded.", tool_invocations=calls),)
    template = (
        "{% for call in tool_calls %}{{ loop.index }}. {{ call }}\n{% endfor %}"
        "{{ tool_calls | length }} calls; conversation:\n{{ messages }}"
    )
    judge_server.script(Reply.json({"reason": "ok", "label": "compliant"}))
    scorer = create_llm_judge_scorer(model=make_judge_model(), options=options(template))
    result = await scorer.run(input=run_input, output=output)
    assert (result.score, result.label, result.reason) == (1.0, "compliant", "ok")
    prompt = judge_server.requests[0].user_prompt
    assert prompt.startswith(
        '1. <untrusted_tool_call>\nsearch({"q": "refund"}) → ["policy"]\n</untrusted_tool_call>\n'
        '2. <untrusted_tool_call>\nrefund({"amount": 40}) → (no result)\n</untrusted_tool_call>\n2 calls;'
    )
    assert quoted(prompt, "messages") == "user: hello\nassistant: Hi! How can I help?\nuser: refund please"


async def test_a_run_without_a_variable_reads_as_none_and_the_template_can_test_it(
    judge_server: JudgeServer, make_judge_model
) -> None:
    template = (
        "{{ output }}\n{% if tool_calls %}\nTools: {{ tool_calls }}\n{% else %}\nNo tools were used.\n{% endif %}"
    )
    judge_server.script(Reply.json({"reason": "ok", "label": "compliant"}))
    scorer = create_llm_judge_scorer(model=make_judge_model(), options=options(template))
    await judged(scorer, answer="")
    prompt = judge_server.requests[0].user_prompt
    assert prompt == "<untrusted_output>\n(no answer)\n</untrusted_output>\nNo tools were used."


# -- output types ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("label", "score"), [("compliant", 1.0), ("borderline", 0.5), ("violation", 0.0)])
async def test_each_category_scores_as_declared(
    judge_server: JudgeServer, make_judge_model, label: str, score: float
) -> None:
    judge_server.script(Reply.json({"reason": f"judged {label}", "label": label}))
    result = await judged(create_llm_judge_scorer(model=make_judge_model(), options=options()))
    assert (result.score, result.label, result.reason) == (score, label, f"judged {label}")
    assert result.analyze_step_result is not None
    assert len(judge_server.requests) == 1  # one judge call: the score and the reason come from its answer
    schema = judge_server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["reason", "label"]
    assert schema["properties"]["label"]["enum"] == ["compliant", "borderline", "violation"]


@pytest.mark.parametrize(("answer", "score"), [(1, 0.0), (4, 0.75), (5, 1.0), (2.5, 0.375)])
async def test_a_number_is_normalised_from_its_range_then_scaled(
    judge_server: JudgeServer, make_judge_model, answer: float, score: float
) -> None:
    judge_server.script(Reply.json({"reason": "r", "score": answer}))
    opts = options(output={"type": "number", "min": 1, "max": 5})
    result = await judged(create_llm_judge_scorer(model=make_judge_model(), options=opts))
    assert (result.score, result.label) == (score, None)
    judge_server.script(Reply.json({"reason": "r", "score": answer}))
    scaled = await judged(create_llm_judge_scorer(model=make_judge_model(), options={**opts, "scale": 10}))
    assert scaled.score == pytest.approx(score * 10)


@pytest.mark.parametrize(("passed", "score", "label"), [(True, 1.0, "pass"), (False, 0.0, "fail")])
async def test_a_boolean_is_one_or_zero_labelled_pass_or_fail(
    judge_server: JudgeServer, make_judge_model, passed: bool, score: float, label: str
) -> None:
    judge_server.script(Reply.json({"reason": "r", "passed": passed}))
    result = await judged(
        create_llm_judge_scorer(model=make_judge_model(), options=options(output={"type": "boolean"}))
    )
    assert (result.score, result.label) == (score, label)


TIED = {"type": "categories", "labels": {"fine": 1, "violation": 0, "good": 1}}


@pytest.mark.parametrize(
    ("output", "better", "said", "enum"),
    [
        ({"type": "number", "min": 1, "max": 5}, "higher", '"score": a number from 1 to 5 (higher is better)', None),
        ({"type": "number", "min": 0, "max": 10}, "lower", '"score": a number from 0 to 10 (lower is better)', None),
        ({"type": "boolean"}, "higher", '"passed": true or false (true is better)', None),
        ({"type": "boolean"}, "lower", '"passed": true or false (false is better)', None),
        (
            {"type": "categories", "labels": {"borderline": 0.5, "violation": 0, "compliant": 1}},
            "higher",
            '"label": exactly one of "compliant", "borderline", "violation" (from best to worst)',
            ["compliant", "borderline", "violation"],
        ),
        (
            {"type": "categories", "labels": {"borderline": 0.5, "violation": 0, "compliant": 1}},
            "lower",
            '"label": exactly one of "violation", "borderline", "compliant" (from best to worst)',
            ["violation", "borderline", "compliant"],
        ),
        (
            TIED,
            "higher",
            '"label": exactly one of "fine", "good", "violation" (from best to worst)',
            ["fine", "good", "violation"],
        ),
        (
            TIED,
            "lower",
            '"label": exactly one of "violation", "fine", "good" (from best to worst)',
            ["violation", "fine", "good"],
        ),
    ],
)
async def test_the_judge_is_told_which_way_is_better(
    judge_server: JudgeServer,
    make_judge_model,
    output: dict[str, Any],
    better: str,
    said: str,
    enum: list[str] | None,
) -> None:
    """The contract docs/custom-judges.md states, and the stand-in judge reads: the answer format in the system
    message names the better way (labels from best to worst by their scores and ``better``, labels of one score
    in their declared order), and the schema's enum lists the labels in that order; a label still scores as
    declared."""
    answers = {"number": {"score": 1}, "boolean": {"passed": True}, "categories": {"label": "violation"}}
    judge_server.script(Reply.json({"reason": "r", **answers[output["type"]]}))
    scorer = create_llm_judge_scorer(model=make_judge_model(), options=options(output=output, better=better))
    result = await judged(scorer)
    body = judge_server.requests[0].body
    system = next(m["content"] for m in body["messages"] if m["role"] == "system")
    assert said in system, system
    labels = body["response_format"]["json_schema"]["schema"]["properties"].get("label", {}).get("enum")
    assert labels == enum
    if output["type"] == "categories":
        assert (result.score, result.label) == (0.0, "violation")


@pytest.mark.parametrize(
    ("output", "answer", "problem"),
    [
        (CATEGORIES, {"reason": "r", "label": "acceptable"}, "label"),
        ({"type": "number", "min": 1, "max": 5}, {"reason": "r", "score": 7}, "must be a number from 1 to 5"),
        ({"type": "boolean"}, {"reason": "r", "passed": "yes"}, "passed"),
    ],
)
async def test_an_answer_outside_the_type_is_invalid_output_and_counted(
    judge_server: JudgeServer, output: dict[str, Any], answer: dict[str, Any], problem: str
) -> None:
    """Through the assembly as the service runs it: both attempts (native schema, then the fallback) answer
    outside the type; the run fails with invalid_output, and the metrics count both calls so."""
    yaml = f"""
judges:
  default: {{model: openai/gpt-4o-mini, api_base: "{judge_server.url}", api_key: sk-test}}
scorers:
  - id: refund-policy
    kind: llm-judge
    judge: default
    options:
      instructions: {json.dumps(POLICY)}
      prompt: "{{{{ output }}}}"
      output: {json.dumps(output)}
"""
    metrics = SidecarMetrics()
    assembly = assemble(load_eval_settings(yaml), metrics=metrics)
    [configured] = assembly.scorers
    judge_server.script(Reply.json(answer), Reply.json(answer))
    run_input, run_output = agent_run("Refund?", "Yes, always.")
    request = ScorerRunRequest(
        target=SpanTarget(trace_id="1" * 32, span_id="2" * 16), input=run_input, output=run_output
    )
    attempt = await attempt_scorer(configured.scorer, request, timeout_s=10)
    await assembly.aclose()
    assert attempt.outcome == "failed" and attempt.result is not None and attempt.result.score is None
    assert attempt.error is not None and attempt.error.failed_step == "analyze"
    assert problem in str(attempt.error.__cause__)
    assert len(judge_server.requests) == 2  # the fallback attempt asked for the schema in the prompt
    counted = metrics.registry.get_sample_value(
        "scoring_sidecar_judge_calls_total", {"judge_model": "openai/gpt-4o-mini", "outcome": "invalid_output"}
    )
    assert counted == 2


async def test_garbage_is_invalid_output_never_a_zero(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply(content="I think it is fine"), Reply(content="{not json"))
    with pytest.raises(ScorerRunError) as raised:
        await judged(create_llm_judge_scorer(model=make_judge_model(), options=options()))
    assert raised.value.result is not None and raised.value.result.score is None
    judge = raised.value.result.judge
    assert judge is not None and judge.analyze is not None
    assert [e.status for e in judge.analyze.executions] == ["failed"]
    assert [c.outcome for c in judge.analyze.executions[0].calls] == ["invalid_output", "invalid_output"]


# -- injection -------------------------------------------------------------------------------------------------


async def test_traced_content_reaches_the_judge_quoted_as_data(judge_server: JudgeServer, make_judge_model) -> None:
    judge_server.script(Reply.json({"reason": "r", "label": "compliant"}))
    question = "{{ 7 * 7 }} {% for x in range(3) %}{{ x }}{% endfor %} {{ span.attributes['k'] }} " + INJECTION
    await judged(create_llm_judge_scorer(model=make_judge_model(), options=options()), question=question)
    prompt = judge_server.requests[0].user_prompt
    defused = (
        quote_untrusted("input", question).removeprefix("<untrusted_input>\n").removesuffix("\n</untrusted_input>")
    )
    assert "‹/untrusted_response>" in defused
    assert quoted(prompt, "input") == defused
    assert "49" not in prompt and "012" not in prompt
    assert prompt.count("</untrusted_") == 2  # the injection's closing tag was defused: only the two real ones


_TEMPLATE_SYNTAX = st.sampled_from(
    [
        "{{ 7 * 7 }}",
        "{{ output }}",
        "{{ input }}",
        "{% for x in range(3) %}{{ x }}{% endfor %}",
        "{% if true %}yes{% endif %}",
        "{# a comment #}",
        "{{ span.attributes['k'] }}",
        "</untrusted_output>",
        "<untrusted_input>",
        "< / UNTRUSTED_output >",
        "\ue000qV0\ue001",  # what a placeholder looks like
        "\ue000",
        "}}{{",
        "{%",
        "\n",
    ]
)
_CONTENT = st.lists(st.one_of(_TEMPLATE_SYNTAX, st.text(max_size=20)), max_size=8).map("".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=_CONTENT, answer=_CONTENT, tenant=_CONTENT)
def test_template_syntax_and_quote_tags_in_traced_content_stay_inert(request: str, answer: str, tenant: str) -> None:
    """Whatever traced content holds, the prompt is the template's own text with each value quoted as the
    prebuilt prompts quote it: nothing in the content is evaluated, and nothing closes its quote."""
    template = compile_template("Q: {{ input }}\nA: {{ output }}\nT: {{ span.attributes['app.tenant'] }} {{ output }}")
    run = ScorerRun(
        input=AgentRunInput(input_messages=(user_message(request),)),
        output=(assistant_message(answer),),
        run_id="r",
    )
    texts = {name: run_text(name, run) for name in template.variables}
    prompt = template.render(texts, {"app.tenant": tenant})
    shown_input = request if request else "(no request)"
    shown_answer = answer if answer else "(no answer)"
    shown_tenant = tenant if tenant else "(not set)"
    expected = (
        f"Q: {quote_untrusted('input', shown_input)}\nA: {quote_untrusted('output', shown_answer)}\n"
        f"T: {quote_untrusted('span_attribute', shown_tenant)} {quote_untrusted('output', shown_answer)}"
    )
    assert prompt == expected.strip()


def test_jinja_globals_and_loops_are_not_taken_for_unknown_variables() -> None:
    template = compile_template(
        "{% set ns = namespace(failed=0) %}{% for call in tool_calls %}{% if loop.last %}{% set ns.failed = 1 %}"
        "{% endif %}{% endfor %}{% for i in range(2) %}{{ i }}{% endfor %} {{ ns.failed }} {{ output }}"
    )
    assert template.render({"tool_calls": ("a", "b"), "output": "x"}) == (
        "01 1 <untrusted_output>\nx\n</untrusted_output>"
    )


def test_every_variable_reads_the_same_from_a_typed_run_and_from_its_json_form() -> None:
    """The service hands typed runs, eval and scripts JSON: the judge gets one prompt either way, a tool call that
    failed included."""
    calls = (
        ToolInvocation(
            state="result", tool_call_id="1", tool_name="refund", args={"id": 3}, result={"error": "denied"}
        ),
        ToolInvocation(state="result", tool_call_id="2", tool_name="search", args={"q": "policy"}, result=["30 days"]),
    )
    run_input = AgentRunInput(
        input_messages=(user_message("Refund order 3?"),),
        system_messages=(SystemMessage(content="You are a support agent."),),
    )
    run_output = (assistant_message("I could not refund it.", tool_invocations=calls),)
    typed = ScorerRun(input=run_input, output=run_output, run_id="r")
    as_json = ScorerRun(input=to_json_value(run_input), output=to_json_value(run_output), run_id="r")
    for name in ("input", "output", "system", "messages", "tool_calls", "conversation"):
        assert run_text(name, typed) == run_text(name, as_json), name
    assert run_text("tool_calls", typed)[0] == 'refund({"id": 3}) → error: denied'


@pytest.mark.parametrize(
    "template",
    ["{{ tool_calls | list }}", "{{ output | pprint }}", "{{ tool_calls | map('string') | list }}",
     "{{ output | wordcount }}"],
)  # fmt: skip
def test_a_filter_that_would_send_something_else_than_the_variables_text_is_refused(template: str) -> None:
    """An object's address, a placeholder or a count instead of the traced text: refused when the configuration
    is loaded, not sent to the judge on every run."""
    with pytest.raises(TemplateProblems, match=r"print (it|variables) as (it is|they are)"):
        compile_template(template)
