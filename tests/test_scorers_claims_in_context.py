"""What faithfulness and hallucination share beyond their pipeline (rag.claims_in_context): the reason prompt
(rag_common.create_claims_reason_prompt) and the options read once for both; their fingerprints pinned, since a
fingerprint names a scorer's score ids."""

from __future__ import annotations

from sidecar.scorers import create_faithfulness_scorer, create_hallucination_scorer
from sidecar.scorers.rag import faithfulness_prompts, hallucination_prompts
from sidecar.scorers.rag.faithfulness import FaithfulnessOptions
from sidecar.scorers.rag.rag_common import create_claims_reason_prompt
from sidecar.scoring import JudgeModel

ARGS = {"input": "Who founded Acme?", "output": "Ada, in 1990.", "context": ("Ada founded Acme.",), "score": 0.5}


def test_the_reason_prompt_quotes_what_was_traced_and_lists_its_rules_in_order() -> None:
    prompt = create_claims_reason_prompt(
        task="Explain it.",
        legend="yes: good; no: bad",
        explain="explain A",
        name="name B",
        length="be short",
        verdicts_json='[{"verdict": "yes"}]',
        **ARGS,
    )
    parts = prompt.split("\n\n")
    assert parts[0] == "Explain it."
    assert parts[1] == "Context:\n<untrusted_context>\nAda founded Acme.\n</untrusted_context>"
    assert parts[2] == "Question:\n<untrusted_question>\nWho founded Acme?\n</untrusted_question>"
    assert parts[3] == "Response:\n<untrusted_response>\nAda, in 1990.\n</untrusted_response>"
    assert parts[4] == "Score: 0.5"
    assert parts[5].startswith("Verdicts, one per claim (yes: good; no: bad):\n<untrusted_verdicts>")
    assert parts[6] == (
        "Rules:\n- explain A;\n- name B;\n- rely on the verdicts and the context, never on your own knowledge;\n"
        "- be short."
    )
    assert parts[7] == 'Reply in plain text, starting with "The score is 0.5 because".'


def test_faithfulness_and_hallucination_explain_their_own_score_in_the_shared_prompt() -> None:
    faithful = faithfulness_prompts.create_reason_prompt(scale=1, verdicts_json="[]", **ARGS)
    hallucinated = hallucination_prompts.create_reason_prompt(scale=10, verdicts_json="[]", **ARGS)
    assert faithful.startswith("Explain a faithfulness score, on a scale from 0 to 1,")
    assert "(yes: supported; no: contradicted; unsure: not in the context)" in faithful
    assert faithful.endswith("- one or two sentences, professional in tone.\n\n" + 'Reply in plain text, starting '
                             'with "The score is 0.5 because".')  # fmt: skip
    assert hallucinated.startswith("Explain a hallucination score, on a scale from 0 to 10 where higher means more")
    assert "(yes: hallucinated; no: backed by the context)" in hallucinated
    assert "- one or two sentences.\n\n" in hallucinated
    for prompt in (faithful, hallucinated):
        assert "- rely on the verdicts and the context, never on your own knowledge;" in prompt


def test_faithfulness_and_hallucination_keep_their_fingerprints_and_so_their_score_ids() -> None:
    model = JudgeModel(model="openai/gpt-4o-mini")
    assert create_faithfulness_scorer(model=model).fingerprint == "3de907d8f78c718a"
    assert create_hallucination_scorer(model=model).fingerprint == "1b2978a0f42b1da0"
    # options as a mapping (camelCase, as a configuration writes them) or as the kind's model
    assert create_faithfulness_scorer(model=model, options={"scale": 5}).fingerprint == "dce9c584f2755a73"
    assert create_hallucination_scorer(model=model, options={"scale": 5}).fingerprint == "d2684ca04b43d632"
    assert create_faithfulness_scorer(model=model, options=FaithfulnessOptions(scale=5)).fingerprint == (
        "dce9c584f2755a73"
    )
